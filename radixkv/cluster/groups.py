"""Hybrid models in a fleet index: where an instance can resume, given each KV-cache group's blocks.

vLLM 0.33 keys blocks by (hash, group): a hybrid model's events say which group holds a block
(`group_idx`) and what the group keeps (`kv_cache_spec_kind`, `kv_cache_spec_sliding_window`).
The indexes keep group 0 (full KV; `group_idx` None or 0) as before and every other group's blocks
under (hash, group), plus each instance's group specs (learned from its BlockStored events,
radixkv's announced in every resync; kept until the instance is dropped). A prefix of k blocks is
reusable on an instance only where every group can resume after block k (vLLM's fixed point):

    group 0                    blocks [0, k) held (the longest prefix the scorers see)
    sliding_window W           blocks [k - ceil((W - 1) / B), k): the W - 1 tokens before the
                               resume point, which the next query sees (vLLM's and radixkv's rule)
    mamba                      block k - 1: the state after it
    anything else              blocks [0, k) (full attention in another group, chunked attention
                               whose chunk the events do not carry, unknown kinds: the safe rule)

`resumable` caps an instance's prefix at that k; instances without secondary groups are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from radixkv.events import BlockStored

WINDOW_KINDS = ("sliding_window", "sliding_window_mla")
STATE_KINDS = ("mamba",)


class GroupSpec(NamedTuple):
    kind: str | None  # vLLM's KVCacheSpecKind value (None: not given)
    sliding_window: int | None
    block_size: int


def group_of(event: object) -> int:
    """The group an event names (group 0 when it names none)."""
    return getattr(event, "group_idx", None) or 0


def spec_of(event: BlockStored) -> GroupSpec:
    return GroupSpec(event.kv_cache_spec_kind, event.kv_cache_spec_sliding_window, event.block_size)


def spec_text(spec: GroupSpec) -> str:
    """A spec as RedisIndex stores it: "kind|window|block size" (empty for None)."""
    return f"{spec.kind or ''}|{'' if spec.sliding_window is None else spec.sliding_window}|{spec.block_size}"


def parse_spec(field: bytes | str, value: bytes | str) -> tuple[int, GroupSpec]:
    """(group, spec) of one stored field; (0, ...) for anything malformed (the caller skips it)."""
    text = [x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x) for x in (field, value)]
    parts = text[1].split("|")
    if not text[0].isdigit() or len(parts) != 3 or not parts[2].isdigit() or not (parts[1] == "" or parts[1].isdigit()):
        return 0, GroupSpec(None, None, 1)
    return int(text[0]), GroupSpec(parts[0] or None, int(parts[1]) if parts[1] else None, max(1, int(parts[2])))


def resume_point(k: int, specs: dict[int, GroupSpec], held: Callable[[int, int], bool]) -> int:
    """The largest j <= k where every group in `specs` (g >= 1) can resume after block j (a fixed
    point: each group's answer bounds the others'); `held(g, b)`: group g holds block b."""
    marks = {g: [held(g, b) for b in range(k)] for g in specs}
    while True:
        j = min((_group_point(k, spec, marks[g]) for g, spec in specs.items()), default=k)
        if j == k:
            return k
        k = j


def _group_point(k: int, spec: GroupSpec, marks: list[bool]) -> int:
    """The largest j <= k where this group can resume after block j (`marks[b]`: it holds block b)."""
    if spec.kind in STATE_KINDS:
        return next((j for j in range(k, 0, -1) if marks[j - 1]), 0)
    if spec.kind in WINDOW_KINDS and spec.sliding_window:
        need = -(-(spec.sliding_window - 1) // spec.block_size)
        run = 0  # held blocks ending at j
        best = 0
        for j in range(1, k + 1):
            run = run + 1 if marks[j - 1] else 0
            if run >= min(need, j):
                best = j
        return best
    return next((b for b in range(k) if not marks[b]), k)
