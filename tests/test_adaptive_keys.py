"""The default policy rebuilds a walked-on insert's whole key (radix/tree.py hands it the key below the
node the insert walked on from) from the last lookup's whole key when that node is where the lookup's
match ended: one slice and a join, where eviction/history.py's absolute_key walks the path up (round 13:
5.5k instructions an insert at agent p1). The key must be the same bytes either way."""

from __future__ import annotations

from radixkv.bench.opt import build_segments
from radixkv.bench.runner import capacity, replay
from radixkv.bench.workloads import make_workload
from radixkv.eviction import POLICIES
from radixkv.eviction.adaptive import Adaptive
from radixkv.eviction.history import absolute_key
from radixkv.eviction.view import CachedNodeView


class Checked(Adaptive):
    """Adaptive, checking each whole key it builds against the path's and counting the kinds."""

    name = "adaptive-keys-test"

    def __init__(self) -> None:
        super().__init__()
        self.kinds = {"root": 0, "from the lookup": 0, "from the path": 0}

    def _whole_key(self, start: CachedNodeView, key: bytes) -> bytes:
        kind = "root" if start.parent is None else "from the lookup" if start is self._ended else "from the path"
        whole = super()._whole_key(start, key)
        assert whole == absolute_key(start, key), (kind, start.end, len(key))
        self.kinds[kind] += 1
        return whole


def test_a_walked_on_inserts_whole_key_comes_from_its_lookups_and_equals_the_paths() -> None:
    """agent at page 1 (its first 150 requests, 25% of their unique tokens; bench/events_instructions.py's
    cell): every insert but the first walks on from its match's node, and every walked-on insert's key
    comes from its lookup's, the same bytes as the path's; the hit rate is the default policy's."""
    reqs, page = make_workload("agent")[:150], 1
    cap = capacity(0.25, build_segments(reqs, page).total_pages * page, max(len(r.tokens) for r in reqs), page)
    policies: list[Checked] = []

    def made() -> Checked:
        policies.append(Checked())
        return policies[-1]

    POLICIES[Checked.name] = made
    try:
        hit = replay(reqs, cap, Checked.name, page).hit_rate
    finally:
        del POLICIES[Checked.name]
    kinds = policies[0].kinds
    assert kinds["from the lookup"] >= 140 and kinds["from the path"] == 0, kinds
    assert hit == replay(reqs, cap, "adaptive", page).hit_rate
