#!/usr/bin/env python3
"""SGLang's own radix caches replaying a radixkv trace: the peer of `radixkv bench --sglang`.

A standalone script (the standard library, torch and sglang; nothing of radixkv), run by the
interpreter that imports SGLang: `make sglang` builds `.venv-sglang` (sglang from PyPI with
--no-deps, nothing of it copied here), and radixkv/bench/sglang_peer.py runs this file there, or
in-process when `import sglang` works in radixkv's own interpreter.

Backends (--backend, comma-separated):
  radix         sglang.srt.mem_cache.radix_cache.RadixCache (the classic Python tree)
  unified-rust  UnifiedRadixCache on the Rust TreeCore (SGLang's serving default since 0.5.2x)
  unified-py    UnifiedRadixCache on the Python TreeCore

Per trace line {"tokens": [...], "prompt_len": n}, the lifecycle of radixkv.bench.runner:
match_prefix(prompt) -> lock -> the prefix's slot ids -> slots for the rest from a free stack,
evicting the shortfall when short -> insert(tokens, slots) -> free what the tree did not take
(duplicates, the partial last page) -> unlock. Every call into the cache is timed; the JSON report
on stdout gives per backend and capacity the token hit rate, requests, seconds inside each kind of
call, and a leak check (evict everything: every slot must be back).

    .venv-sglang/bin/python radixkv/bench/sglang_harness.py trace.jsonl --capacity 4096 --backend radix
    .venv-sglang/bin/python radixkv/bench/sglang_harness.py --check      # SGLang imports: print its version
"""

from __future__ import annotations

import argparse
import gc
import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import sys
import time
import types
import warnings
from array import array

OPS = ("match_prefix", "lock", "alloc", "evict", "insert", "free", "unlock")
CLOCKS = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}  # --clock: cpu is this thread's CPU time


