"""How much of the other expert's shadow the real cache does not hold: the adaptive policy's two experts' contents
compared, request by request, on policy_cost's cells.

In steady state the real cache follows one expert and a shadow replays the other (eviction/adaptive.py). A cheaper
shadow that kept only what the other expert holds and the real cache does not would pay in proportion to that
difference. Every `--every` requests in steady state, each shadow node's tokens past the real tree's match of the
node's path are counted against the shadow's tokens; the cell prints the share's median, min and max.

    RADIXKV_PURE_PYTHON=1 .venv/bin/python bench/shadow_overlap.py --cells agent:0.25:1,rag:0.1:1
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from policy_cost import CELLS, cell  # noqa: E402

from radixkv.bench.runner import Replay  # noqa: E402
from radixkv.cli_args import HelpFormatter, positive_int  # noqa: E402


def paths(root: Any) -> Iterator[tuple[bytes, int, bytes]]:  # noqa: ANN401 - a shadow's root node
    """(namespace, key bytes above the node, key bytes to the node's end) of every node below `root`."""
    stack = [(c, b"") for c in root.children.values()]
    while stack:
        node, above = stack.pop()
        key = above + node.key
        yield node.ns, len(above), key
        stack.extend((c, key) for c in node.children.values())


def lacking(tree: Any, shadow: Any) -> tuple[int, int]:  # noqa: ANN401 - a RadixTree and a shadow
    """(key bytes the shadow holds that the real tree does not, key bytes the shadow holds)."""
    out = total = 0
    for root in shadow.roots.values():
        for ns, start, key in paths(root):
            real = tree.roots.get(ns)
            matched = tree.walk(key, real)[1] if real is not None else 0
            total += len(key) - start
            out += len(key) - max(start, min(matched, len(key)))
    return out, total


def lacking_shares(spec: str, every: int) -> list[float]:
    """The share lacking, every `every` requests of the cell while the followed expert has no shadow."""
    reqs, cap, page = cell(spec, 100_000)
    run = Replay(reqs, cap, "adaptive", page)
    tree = run.cache.tree
    policy, got = tree.policy, []
    for i in range(len(reqs)):
        run.step(1)
        other = 1 - policy.mode
        if i % every or other not in policy._shadows or policy.mode in policy._shadows:
            continue
        out, total = lacking(tree, policy._shadows[other])
        if total:
            got.append(out / total)
    return got


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--cells", default=CELLS, help="workload:frac:page_size,...")
    p.add_argument("--every", type=positive_int, default=16, help="compare every N requests")
    a = p.parse_args(argv)
    print("| cell | samples | share lacking: median | min | max |\n|---|---:|---:|---:|---:|")
    for spec in a.cells.split(","):
        got = lacking_shares(spec, a.every)
        row = f"{statistics.median(got):.3f} | {min(got):.3f} | {max(got):.3f}" if got else "- | - | -"
        print(f"| {spec} | {len(got)} | {row} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
