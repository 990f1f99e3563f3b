"""Cascade plans from the radix tree: which decode rows share which KV, read once per group.

Each open Sequence holds one lock, on `node`: the deepest node of its committed full pages. The path
from the root to that node is the prefix it reads from the tree; a node on the paths of two or more
of the batch's Sequences is KV that flat decode would read once per Sequence. The plan groups them:

    tree (counts: batch Sequences whose path runs through a node)
      root ─ S (system prompt, 4) ─┬─ D (document, 2) ─┬─ a1 (1)      rows 0, 1
                                   │                    └─ a2 (1)
                                   ├─ b (1)                            row 2
                                   └─ c (1)                            row 3
    level 0: group S  rows [0 1 2 3]  KV S
    level 1: group D  rows [0 1]      KV D
    level 2: tails    [0] a1 + private, [1] a2 + private, [2] b + private, [3] c + private
                      (every row has one tail: positions past its last shared group, >= its query)

A chain of shared nodes with equal counts (an edge split by a branch that no batch Sequence takes) is
one group. A Sequence's tail is everything past its deepest shared node, positions [shared_end,
kv_len): its unshared tree nodes, its private last page and its reserved positions (the query's own
K/V, stored by the layer before it attends). Slots are sliced from the Sequences' host mirrors of
their rows, which equal the tree's slots below `node.end`, so the plan is valid by construction.

Layout choices, none of which changes a result (any grouping merges to the same attention):
- a level whose runs differ widely in length is cut in two (shorter runs, longer runs) when that
  saves a quarter of its padded area `groups x longest run` (the torch reference pads; e.g. one
  request that shares nothing would otherwise pad every short tail to its whole length);
- on CUDA every run is cut into chunks of at most `_GPU_KV_CHUNK` slots (more programs, merged like
  any other partial state, as flash-decoding's splits are);
- off CUDA the plan carries the torch reference's padded layout (what `kernels.with_padding` builds),
  made here in numpy once per step instead of by torch once per layer.

Masked layers (a window or chunks) read the same plan through `for_layer`: each group's first key
position and each row's query position travel in the plan (`kv_pos`, `q_pos`), so the kernel masks
keys outside a query's window; off CUDA the runs are first cut to what some row sees (a shared
prefix wholly behind every window disappears), and a window group's layers read their own pool's
slots (`full_to_window[slot]`).

Cost: one walk up each Sequence's path (O(nodes on the batch's paths)), then O(groups) numpy slices
and a few torch ops per level; no Python loop over tokens. Mutates nothing.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from radixkv.kernels import AttentionVariant, CascadeLevel, CascadePlan, KernelInputError, PaddedLevel
from radixkv.kernels.variant import first_key_ref
from radixkv.results import LockHandle

_GPU_KV_CHUNK = 256  # slots per group on a GPU: long runs split so that programs fill the device
Run = tuple[list[int], np.ndarray, int]  # a group: its rows, its slots, the position of its first slot


# On CUDA a cascade step launches more kernels than a flat one (one per level, and the merge). On one
# H100 (bench/cascade_kernels.py over six batch shapes, bench/RESULTS.md "First GPU run") it took
# 0.05-0.24 ms more than flat decode per layer wherever it saved under ~450 MB of KV reads, drew level
# at 470 MB and won from 1 GB on: 450 MB is ~0.15 ms at the 2.95 TB/s its device-to-device copy moved.
# Measured on one GPU model; another's bandwidth and launch cost move the point.
CUDA_MIN_SAVED_BYTES = 450_000_000


def min_saved_positions(position_bytes: int, device: torch.device) -> int:
    """The fewest KV reads of `position_bytes` each (one layer's K and V of one position) a cascade
    step must save to run: 0 off CUDA (the torch references gain from any shared run), on CUDA what
    outweighs its extra launches (CUDA_MIN_SAVED_BYTES)."""
    return 0 if device.type != "cuda" else -(-CUDA_MIN_SAVED_BYTES // max(1, position_bytes))


def cascade_pays(saved_positions: int, position_bytes: int, device: torch.device) -> bool:
    """Whether cascade decode should run a step whose plan saves `saved_positions` KV reads."""
    return saved_positions >= min_saved_positions(position_bytes, device)


def kv_chunk_for(device: torch.device) -> int | None:
    """Longest KV run of one group in a plan for `device`: bounded on CUDA (flash-decoding's split,
    merged like any other partial state), unbounded on CPU where the torch reference runs."""
    return _GPU_KV_CHUNK if device.type == "cuda" else None


def plan_cascade(nodes: list[LockHandle], slots: list[np.ndarray], kv_lens: list[int],
                 device: torch.device, kv_chunk: int | None = None, min_saved: int = 0) -> CascadePlan | None:
    """The cascade plan of decode rows 0..n-1, or None when no node lies on two rows' paths or the
    plan would save fewer than `min_saved` KV reads (checked before any tensor is built).

    Args:
        nodes: each row's locked node (Sequence.node; its path is the row's tree prefix).
        slots: each row's slot mirror, int64 with at least `kv_lens[i]` entries (position -> slot).
        kv_lens: each row's positions, >= nodes[i].end + 1 (the query's own position included).
        device: where the plan's tensors go.
        kv_chunk: split every group's KV into runs of at most this many slots (None: never).
        min_saved: see min_saved_positions.
    """
    count: dict[LockHandle, int] = {}  # batch rows whose path runs through a node
    for node in nodes:
        while node.parent is not None:
            count[node] = count.get(node, 0) + 1
            node = node.parent
    if not count or max(count.values()) < 2:
        return None
    chains: dict[LockHandle, tuple[tuple[LockHandle, LockHandle], ...]] = {}
    groups: dict[tuple[LockHandle, LockHandle], list[int]] = {}  # (top, bottom) -> rows, in level order
    ends = []  # each row's shared_end
    for i, node in enumerate(nodes):
        while node.parent is not None and count[node] < 2:
            node = node.parent
        chain = _chain(node, count, chains) if node.parent is not None else ()
        for key in chain:
            groups.setdefault(key, []).append(i)
        ends.append(chain[-1][1].end if chain else 0)
    by_level: list[list[Run]] = [[] for _ in range(max(map(len, chains.values())))]
    for (top, bottom), rows in groups.items():
        by_level[len(chains[bottom]) - 1].append((rows, slots[rows[0]][top.depth:bottom.end], top.depth))
    if _saved(by_level) < min_saved:
        return None
    by_level.append([([i], s[e:n], e) for i, (s, e, n) in enumerate(zip(slots, ends, kv_lens)) if n > e])
    q_pos = np.asarray(kv_lens, dtype=np.int32) - 1
    return _build([part for groups in by_level for part in _by_length(groups)], q_pos, device, kv_chunk)


def _saved(by_level: list[list[Run]]) -> int:
    """KV positions a flat decode would read again: a run shared by n rows, n - 1 times its length."""
    return sum((len(rows) - 1) * len(s) for groups in by_level for rows, s, _ in groups)


def for_layer(plan: CascadePlan, variant: AttentionVariant, slot_map: torch.Tensor | None = None) -> CascadePlan:
    """`plan` as a layer with `variant` reads it: off CUDA a masked variant's runs are cut to the keys
    their rows see (`visible`: the torch reference pads every run it is given), and a layer whose
    K/V live in a window group's own pool reads `slot_map[slot]` (its `full_to_window`) instead of
    each slot. On CUDA the kernel skips unseen keys by itself and nothing is read back (no host sync)."""
    if variant.masked and plan.merge_indptr.device.type != "cuda":
        plan = visible(plan, variant)
    if slot_map is None:
        return plan
    levels = tuple(lvl._replace(kv_indices=slot_map[lvl.kv_indices], padded=None if lvl.padded is None
                                else lvl.padded._replace(slots=slot_map[lvl.padded.slots])) for lvl in plan.levels)
    return plan._replace(levels=levels)


def visible(plan: CascadePlan, variant: AttentionVariant) -> CascadePlan:
    """`plan` with each group's run cut to the keys at least one of its rows sees under `variant`
    (`[first_key(q_pos), q_pos]`), dropping groups and levels left without keys: the same
    attention, fewer reads. Reads the plan's tensors on the host (O(groups) Python, no token loop);
    needs positions (the planner's plans have them)."""
    q_pos = _host(plan.q_pos)
    lo = first_key_ref(variant, torch.from_numpy(q_pos).long()).numpy()
    by_level: list[list[Run]] = []
    for lvl in plan.levels:
        qo_ptr, qo, kv_ptr, slots, kv_pos = map(_host, (lvl.qo_indptr, lvl.qo_indices, lvl.kv_indptr, lvl.kv_indices,
                                                        lvl.kv_pos))
        groups = []
        for g in np.flatnonzero(np.diff(qo_ptr)):
            rows = qo[qo_ptr[g]:qo_ptr[g + 1]]
            a = max(int(lo[rows].min()) - int(kv_pos[g]), 0)
            b = min(int(q_pos[rows].max()) - int(kv_pos[g]) + 1, int(kv_ptr[g + 1] - kv_ptr[g]))
            if b > a:
                groups.append((rows.tolist(), slots[kv_ptr[g] + a:kv_ptr[g] + b], int(kv_pos[g]) + a))
        if groups:
            by_level.append(groups)
    return _build(by_level, q_pos, plan.merge_indptr.device, None)


def _host(t: torch.Tensor | None) -> np.ndarray:
    if t is None:
        raise KernelInputError("cutting a plan to a window needs its positions (q_pos, every level's kv_pos)")
    return t.cpu().numpy()


def _chain(node: LockHandle, count: dict[LockHandle, int],
           memo: dict[LockHandle, tuple[tuple[LockHandle, LockHandle], ...]]) -> tuple[tuple[LockHandle, LockHandle], ...]:
    """Groups (top, bottom) from the root down to the shared node `node` (its own group last)."""
    if node in memo:
        return memo[node]
    top = node
    while top.parent.parent is not None and count[top.parent] == count[node]:
        top = top.parent  # same rows above: one group
    above = top.parent
    chain = (_chain(above, count, memo) if above.parent is not None else ()) + ((top, node),)
    memo[node] = chain
    return chain


def _by_length(groups: list[Run]) -> list[list[Run]]:
    """One level's groups, or two levels (shorter runs, longer runs) when that cuts the padded area
    `groups x longest run` by a quarter: one long tail among short ones would pad every short one."""
    sizes = np.fromiter((len(s) for _, s, _ in groups), np.int64, len(groups))
    order = np.argsort(sizes, kind="stable")
    ranked, n = sizes[order], len(groups)
    if n < 2 or ranked[-1] == 0:
        return [groups]
    k = np.arange(1, n)  # the k shortest runs in one level, the rest in another
    area = k * ranked[k - 1] + (n - k) * ranked[-1]
    cut = int(np.argmin(area))
    if area[cut] > 0.75 * n * ranked[-1]:
        return [groups]
    short = np.sort(order[:cut + 1])
    long = np.sort(order[cut + 1:])
    return [[groups[i] for i in short], [groups[i] for i in long]]


def _build(by_level: list[list[Run]], q_pos: np.ndarray, device: torch.device, kv_chunk: int | None) -> CascadePlan:
    """CSR tensors of each level's (rows, slots, first position) groups and of each row's entries
    (rows 0..len(q_pos)-1, the query of row r at q_pos[r]); off CUDA also the torch reference's
    padded layout (what `with_padding` computes, here in numpy: once per step)."""
    pad = device.type != "cuda"
    levels, entry_rows = [], []
    for groups in by_level:
        if kv_chunk:
            groups = [(rows, s[j:j + kv_chunk], p + j) for rows, s, p in groups for j in range(0, len(s), kv_chunk)]
        counts = np.fromiter((len(r) for r, _, _ in groups), np.int32, len(groups))
        sizes = np.fromiter((len(s) for _, s, _ in groups), np.int32, len(groups))
        qo = np.fromiter(itertools.chain.from_iterable(r for r, _, _ in groups), np.int32, int(counts.sum()))
        entry_rows.append(qo)
        slots = np.concatenate([s for _, s, _ in groups]).astype(np.int64, copy=False)
        kv_pos = np.fromiter((p for _, _, p in groups), np.int32, len(groups))
        qo_indptr, kv_indptr = _indptr(counts), _indptr(sizes)
        padded = _pad_level(qo_indptr, qo, kv_indptr, slots, device) if pad else None
        levels.append(CascadeLevel(_tensor(qo_indptr, device), _tensor(qo, device), _tensor(kv_indptr, device),
                                   _tensor(slots, device), int(counts.max()), int(sizes.max()), padded,
                                   _tensor(kv_pos, device)))
    owner = np.concatenate(entry_rows)  # the row of each entry, entries numbered across levels
    per_row = np.bincount(owner, minlength=len(q_pos))
    indptr, order, width = _indptr(per_row), np.argsort(owner, kind="stable").astype(np.int32), int(per_row.max())
    merge = tuple(_tensor(a, device) for a in _csr_pad(indptr, order, width)) if pad else None
    return CascadePlan(tuple(levels), _tensor(indptr, device), _tensor(order, device), width, merge,
                       _tensor(q_pos.astype(np.int32, copy=False), device), _saved(by_level))


def _pad_level(qo_indptr: np.ndarray, qo: np.ndarray, kv_indptr: np.ndarray, slots: np.ndarray,
               device: torch.device) -> PaddedLevel:
    """kernels.cascade_plan.pad_level, in numpy."""
    kv, valid = _csr_pad(kv_indptr, slots, int(np.diff(kv_indptr).max()))
    rows, _ = _csr_pad(qo_indptr, qo, int(np.diff(qo_indptr).max()))
    at = np.repeat(np.arange(len(qo_indptr) - 1) * rows.shape[1] - qo_indptr[:-1], np.diff(qo_indptr))
    at += np.arange(len(qo))
    bias = np.where(valid, np.float32(0), np.float32(-np.inf))
    return PaddedLevel(*(_tensor(a, device) for a in (kv, bias, rows, at)))


def _csr_pad(indptr: np.ndarray, indices: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """kernels.cascade_plan.csr_to_padded, in numpy: ([n, width] int64 values, [n, width] bool valid)."""
    start = indptr[:-1].astype(np.int64)
    pos = np.arange(width)
    valid = pos[None, :] < (indptr[1:] - start)[:, None]
    at = np.where(valid, start[:, None] + pos[None, :], np.minimum(start, len(indices) - 1)[:, None])
    return indices[at].astype(np.int64, copy=False), valid


def _indptr(counts: list[int] | np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=out[1:])
    return out


def _tensor(a: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(a).to(device)