class _Anything:
    """Any attribute, call or base class: what SGLang's model-config imports read from torchvision."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __call__(self, *args: object, **kwargs: object) -> _Anything:
        return _Anything()

    def __getattr__(self, name: str) -> _Anything:
        return _Anything()

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> _Anything:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


class _StubLoader(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """torchvision: imported by SGLang's multimodal model configs only, never used by its radix
    caches; stand-in modules serve it when it is not installed (a CPU build matching torch is rare)."""

    def find_spec(self, fullname, path, target=None):  # noqa: ANN001, ANN201
        if fullname.split(".")[0] == "torchvision":
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):  # noqa: ANN001, ANN201
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0+stub"
        return module

    def exec_module(self, module) -> None:  # noqa: ANN001
        pass


def import_sglang() -> types.SimpleNamespace:
    if importlib.util.find_spec("torchvision") is None:
        sys.meta_path.insert(0, _StubLoader())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        import torch
        from sglang.srt.mem_cache import base_prefix_cache, radix_cache
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        logging.disable(logging.NOTSET)
    from importlib.metadata import version

    return types.SimpleNamespace(torch=torch, rc=radix_cache, bpc=base_prefix_cache, Params=CacheInitParams,
                                 Unified=UnifiedRadixCache, FULL=ComponentType.FULL, version=version("sglang"))


class FreeStack:
    """Free pages on a stack in one int64 tensor (page 0 reserved, as SGLang pads slot 0): the
    allocator surface the caches call (device, page_size, free, free_segment, available_size)."""

    def __init__(self, torch, capacity: int, page_size: int) -> None:  # noqa: ANN001
        self.device, self.page_size = "cpu", page_size
        self.num_pages = capacity // page_size
        self.stack = torch.arange(self.num_pages, 0, -1, dtype=torch.int64)
        self.top = self.num_pages
        self._offsets = torch.arange(page_size, dtype=torch.int64)

    def available_size(self) -> int:
        return self.top * self.page_size

    def alloc_tokens(self, n: int):  # noqa: ANN201 - int64 tensor [n], or None when short
        k = -(-n // self.page_size)
        if k > self.top:
            return None
        pages = self.stack[self.top - k:self.top].flip(0)
        self.top -= k
        if self.page_size == 1:
            return pages
        return (pages[:, None] * self.page_size + self._offsets).reshape(-1)[:n]

    def free(self, slots) -> None:  # noqa: ANN001
        pages = slots[::self.page_size] // self.page_size
        self.stack[self.top:self.top + len(pages)] = pages
        self.top += len(pages)

    def free_segment(self, slots, *, start_pos: int = 0) -> None:  # noqa: ANN001
        self.free(slots)

    def mamba_full_cache_donor(self) -> None:  # UnifiedRadixCache asks; a plain pool has none
        return None


def make_cache(ns: types.SimpleNamespace, backend: str, alloc: FreeStack, page_size: int, policy: str):  # noqa: ANN201
    common = dict(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=alloc, page_size=page_size,
                  eviction_policy=policy)
    if backend == "radix":
        return ns.rc.RadixCache(ns.Params(**common))
    core = {"unified-rust": "rust", "unified-py": "python"}[backend]
    logging.disable(logging.INFO)
    cache = ns.Unified(ns.Params(**common, tree_components=(ns.FULL,), tree_core_backend=core))
    logging.disable(logging.NOTSET)
    if core == "rust" and "Rust" not in type(cache.tree_core).__name__:
        raise RuntimeError(f"SGLang's Rust TreeCore is unavailable here (got {type(cache.tree_core).__name__})")
    return cache


class Replay:
    """One backend at one capacity: serve every request in order, timing each call into the cache."""

    def __init__(self, ns: types.SimpleNamespace, backend: str, capacity: int, page_size: int, policy: str,
                 clock=time.perf_counter_ns) -> None:  # noqa: ANN001 - a CLOCKS value
        self.ns, self.backend, self.page_size, self.clock = ns, backend, page_size, clock
        self.alloc = FreeStack(ns.torch, capacity, page_size)
        self.cache = make_cache(ns, backend, self.alloc, page_size, policy)
        self.spent = dict.fromkeys(OPS, 0)  # nanoseconds inside each kind of call
        self.hit = self.asked = self.oom = 0

    def timed(self, op: str, fn, *args):  # noqa: ANN001, ANN201
        t0 = self.clock()
        out = fn(*args)
        self.spent[op] += self.clock() - t0
        return out

    def serve(self, seq: array, key) -> None:  # noqa: ANN001 - key: SGLang's RadixKey of the prompt
        bpc, cache, ps = self.ns.bpc, self.cache, self.page_size
        m = self.timed("match_prefix", cache.match_prefix, bpc.MatchPrefixParams(key=key))
        lock = self.timed("lock", cache.lock, m.last_device_node)
        prefix = self.timed("lock", cache.path_device_indices, m.last_device_node)
        matched, need = m.device_prefix_len, len(seq) - m.device_prefix_len
        self.hit, self.asked = self.hit + matched, self.asked + len(key)
        new = self.timed("alloc", self.alloc.alloc_tokens, need)
        if new is None:
            short = -(-need // ps) * ps - self.alloc.available_size()
            self.timed("evict", cache.evict, bpc.EvictParams(num_tokens=short))
            new = self.timed("alloc", self.alloc.alloc_tokens, need)
        if new is None:  # longer than what eviction can free
            self.oom += 1
            self.timed("unlock", cache.unlock, lock)
            return
        value = self.ns.torch.cat((prefix, new)) if matched else new
        res = self.timed("insert", cache.insert,
                         bpc.InsertParams(key=self.ns.rc.RadixKey(seq), value=value, prev_prefix_len=matched))
        if self.backend == "radix" and res.prefix_len > matched:  # RadixCache leaves duplicates to the caller
            self.timed("free", self.alloc.free_segment, value[matched:res.prefix_len])
        if len(seq) % ps:  # the partial last page, which insert() left out
            self.timed("free", self.alloc.free_segment, value[len(seq) // ps * ps:])
        self.timed("unlock", cache.unlock, lock)

    def report(self, requests: int) -> dict:
        """The run's numbers, after a leak check: evicting everything must give every slot back."""
        cache, alloc = self.cache, self.alloc
        cache.evict(self.ns.bpc.EvictParams(num_tokens=1 << 62))
        capacity = alloc.num_pages * self.page_size
        return {"backend": self.backend, "tree_core": type(getattr(cache, "tree_core", cache)).__name__,
                "capacity_tokens": capacity, "page_size": self.page_size, "requests": requests,
                "hit_tokens": self.hit, "prompt_tokens": self.asked, "oom_requests": self.oom,
                "requests_per_s": requests / max(1e-9, sum(self.spent.values()) / 1e9),
                "per_op": {op: {"total_s": spent / 1e9} for op, spent in self.spent.items()},
                "leak_free": alloc.available_size() == capacity and cache.evictable_size() == 0}


