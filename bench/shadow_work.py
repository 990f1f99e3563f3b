"""What the other expert's shadow does a request, and how much of its walk the real tree's match already did.

    RADIXKV_PURE_PYTHON=1 PYTHONPATH=. .venv/bin/python bench/shadow_work.py --cells agent:1,rag:1,tools:1,agent:16
    PYTHONPATH=. .venv/bin/python bench/shadow_work.py --young --cells agent:1     # the collector's side, compiled

Each cell (workload:page size) is bench/events_instructions.py's replay (the bench lifecycle, 25% capacity) under the
adaptive policy. Per request in steady state (the other expert's shadow runs, the followed one's and the twin do
not), the shadow's match: the nodes of its path, those it took along the real match's path by their shared key
objects with no compare (`_walk_along`), those the core walk compared (and their tokens), against the real match's
nodes and tokens (where the real match found nothing the shadow walks from its root: "no real match"); its insert:
whether it walked on from the match, the tokens its new leaf copies or shares (the real new leaf's key object), the
leaves it evicts (whole or trimmed) and the tokens they free. Counts, not costs (bench/events_instructions.py gives
those): they say which part of the work a walk that reused the real match could skip. They wrap ShadowTree's
methods, so they need the interpreted core (RADIXKV_PURE_PYTHON=1; its decisions are the compiled one's).

`--young`: the cyclic collector's side instead, compiled or not: each collection the replay triggers (its request,
generation and the young generation's objects by type), then the GC-tracked objects a request leaves in the young
generation (gc disabled, by type) before the first eviction and over the last 100 requests. Where a collection falls
depends on everything the process allocated before: one cell a process reads as a fresh run (events_instructions.py's).
"""

from __future__ import annotations

import argparse
import collections
import gc
import sys
from typing import Any, Callable

import torch

from radixkv.bench.opt import build_segments
from radixkv.bench.runner import capacity, sim_config
from radixkv.bench.workloads import make_workload
from radixkv.cache import RadixCache
from radixkv.cli_args import HelpFormatter
from radixkv.core_loader import state
from radixkv.radix.core import TreeCore
from radixkv.radix.shadow import ShadowTree

Counts = collections.Counter


def replay(workload: str, page: int, each: Callable[[int, RadixCache], None] | None = None, requests: int = 0
           ) -> int:
    """events_instructions.py's replay of `workload` at `page` (its first `requests`; 0: all), adaptive, sized by the
    whole trace; `each(i, cache)` before request i and after the last. Returns the requests replayed."""
    reqs = make_workload(workload)
    seg = build_segments(reqs, page)
    longest = max(len(r.tokens) for r in reqs)
    cache = RadixCache(sim_config(capacity(0.25, seg.total_pages * page, longest, page), page, "adaptive", longest))
    reqs = reqs[:requests or None]
    for i, req in enumerate(reqs):
        if each is not None:
            each(i, cache)
        m = cache.match_prefix(req.tokens[:req.prompt_len])
        cache.lock(m.node)
        cache.insert(req.tokens, torch.cat([m.slots, cache.alloc(len(req.tokens) - m.length)]))
        cache.unlock(m.node)
    if each is not None:
        each(len(reqs), cache)
    return len(reqs)


def steady(policy: Any) -> bool:  # noqa: ANN401 - an Adaptive
    return policy.mode not in policy._shadows and 1 - policy.mode in policy._shadows and policy._twin is None


