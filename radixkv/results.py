"""Small typed results returned by RadixCache, and the query counters behind its metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

import torch
from mypy_extensions import mypyc_attr

if TYPE_CHECKING:
    from radixkv.kernels import CascadePlan


class LockHandle(Protocol):
    """A cached prefix as lock(), unlock() and Sequences hold it: opaque but for where it ends and
    the chain of prefixes above it (cascade plans group decode rows by shared prefixes). The tree's
    nodes are LockHandles; only the radix tree reads or writes anything else of them."""

    @property
    def parent(self) -> LockHandle | None: ...  # the prefix this one extends (None: the namespace root)

    @property
    def depth(self) -> int: ...  # tokens of the parent prefix

    @property
    def end(self) -> int: ...  # tokens of this prefix

    @property
    def evicted(self) -> bool: ...  # neither tier holds it any more (a holder's handle outlived it)


class MatchResult(NamedTuple):
    length: int  # cached tokens from the start, a whole number of pages
    slots: torch.Tensor  # int64 [length]: their KV slots, in order; a fresh tensor the caller owns
    node: LockHandle  # the node ending exactly at `length` (the namespace root when length == 0)
    host_length: int = 0  # further tokens held only in the host tier (0 without one)


class SizeInfo(NamedTuple):
    """Slot counts: free + cached + private == total; cached == evictable + protected."""

    free: int
    cached: int
    evictable: int  # cached tokens no lock protects
    protected: int  # cached tokens on a locked path
    private: int  # handed out by alloc()/reserve(), including the unused tail of a private page
    total: int


class BatchInputs(NamedTuple):
    """One forward over positions [committed_len, kv_len) of each Sequence (batch order)."""

    rows: torch.Tensor  # int32 [batch]: req_to_token rows
    prefix_lens: torch.Tensor  # int32 [batch]: committed_len, KV already written
    extend_lens: torch.Tensor  # int32 [batch]: kv_len - committed_len, positions computed now
    seq_lens: torch.Tensor  # int32 [batch]: kv_len
    out_slots: torch.Tensor  # int64 [sum(extend_lens)]: where the new K/V go, concatenated
    kv_indptr: torch.Tensor  # int32 [batch + 1]: CSR offsets into kv_indices
    kv_indices: torch.Tensor  # int64 [sum(seq_lens)]: slots of positions [0, seq_len) of each
    # batch(..., cascade=True): the cascade plan of the leading Sequences that extend by one position
    # (decode rows, packed first); None when not asked for or when none of them shares a tree node
    cascade: CascadePlan | None = None


@mypyc_attr(native_class=False)
@dataclass
class CacheStats:
    """What a cache counts for its metrics (radixkv/metrics.py names them); the cache writes them.

    A plain dataclass, compiled or not (mypyc's non-native class): `vars()`, `dataclasses.asdict`, `==`
    and repr work as they always did; a match still updates it with no interpreted call."""

    query_tokens: int = 0  # tokens asked for by match_prefix / open
    hit_tokens: int = 0  # of those, tokens found on the device
    host_hit_tokens: int = 0  # further tokens found only on the host tier
    evicted_tokens: int = 0  # device tokens evicted
