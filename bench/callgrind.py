"""Instructions inside the cache's calls under valgrind's callgrind: what bench/events_instructions.py and
bench/policy_instructions.py share (the replayed lifecycle, the counted run, callgrind_annotate's rows).

Callgrind counts only while a call of CALLS is on the stack (`--toggle-collect` on their compiled entry
points), so the counts need the compiled core and are deterministic: two builds compare on a loaded
machine where CPU times do not.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

CALLS = ("match_prefix", "lock", "alloc", "insert", "unlock", "take_events")


def lifecycle(cache: Any, reqs: list, drain: bool = False) -> int:
    """`radixkv bench`'s replay (match the prompt, lock, alloc the rest, insert, unlock; `drain`: take the
    events after each request); returns the tokens hit. Exits unless the compiled core runs."""
    import torch

    from radixkv.core_loader import state

    if not state()[0]:
        sys.exit(f"the compiled core is not running ({state()[1]}): build it first (python -m radixkv.build)")
    hit, pages, page = 0, cache.config.num_pages, cache.config.page_size
    for req in reqs:
        n = len(req.tokens)
        if -(-n // page) > pages:
            continue
        r = cache.match_prefix(req.tokens[:req.prompt_len])
        cache.lock(r.node)
        slots = torch.cat([r.slots, cache.alloc(n - r.length)])
        cache.insert(req.tokens, slots)
        cache.unlock(r.node)
        if drain:
            cache.take_events()
        hit += r.length
    return hit


def collect(script: str, args: list[str], dest: str) -> tuple[int, str]:
    """Run `python script args` under callgrind, its output file at `dest`: (instructions inside CALLS,
    the child's stdout)."""
    toggles = [f"--toggle-collect=CPyPy_cache___RadixCache___{c}" for c in CALLS]
    out = subprocess.run(["valgrind", "--tool=callgrind", *toggles, f"--callgrind-out-file={dest}",
                          sys.executable, script, *args], capture_output=True, text=True, env=os.environ)
    got = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or got is None:
        sys.exit(f"valgrind run failed ({' '.join(args)}): {out.stderr[-400:]}")
    return int(got.group(1)), out.stdout


def annotate(path: str, inclusive: bool, top: int) -> list[tuple[int, str]]:
    """callgrind_annotate's `top` costliest functions: (instructions, `file:function` with the file's base name)."""
    ann = subprocess.run(["callgrind_annotate", "--threshold=100", f"--inclusive={'yes' if inclusive else 'no'}", path],
                         capture_output=True, text=True).stdout
    rows = re.findall(r"^\s*([\d,]+) \([^)]*\)\s+(\S.*?)(?: \[[^]]*\])?$", ann, re.M)
    return [(int(n.replace(",", "")), _short(fn)) for n, fn in rows if "PROGRAM TOTALS" not in fn][:top]


def compiled_inclusive(path: str, top: int) -> list[tuple[int, str]]:
    """The `top` compiled core functions (mypyc's CPyDef_ entry points) with the most inclusive instructions."""
    seen: dict[str, int] = {}  # callgrind lists a function once per object it was entered from
    for k, fn in annotate(path, True, 400):
        if "CPyDef_" in fn:
            seen.setdefault(fn.partition("CPyDef_")[2] + " (inclusive)", k)
    return [(k, fn) for fn, k in seen.items()][:top]


def _short(fn: str) -> str:
    file, _, name = fn.rpartition(":")
    return name if file in ("", "???") else f"{os.path.basename(file)}:{name}"

