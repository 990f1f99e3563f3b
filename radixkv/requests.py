"""The request level of RadixCache: open, reserve, commit, close, batch.

A generation loop's cycle (MAX: claim/prefetch/fetch/step/release; SGLang: match_prefix +
inc_lock_ref, alloc, cache_unfinished_req, cache_finished_req):

    seq = cache.open(prompt, max_reuse=len(prompt) - 1)   # reuse the cached prefix, lock it
    cache.reserve(seq, len(prompt) - seq.kv_len)          # slots for the rest of the prompt
    b = cache.batch([seq, ...])                           # rows, lens, out_slots, CSR kv_indices
    ... forward: store K/V into b.out_slots ...
    cache.commit(seq, prompt[seq.committed_len:])         # full pages become shareable now
    loop: reserve(seq, 1); batch; forward; commit(seq, [next_token])
    cache.close(seq)                                      # unlock, free the private tail, free the row

This is a mixin of RadixCache (cache.py); it uses the cache's pools, tree and page states.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Hashable

import numpy as np
import torch

from radixkv.errors import ContextLengthError, OutOfSlotsError, SequenceError
from radixkv.kernels import build_kv_indices
from radixkv.pools import page_slots, slot_pages
from radixkv.pools.pages import CACHED, RESERVED
from radixkv.results import BatchInputs
from radixkv.sequence import Sequence
from radixkv.tokens import TokensLike, as_count, as_tokens

if TYPE_CHECKING:
    from radixkv.cache import RadixCache
    from radixkv.radix.node import TreeNode


class RequestAPI:
    def open(self: RadixCache, tokens: TokensLike, namespace: Hashable = None,
             max_reuse: int | None = None, priority: int = 0) -> Sequence:
        """Start a request: match at most `max_reuse` tokens (default all), lock the match, take a
        req_to_token row and write the prefix slots into it. A continuation found on the host tier
        is copied back to the device first (if the device can make room). Afterwards cached_len ==
        committed_len == kv_len (page-aligned). OutOfRowsError when every row is in use;
        ContextLengthError when `tokens` is longer than max_context_len."""
        toks = as_tokens(tokens)
        self._check_length(len(toks), "open")
        reuse = len(toks) if max_reuse is None else min(as_count(max_reuse, "max_reuse"), len(toks))
        root = self.tree.root(namespace)
        row = self.req_pool.alloc_row()  # raises OutOfRowsError before anything changes
        node, length, slots, host_length = self.tree.match(toks[:reuse], root)
        self.stats.count_query(reuse, length, host_length)
        if host_length:
            node, length, slots = self._promote(toks[:reuse], root, node, slots, host_length)
        self.tree.lock(node)
        seq = Sequence(self, row, namespace, priority, toks, node, slots, self.config.max_context_len)
        self._write_row(seq, 0, slots)
        self._seqs[row] = seq
        return seq

    def _promote(self: RadixCache, toks: np.ndarray, root: TreeNode, node: TreeNode, slots: np.ndarray,
                 host_length: int) -> tuple[TreeNode, int, np.ndarray]:
        """Copy the host-only continuation of a match into fresh device pages and hand them to the
        tree. Falls back to the device part alone when the device cannot make room."""
        ps, length = self.page_size, len(slots)
        self.tree.lock(node)  # the device prefix must survive the allocation
        try:
            pages = self._take_pages(host_length // ps, CACHED)
        except OutOfSlotsError:
            self.tree.unlock(node)
            return node, length, slots
        path, m = self.tree.walk(toks[:length + host_length], root)
        k, _ = self.tree.device_part(path, m, root)
        avail = m - length  # making room may have dropped host-only leaves of this very path
        self._free_pages(pages[avail // ps:])
        new = page_slots(pages[:avail // ps], ps)
        if avail:
            self.host.promote(np.concatenate([n.host_slots for n in path[k:]])[:avail], new)
        slots = np.concatenate([slots, new])
        deepest, _ = self.tree.insert(toks[:length + avail], slots, root)
        self.tree.unlock(node)
        return deepest, length + avail, slots

    def reserve(self: RadixCache, seq: Sequence, n: int) -> torch.Tensor:
        """Slots for positions [kv_len, kv_len + n), filling the tail of the Sequence's last
        private page before taking new pages; written into its row. n = 0 is a no-op.
        OutOfSlotsError / ContextLengthError with nothing changed. Returns int64 `[n]`."""
        self._check_seq(seq)
        n, ps, start = as_count(n, "reserve(n)"), self.page_size, seq.kv_len
        self._check_length(start + n, "reserve")
        fill = min(-start % ps, n)  # free positions left in the last private page
        pages = self._take_pages(-(-(n - fill) // ps), RESERVED)
        head = seq._slots[start - 1] + 1 + np.arange(fill, dtype=np.int64) if fill else np.empty(0, np.int64)
        slots = np.concatenate([head, page_slots(pages, ps)[:n - fill]])
        self._write_row(seq, start, slots)
        seq.kv_len += n
        return torch.from_numpy(slots)

    def commit(self: RadixCache, seq: Sequence, tokens: TokensLike) -> None:
        """Declare the KV of positions [committed_len, committed_len + len(tokens)) written. They must
        lie below kv_len; `tokens` must equal seq.tokens where they overlap and extends it beyond.
        Full pages are inserted now (shareable); the Sequence's lock moves down to them; pages another
        request inserted first are re-pointed to the tree's slots and the duplicates freed."""
        self._check_seq(seq)
        toks = as_tokens(tokens)
        c, m = seq.committed_len, len(toks)
        if c + m > seq.kv_len:
            raise SequenceError(f"commit of positions [{c}, {c + m}) but only {seq.kv_len} have slots; "
                                "reserve() first")
        overlap = min(c + m, seq._num_tokens) - c
        if overlap > 0 and not np.array_equal(toks[:overlap], seq._tokens[c:c + overlap]):
            raise SequenceError(f"commit: tokens differ from the Sequence's known tokens at [{c}, {c + overlap})")
        seq._tokens[c + overlap:c + m] = toks[overlap:]
        seq._num_tokens = max(seq._num_tokens, c + m)
        seq.committed_len = c + m
        if (c + m) // self.page_size * self.page_size > seq.tree_len:
            self._share(seq, (c + m) // self.page_size * self.page_size)

    def _share(self: RadixCache, seq: Sequence, end: int) -> None:
        # [tree_len, end): the Sequence's reserved full pages, moving into the tree now.
        # [tree_len, tree_len + dup): another request cached these tokens first: its slots win.
        start, ps = seq.tree_len, self.page_size
        toks, slots = seq._tokens[start:end], seq._slots[start:end]
        walked = self.tree.walk(toks, seq.node)
        k, dup = self.tree.device_part(*walked, seq.node)  # host-only nodes take our pages
        tree_slots = self.tree.path_slots(walked[0][:k], dup).copy()
        node, _ = self.tree.insert(toks, slots, seq.node, seq.priority, walked)
        self._free_pages(slot_pages(slots[:dup], ps))
        self.pages.set(slot_pages(slots[dup:], ps), CACHED)
        if dup:
            self._write_row(seq, start, tree_slots)
        self.tree.lock(node)
        self.tree.unlock(seq.node)
        seq.node = node

    def close(self: RadixCache, seq: Sequence) -> None:
        """End a request: unlock its prefix, free its private pages (the partial last page and every
        reserved-but-uncommitted page) and release its row. The Sequence is unusable afterwards."""
        self._check_seq(seq)
        self._free_pages(slot_pages(seq._slots[seq.tree_len:seq.kv_len], self.page_size))
        self.tree.unlock(seq.node)
        self.req_pool.free_row(seq.row)
        del self._seqs[seq.row]
        seq.closed = True

    def batch(self: RadixCache, seqs: list[Sequence]) -> BatchInputs:
        """Inputs of one forward over positions [committed_len, kv_len) of each Sequence. Mutates nothing."""
        for seq in seqs:
            self._check_seq(seq)
        if len({s.row for s in seqs}) != len(seqs):
            raise SequenceError("batch: the same Sequence appears twice")
        device = self.req_pool.req_to_token.device
        i32 = lambda xs: torch.tensor(xs, dtype=torch.int32, device=device)  # noqa: E731
        rows, seq_lens = i32([s.row for s in seqs]), i32([s.kv_len for s in seqs])
        prefix = i32([s.committed_len for s in seqs])
        out = [s._slots[s.committed_len:s.kv_len] for s in seqs]
        out_slots = torch.from_numpy(np.concatenate(out) if out else np.empty(0, np.int64)).to(device)
        kv_indptr, kv_indices = build_kv_indices(self.req_pool.req_to_token, rows, seq_lens)
        return BatchInputs(rows, prefix, seq_lens - prefix, seq_lens, out_slots, kv_indptr, kv_indices)

    def sequences(self: RadixCache) -> list[Sequence]:
        """The open Sequences, by row."""
        return [self._seqs[r] for r in sorted(self._seqs)]

    # ------------------------------------------------------------------ helpers

    def _write_row(self: RadixCache, seq: Sequence, start: int, slots: np.ndarray) -> None:
        seq._slots[start:start + len(slots)] = slots
        if len(slots):
            self.req_pool.req_to_token[seq.row, start:start + len(slots)] = torch.from_numpy(slots)

    def _check_seq(self: RadixCache, seq: Sequence) -> None:
        if not isinstance(seq, Sequence) or seq._owner is not self:
            raise SequenceError(f"{seq!r} does not belong to this cache")
        if seq.closed:
            raise SequenceError(f"{seq!r} is closed")

    def _check_length(self: RadixCache, n: int, what: str) -> None:
        if n > self.config.max_context_len:
            raise ContextLengthError(f"{what}: {n} positions exceed max_context_len "
                                     f"{self.config.max_context_len}; raise CacheConfig.max_context_len")
