"""cache.batch(seqs, cascade=True): the cascade plan read off the radix tree.

Checked against the Sequences themselves: each row's entries, in merge order, cover exactly the
slots of its positions [0, kv_len) (so any attention over the plan equals flat decode), every shared
group has two or more rows and KV that all its rows really hold, and the plan groups what the tree
shares (system prompt > document > own tail) on hand-built and random prompt trees, pages 1 and 16.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from radixkv import CacheConfig, InvalidArgumentError, RadixCache
from radixkv.cascade import CUDA_MIN_SAVED_BYTES, cascade_pays, min_saved_positions, plan_cascade
from radixkv.kernels import with_padding


def _cache(page_size: int, num_slots: int = 8192) -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=4, num_slots=num_slots,
                                  page_size=page_size, max_requests=48, max_context_len=1024))


def decoding(cache: RadixCache, prompts: list[list[int]], extra: int = 1) -> list:
    """Open, prefill and commit each prompt (in order, so later ones reuse earlier ones), then
    reserve `extra` positions each: a decode step when extra == 1."""
    seqs = []
    for p in prompts:
        s = cache.open(p)
        cache.reserve(s, len(p) - s.kv_len)
        cache.commit(s, p[s.committed_len:])
        seqs.append(s)
    for s in seqs:
        cache.reserve(s, extra)
    return seqs


def _host(plan) -> tuple[list[dict], list[list[int]]]:
    """Levels as lists of (rows, slots) groups, and each row's entry ids, all on the host."""
    levels = []
    for lvl in plan.levels:
        qo, kv = lvl.qo_indptr.tolist(), lvl.kv_indptr.tolist()
        rows, slots = lvl.qo_indices.tolist(), lvl.kv_indices.tolist()
        groups = [(rows[qo[g]:qo[g + 1]], slots[kv[g]:kv[g + 1]]) for g in range(len(qo) - 1)]
        assert lvl.max_rows == max(len(r) for r, _ in groups) and lvl.max_kv == max(len(s) for _, s in groups)
        levels.append(groups)
    ptr, ids = plan.merge_indptr.tolist(), plan.merge_indices.tolist()
    return levels, [ids[ptr[r]:ptr[r + 1]] for r in range(len(ptr) - 1)]


def check_plan(plan, seqs: list, kv_chunk: int | None = None) -> list[list[tuple[list[int], list[int]]]]:
    """Every invariant a kernel relies on; returns the host levels."""
    levels, entries = _host(plan)
    flat = [(rows, slots) for groups in levels for rows, slots in groups for _ in rows]  # entry id -> group
    entry_row = [r for groups in levels for rows, _ in groups for r in rows]
    assert len(entries) == len(seqs) and plan.max_entries == max(map(len, entries))
    for r, s in enumerate(seqs):
        assert all(entry_row[e] == r for e in entries[r]) and entries[r] == sorted(entries[r])
        covered = [slot for e in entries[r] for slot in flat[e][1]]
        assert covered == s.slots().tolist(), f"row {r}: the plan's KV is not the Sequence's"
    if plan.merge_padded is not None:  # the torch reference's layout, built by the planner: the CSR's
        want = with_padding(plan._replace(levels=tuple(lvl._replace(padded=None) for lvl in plan.levels)))
        assert all(torch.equal(a, b) for a, b in zip(plan.merge_padded, want.merge_padded))
        for lvl, ref in zip(plan.levels, want.levels):
            assert all(torch.equal(a, b) for a, b in zip(lvl.padded, ref.padded))
    assert plan.saved_positions == sum((len(rows) - 1) * len(slots) for groups in levels for rows, slots in groups)
    shared, tails = split_levels(levels)
    assert len(shared) + len(tails) == len(levels), "a level mixes shared groups and tails"
    for groups in shared:  # 2+ rows reading one run (at most kv_chunk long)
        assert all(len(slots) > 0 for _, slots in groups)
        if kv_chunk is None:  # a row sits in at most one group per level
            rows = [r for rs, _ in groups for r in rs]
            assert len(rows) == len(set(rows))
    if kv_chunk is None:  # each row's tail is one group, in one of at most two tail levels (short, long)
        assert sorted(r for groups in tails for rows, _ in groups for r in rows) == list(range(len(seqs)))
        assert len(tails) <= 2 and all(len(s) > 0 for groups in tails for _, s in groups)
    else:
        assert all(0 < len(slots) <= kv_chunk for groups in levels for _, slots in groups)
    return levels