def work(workload: str, page: int, requests: int = 0) -> tuple[int, Counts[str]]:
    """(steady requests, the shadow's counts over them)."""
    got: Counts[str] = collections.Counter()
    now: Counts[str] = collections.Counter()
    inside: list[Any] = ["", None]  # the call the walk serves, and an insert's `tail`
    saved = {name: getattr(cls, name) for cls, name in ((ShadowTree, "match"), (ShadowTree, "insert"),
                                                        (ShadowTree, "_walk_along"), (ShadowTree, "_take_least"),
                                                        (ShadowTree, "add_leaf"), (TreeCore, "walk"))}

    def match(self: ShadowTree, ns: bytes, key: bytes, end: int = -1) -> int:
        inside[0] = "match, no real match:"  # (a walk from the root, unless `along` runs)
        now["match calls"] += 1
        return saved["match"](self, ns, key, end)

    def insert(self: ShadowTree, *args: Any, **kw: Any) -> int:  # noqa: ANN401
        inside[0], inside[1] = "insert", args[4] if len(args) > 4 else kw.get("tail")
        now["insert calls"] += 1
        freed = self.used
        added = saved["insert"](self, *args, **kw)
        now["insert evicted tokens"] += freed + added - self.used
        return added

    def along(self: ShadowTree, key: bytes, root: Any, real: Any) -> tuple[list[Any], int]:  # noqa: ANN401
        inside[0] = "match"
        path, pos = saved["_walk_along"](self, key, root, real)
        now["match path nodes"] += len(path)
        now["match tokens"] += pos // 4
        now["real match tokens"] += real.depth + real.size
        while real.parent is not None:
            now["real match nodes"] += 1
            real = real.parent
        return path, pos

    def walk(self: Any, key: bytes, node: Any, pos: int = 0) -> tuple[list[Any], int]:  # noqa: ANN401
        path, end = saved["walk"](self, key, node, pos)
        if isinstance(self, ShadowTree):
            now[f"{inside[0]} walked nodes"] += len(path)
            now[f"{inside[0]} walked tokens"] += (end - pos) // 4
            now[f"{inside[0]} walks"] += 1
        return path, end

    def take(self: ShadowTree) -> Any:  # noqa: ANN401
        now["insert evicted leaves"] += 1
        return saved["_take_least"](self)

    def add_leaf(self: ShadowTree, parent: Any, key: bytes) -> Any:  # noqa: ANN401
        now["insert new leaf tokens, the real leaf's key" if key is inside[1] else
            "insert new leaf tokens, copied"] += len(key) // 4
        return saved["add_leaf"](self, parent, key)

    def each(i: int, cache: RadixCache) -> None:
        if i and was[0]:
            got.update(now)
            got["requests"] += 1
        now.clear()
        was[0] = steady(cache.tree.policy)

    was = [False]
    patches = {"match": match, "insert": insert, "_walk_along": along, "_take_least": take, "add_leaf": add_leaf}
    try:
        for name, fn in patches.items():
            setattr(ShadowTree, name, fn)
        TreeCore.walk = walk  # type: ignore[method-assign]
        replay(workload, page, each, requests)
    finally:
        for name, fn in saved.items():
            setattr(TreeCore if name == "walk" else ShadowTree, name, fn)
    return got.pop("requests", 0), got


def young(workload: str, page: int, requests: int = 0) -> list[str]:
    """The collector's side (module docstring), as table rows; the collections first, in a process that has run
    nothing else (as bench/events_instructions.py's child)."""
    rows: list[str] = []
    now = [-1]

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and now[0] >= 0:
            kinds = Counts(type(o).__qualname__ for o in gc.get_objects(0))
            rows.append(f"| {workload} p{page} | a collection in request {now[0]}, generation {info['generation']} | "
                        f"{sum(kinds.values())} | " + ", ".join(f"{k} {v}" for k, v in kinds.most_common(6)) + " |")

    first = [0]

    def where(i: int, cache: RadixCache) -> None:
        now[0] = i
        if not first[0] and cache.tree.policy._tree is not None:  # (set at the first eviction)
            first[0] = i - 1
    gc.callbacks.append(seen)
    try:
        n = replay(workload, page, where, requests)
    finally:
        gc.callbacks.remove(seen)

    def census(label: str, lo: int, hi: int) -> None:
        def each(i: int, cache: RadixCache) -> None:
            if i == lo:
                gc.collect()
                gc.disable()
            elif i == hi:
                kinds = Counts(type(o).__qualname__ for o in gc.get_objects(0))
                gc.enable()
                rows.append(f"| {workload} p{page} | left young a request, {label} ({lo}-{hi}) | "
                            f"{sum(kinds.values()) / (hi - lo):.2f} | "
                            + ", ".join(f"{k} {v / (hi - lo):.2f}" for k, v in kinds.most_common(6)) + " |")
        replay(workload, page, each, requests)
    if first[0] > 0:  # (none where the requests replayed never evict)
        census("before the first eviction", 0, first[0])
        census(f"the last {min(100, n - first[0])}", max(n - 100, first[0]), n)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--cells", default="agent:1,rag:1,tools:1,agent:16", help="workload:page_size,...")
    p.add_argument("--young", action="store_true", help="the collector's side instead (module docstring)")
    p.add_argument("--requests", type=int, default=0, help="only the first N requests of each trace (0: all)")
    a = p.parse_args(argv)
    cells = [(w, int(ps)) for w, _, ps in (c.partition(":") for c in a.cells.split(","))]
    if a.young:
        print("| cell | what | young objects | by type |")
        print("|---|---|---:|---|")
        for w, ps in cells:
            print("\n".join(young(w, ps, a.requests)), flush=True)
        return 0
    if state()[0]:
        sys.exit("this wraps ShadowTree's methods: run it interpreted (RADIXKV_PURE_PYTHON=1)")
    for w, ps in cells:
        n, got = work(w, ps, a.requests)
        print(f"{w} p{ps}: {n} steady requests; a steady request:")
        for k in sorted(got):
            print(f"    {got[k] / max(n, 1):10.2f}  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
