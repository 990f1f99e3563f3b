"""The recorder's common case (events/recorder.py `_plain`: XXH3, one holder per block, one group,
no multimodal request) records exactly what its general path records, and the general path's
runs of new blocks (events/holders.py `new_runs`) are the runs a plain loop finds."""

from __future__ import annotations

import itertools

import pytest
import torch

from radixkv import RadixCache
from radixkv.bench.runner import capacity, sim_config
from radixkv.bench.workloads import make_workload
from radixkv.events.holders import new_runs


def _runs(new: list[bool]) -> list[tuple[int, int]]:
    out, i = [], 0
    while i < len(new):
        if new[i]:
            j = i
            while j < len(new) and new[j]:
                j += 1
            out.append((i, j))
            i = j
        else:
            i += 1
    return out


def test_new_runs_are_the_runs_of_new_blocks() -> None:
    for n in range(9):
        for new in itertools.product((False, True), repeat=n):
            assert new_runs(list(new)) == _runs(list(new))


@pytest.mark.parametrize("workload,page_size", [("chat", 1), ("tools", 16), ("gsp", 1)])
def test_the_common_case_records_what_the_general_path_does(workload: str, page_size: int) -> None:
    reqs = make_workload(workload)[:160]
    longest = max(len(r.tokens) for r in reqs)
    cap = capacity(0.1, sum(len(r.tokens) for r in reqs), longest, page_size)  # small: evictions and splits
    caches = [RadixCache(sim_config(cap, page_size, "lru", longest, events=True)) for _ in range(2)]
    assert caches[0].events._plain
    caches[1].events._plain = False  # the general path: digests(), publish(), withdraw(), _emit()
    stored = removed = 0
    for req in reqs:
        got = []
        for c in caches:
            r = c.match_prefix(req.tokens[:req.prompt_len])
            c.lock(r.node)
            c.insert(req.tokens, torch.cat([r.slots, c.alloc(len(req.tokens) - r.length)]))
            c.unlock(r.node)
            got.append(c.take_events())
        assert got[0] == got[1]
        stored += sum(type(e).__name__ == "BlockStored" for e in got[0])
        removed += sum(type(e).__name__ == "BlockRemoved" for e in got[0])
    assert stored and removed  # both kinds were compared
    for c in caches:
        c.check_invariants()