class Stepper:
    """Every backend at every capacity (backend-major), each replay served chunk by chunk on command:
    the SGLang side of radixkv's lockstep comparison (radixkv.bench.speed). new() before step()."""

    def __init__(self, ns: types.SimpleNamespace, seqs: list, prompt_lens: list[int], backends: list[str],
                 capacities: list[int], page_size: int, policy: str, clock: str = "wall") -> None:
        self.ns, self.seqs, self.clock = ns, seqs, CLOCKS[clock]
        self.keys = [ns.rc.RadixKey(s[:n]) for s, n in zip(seqs, prompt_lens)]
        self.setup = (backends, capacities, page_size, policy)
        self.runs: list[Replay] = []
        self.pos: list[int] = []

    def new(self) -> dict:
        """Fresh replays, collected garbage; what they are."""
        backends, capacities, page_size, policy = self.setup
        self.runs = [Replay(self.ns, b, c, page_size, policy, self.clock) for b in backends for c in capacities]
        self.pos = [0] * len(self.runs)
        gc.collect()  # the import's and the trace's garbage is not the first replay's to pay
        return {"sglang_version": self.ns.version, "torch_version": self.ns.torch.__version__,
                "requests": len(self.seqs),
                "replays": [[r.backend, r.alloc.num_pages * r.page_size] for r in self.runs]}

    def step(self, count: int, which: list[int]) -> list[int]:
        """Serve the next `count` requests in each replay of `which`; nanoseconds inside the cache's calls."""
        out = []
        for i in which:
            run, start = self.runs[i], self.pos[i]
            before = sum(run.spent.values())
            for seq, key in zip(self.seqs[start:start + count], self.keys[start:start + count]):
                run.serve(seq, key)
            self.pos[i] = min(len(self.seqs), start + count)
            out.append(sum(run.spent.values()) - before)
        return out

    def report(self) -> dict:
        """The replays' reports (main's "results"), each after its leak check, as far as each has run."""
        return {"sglang_version": self.ns.version, "torch_version": self.ns.torch.__version__,
                "results": [run.report(pos) for run, pos in zip(self.runs, self.pos)]}


def command(stepper: Stepper, line: str) -> dict:
    """Answer one command of the --serve protocol (serve() says which); ValueError on a bad one."""
    cmd = line.split()
    if cmd == ["new"]:
        return stepper.new()
    if cmd == ["report"]:
        return stepper.report()
    if cmd[:1] == ["step"] and len(cmd) > 1 and all(w.isdigit() for w in cmd[1:]):
        which = [int(w) for w in cmd[2:]] or list(range(len(stepper.runs)))
        if max(which) >= len(stepper.runs):
            raise ValueError(f"no replay {max(which)} (there are {len(stepper.runs)})")
        return {"ns": stepper.step(int(cmd[1]), which)}
    raise ValueError(f"bad command {line.strip()[:80]!r}")


def serve(stepper: Stepper, lines, out) -> None:  # noqa: ANN001 - text streams
    """--serve: one command a line on `lines`, one JSON line on `out` answers each:
        new                    fresh replays: {"sglang_version", "torch_version", "requests", "replays"}
        step COUNT [I J ...]   the next COUNT requests in replays I, J, ... (all by default): {"ns": [...]}
        report                 {"sglang_version", "torch_version", "results"} as without --serve (it
                               empties the caches: `new` before the next step)
    The answer to `new` comes first, unasked. The end of `lines` ends it; a bad command exits 1."""
    out.write(json.dumps(stepper.new()) + "\n")
    out.flush()
    for line in lines:
        try:
            reply = command(stepper, line)
        except ValueError as e:
            sys.exit(f"harness: {e}")
        out.write(json.dumps(reply) + "\n")
        out.flush()


def load_trace(path: str) -> tuple[list, list[int]]:
    seqs, prompt_lens = [], []
    with open(path) as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                seqs.append(array("q", d["tokens"]))
                prompt_lens.append(int(d.get("prompt_len", len(d["tokens"]))))
    return seqs, prompt_lens


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", nargs="?", help='JSON lines: {"tokens": [...], "prompt_len": n}')
    p.add_argument("--check", action="store_true", help="import SGLang's caches, print its version, exit")
    p.add_argument("--backend", default="radix", help="comma-separated: radix, unified-rust, unified-py")
    p.add_argument("--capacity", default="4096", help="comma-separated KV capacities, tokens")
    p.add_argument("--page-size", type=int, default=1)
    p.add_argument("--eviction-policy", default="lru", help="an SGLang eviction policy: lru, lfu, fifo, ...")
    p.add_argument("--clock", choices=tuple(CLOCKS), default="wall",
                   help="what times the calls: wall, or cpu (this thread's CPU time)")
    p.add_argument("--serve", action="store_true",
                   help="keep the replays alive and step them on command, lines on stdin (see serve())")
    a = p.parse_args(argv)
    out = sys.stdout
    if a.serve:  # stdout carries the protocol only: whatever SGLang prints goes to stderr
        sys.stdout = sys.stderr
    ns = import_sglang()
    if a.check or a.trace is None:
        print(f"sglang {ns.version}, torch {ns.torch.__version__}: radix caches import")
        return
    seqs, prompt_lens = load_trace(a.trace)
    stepper = Stepper(ns, seqs, prompt_lens, [b.strip() for b in a.backend.split(",")],
                      [int(c) for c in a.capacity.split(",")], a.page_size, a.eviction_policy, a.clock)
    if a.serve:
        serve(stepper, sys.stdin, out)
        return
    stepper.new()
    for i in range(len(stepper.runs)):  # one replay after the other, each over the whole trace
        stepper.step(len(seqs), [i])
    rep = stepper.report()
    for r in rep["results"]:
        if not r["leak_free"]:
            sys.exit(f"{r['backend']} at capacity {r['capacity_tokens']}: slots leaked (the harness is wrong)")
    print(json.dumps(rep))


if __name__ == "__main__":
    main()