def split_levels(levels: list) -> tuple[list, list]:
    """(shared levels: every group has 2+ rows, tail levels: every group has one row)."""
    return ([g for g in levels if all(len(rows) >= 2 for rows, _ in g)],
            [g for g in levels if all(len(rows) == 1 for rows, _ in g)])


@pytest.mark.parametrize("page_size", [1, 16])
def test_system_document_and_tails(page_size: int) -> None:
    rng = random.Random(page_size)
    tok = lambda n: [rng.randrange(1000) for _ in range(n)]  # noqa: E731
    system, doc = tok(48), tok(37)
    prompts = ([system + doc + tok(5 + i) for i in range(3)] + [system + tok(20), system + tok(3)]
               + [tok(30), tok(2)])
    cache = _cache(page_size)
    seqs = decoding(cache, prompts)
    plan = cache.batch(seqs, cascade=True).cascade
    levels = check_plan(plan, seqs)
    ps = page_size
    shared_doc = (48 + 37) // ps * ps - 48 // ps * ps  # the document's whole pages past the system's
    # level 0: the system prompt (its whole pages) read once for the 5 rows under it
    assert [(rows, len(slots)) for rows, slots in levels[0]] == [([0, 1, 2, 3, 4], 48 // ps * ps)]
    assert [(rows, len(slots)) for rows, slots in levels[1]] == [([0, 1, 2], shared_doc)]
    # tails: rows 0-4 past the shared pages; rows 5 and 6 share nothing, and row 5's 31 positions
    # would triple the padding of the short tails: the longest tails get a level of their own
    tails = [(r, len(s)) for groups in levels[2:] for rows, s in groups for r in rows]
    assert sorted(tails) == [(i, s.kv_len - e) for i, (s, e) in enumerate(zip(seqs, [48 // ps * ps + shared_doc] * 3
                                                                                 + [48 // ps * ps] * 2 + [0, 0]))]
    assert len(levels) in (3, 4) and split_levels(levels)[1] == levels[2:]
    assert plan.saved_positions == 4 * (48 // ps * ps) + 2 * shared_doc  # flat decode's repeated reads
    cache.check_invariants()


def test_cascade_pays_off_cuda_always_and_on_cuda_past_its_launch_cost() -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")  # a device object needs no GPU
    assert cascade_pays(1, 256, cpu) and not cascade_pays(0, 256, cuda)
    per_pos = 2 * 8 * 128 * 2  # Llama-3-8B, one layer's fp16 K and V
    assert min_saved_positions(per_pos, cpu) == 0
    assert min_saved_positions(per_pos, cuda) == -(-CUDA_MIN_SAVED_BYTES // per_pos)
    assert not cascade_pays(CUDA_MIN_SAVED_BYTES // per_pos - 1, per_pos, cuda)
    assert cascade_pays(-(-CUDA_MIN_SAVED_BYTES // per_pos), per_pos, cuda)


def test_a_plan_saving_too_little_is_never_built() -> None:
    rng = random.Random(5)
    system = [rng.randrange(1000) for _ in range(40)]
    cache = _cache(1)
    seqs = decoding(cache, [system + [rng.randrange(1000) for _ in range(3 + i)] for i in range(3)])
    plan = cache.batch(seqs, cascade=True).cascade
    assert plan is not None and plan.saved_positions == 2 * 40
    recs = [cache.seqs.get(s) for s in seqs]
    args = ([r.node for r in recs], [r.slots for r in recs], [r.kv_len for r in recs], torch.device("cpu"))
    assert plan_cascade(*args, min_saved=80).saved_positions == 80
    assert plan_cascade(*args, min_saved=81) is None
    before = cache.sizes()
    assert cache.seqs.batch(seqs, True, 81).cascade is None and cache.sizes() == before


def test_no_plan_without_sharing_or_when_not_asked() -> None:
    cache = _cache(1)
    seqs = decoding(cache, [[1, 2, 3], [4, 5, 6], [7, 8]])
    assert cache.batch(seqs, cascade=True).cascade is None  # nothing shared
    shared = decoding(cache, [[1, 2, 3, 9], [1, 2, 3, 10]])
    assert cache.batch(shared).cascade is None  # not asked
    assert cache.batch(shared, cascade=True).cascade is not None
    assert cache.batch(shared[:1], cascade=True).cascade is None  # one row shares with nobody
    with pytest.raises(InvalidArgumentError):
        cache.batch(shared, cascade=1)


def test_plan_covers_only_the_leading_decode_rows() -> None:
    cache = _cache(4)
    system = list(range(100, 140))
    seqs = decoding(cache, [system + [1], system + [2], system + [3]])
    prefill = cache.open(system + [7, 8, 9, 10, 11])
    cache.reserve(prefill, prefill.tokens.size - prefill.kv_len)
    b = cache.batch([seqs[0], seqs[1], prefill, seqs[2]], cascade=True)
    assert b.cascade.num_rows == 2  # rows 0-1 decode; the prefill chunk ends the leading run
    check_plan(b.cascade, seqs[:2])
    assert b.rows.numel() == 4 and b.extend_lens.tolist() == [1, 1, 5, 1]  # the flat inputs are unchanged


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("kv_chunk", [None, 7])
def test_random_prompt_trees(page_size: int, kv_chunk: int | None) -> None:
    """Prompts drawn from a random tree of shared segments; batches are random subsets, some rows
    decode a few steps first so private tails and partial pages differ."""
    rng = random.Random(page_size * 100 + (kv_chunk or 0))
    for trial in range(6):
        cache = _cache(page_size)
        segments = [[rng.randrange(500) for _ in range(rng.randrange(1, 40))] for _ in range(6)]
        prompts = []
        for _ in range(rng.randrange(2, 12)):
            path = rng.sample(range(6), rng.randrange(0, 4))
            prompts.append([t for i in path for t in segments[i]]
                           + [rng.randrange(500) for _ in range(rng.randrange(1, 9))])
        seqs = decoding(cache, prompts, extra=0)
        for s in seqs:  # a few decode steps each: commit what was reserved, reserve the next one
            for _ in range(rng.randrange(0, 20)):
                cache.reserve(s, 1)
                cache.commit(s, [rng.randrange(500)])
            cache.reserve(s, 1)
        batch = rng.sample(seqs, rng.randrange(1, len(seqs) + 1))
        nodes = [s.node for s in batch]
        plan = plan_cascade(nodes, [s.slots() for s in batch], [s.kv_len for s in batch],
                            torch.device("cpu"), kv_chunk)
        counts = {}
        for node in nodes:
            while node.parent is not None:
                counts[node] = counts.get(node, 0) + 1
                node = node.parent
        if max(counts.values(), default=0) < 2:
            assert plan is None, trial
            continue
        levels = check_plan(plan, batch, kv_chunk)
        shared = sum(len(slots) for groups in split_levels(levels)[0] for _, slots in groups)
        assert shared == sum(n.size for n, c in counts.items() if c >= 2)  # each shared node read once


def test_plan_tensors_and_dtypes() -> None:
    cache = _cache(1)
    seqs = decoding(cache, [[5] * 10 + [1], [5] * 10 + [2, 3]])
    plan = cache.batch(seqs, cascade=True).cascade
    for lvl in plan.levels:
        assert lvl.qo_indptr.dtype == lvl.qo_indices.dtype == lvl.kv_indptr.dtype == torch.int32
        assert lvl.kv_indices.dtype == torch.int64
    assert plan.merge_indptr.dtype == plan.merge_indices.dtype == torch.int32
    assert plan.num_rows == 2 and plan.num_entries == 4  # the shared 10 tokens, two tails
    assert plan.merge_padded is not None and all(lvl.padded is not None for lvl in plan.levels)  # CPU
    slots = np.concatenate([s.slots() for s in seqs])
    assert set(np.concatenate([lvl.kv_indices.numpy() for lvl in plan.levels])) == set(slots)
