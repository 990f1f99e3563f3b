"""WindowGroup: a sliding-window or chunked layer group with KV of its own, freed where no query reads it.

A chunk group (GroupSpec kind "chunk", chunk C: Llama 4's chunked attention) is a window group whose
reach is the current chunk (radix/windows.py `Reach`): a query at q reads [q // C * C, q], so a
request crossing into a new chunk frees the previous chunk's KV (C / 2 tokens held on average, vs
C - 1 for a window of W = C), and a chunk boundary is a resume point that needs no chunk KV.
Below, "W - 1 tokens before p" reads "[first(p), p)" for either kind.

The window layers of a model (GroupSpec kind "window", window W) keep their K/V in a smaller pool
of their own (`kv_pool.k_buffer[kv_pool.buffer_index[layer]]` is `[window_slots, heads, dim]` for them), in window
pages: one window page per full page of positions it holds. There is still ONE req_to_token table,
of full slots; `full_to_window[full_slot] -> window_slot` (int64, SGLang's
full_to_swa_index_mapping) translates it, so the attention kernels are unchanged: a window layer
reads its own buffers through `window_inputs()`, the step's rows of req_to_token translated once
(positions outside a query's window are never read, so a stale entry there is harmless: every
entry is a valid slot).

Who holds the window page of a full page (the group's ledger states):

    RESERVED   an open Sequence's private full page [tree_len, kv_len): taken with it at reserve()
    CACHED     a tree node's component: at commit() the new nodes take the Sequence's window pages
               (a node whose window KV was tombstoned takes them too: it heals); pages the tree
               already holds are duplicates, freed
    FREE       given back at close() (the private tail), or when a component is evicted

A running Sequence only reads positions >= committed_len - W + 1. Its lock therefore protects
only the window KV of the last W tokens before the node it holds (radix/windows.py `protected`).
Older window KV of the nodes it inserted is tombstoned as it commits (`trim`), except where a match
may still end: within W - 1 tokens before a branch point (two children) or another lock; what stays
(those, and the last W tokens of every finished request: where its next turn resumes) is kept for
reuse until this group's pool runs short, then goes first (policy order, cut at a page boundary),
full KV untouched. A match ends only where every window group holds [p - W + 1, p)
(radix/windows.py `resumable`); a request that recomputes a prefix whose window KV was tombstoned
gives the tree its window pages back (commit heals).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import torch

from radixkv.cache_groups import SecondaryGroup
from radixkv.config import GroupSpec
from radixkv.errors import OutOfSlotsError
from radixkv.pools import CACHED, RESERVED, page_slots
from radixkv.radix import RadixTree, TreeNode
from radixkv.radix.components import drop_component, set_component
from radixkv.radix.evict import secondary_victims
from radixkv.radix.windows import Reach, protected
from radixkv.results import BatchInputs, LockHandle
from radixkv.runs import expand
from radixkv.tokens import TokensLike


class WindowInputs(NamedTuple):
    """A step's inputs for the layers of one window group (kernels take them as req_to_token + rows)."""

    req_to_token: torch.Tensor  # int32 [batch, max_len]: window slots of each row's positions (stale outside windows)
    rows: torch.Tensor  # int32 [batch]: 0..batch-1, the rows of req_to_token above
    out_slots: torch.Tensor  # int64 [sum(extend_lens)]: window slots where the new K/V go


class WindowGroup(SecondaryGroup):
    def __init__(self, index: int, spec: GroupSpec, page_size: int, tree: RadixTree, own: Callable[[], None],
                 num_full_pages: int, device: torch.device) -> None:
        super().__init__(index, spec, page_size, tree, own)
        self.window = spec.size  # W, or the chunk C
        self.reach = Reach(spec.kind, spec.size)  # what resuming at a position needs of this group
        self.page_map = np.full(num_full_pages, -1, dtype=np.int64)  # full page -> its window page (host truth)
        self.full_to_window = torch.zeros(num_full_pages * page_size, dtype=torch.int64, device=device)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []  # (full pages, window pages) not yet on the device
        self._trimmed: dict[int, int] = {}  # row -> position up to which trim() decided its nodes

    def protected(self, node: TreeNode) -> int:
        return protected(node, self.reach, self.page_size)

    def attach(self, handle: LockHandle, pages: TokensLike) -> None:
        super().attach(handle, pages)
        node = self._tree.check_node(handle)
        full, window = node.pages, node.secondary[self.index - 1]
        assert full is not None and window is not None  # attach checked both
        self._map(expand(full, node.size // self.page_size), window)

    # ------------------------------------------------------------------ Sequence hooks (RadixCache)

    def check_room(self, k: int) -> None:
        """Read-only: OutOfSlotsError unless k window pages can be had (free, or evictable)."""
        short = k - self.ledger.num_free_pages
        if short > 0 and secondary_victims(self._tree, self.index, short, self.protected)[1] < short:
            raise OutOfSlotsError(f"window group {self.index}: need {k} pages, {self.ledger.num_free_pages} free and "
                                  f"too few evictable; close Sequences or raise its GroupSpec.num_slots")

    def reserve(self, full_pages: np.ndarray) -> None:
        """An open Sequence took `full_pages`: a window page each (check_room said they exist)."""
        self._map(full_pages, self.take(len(full_pages), RESERVED))

    def commit(self, nodes: list[TreeNode], full_pages: np.ndarray) -> None:
        """`nodes` (in order) now hold the positions the Sequence computed in its private
        `full_pages` (whole nodes): each node without window KV takes the Sequence's window pages
        for its edge; where the tree had window KV already, the Sequence's copy is freed."""
        mine, g, off = self.page_map[full_pages], self.index - 1, 0
        for node in nodes:
            assert node.pages is not None  # the nodes a commit just inserted or matched are on the device
            tree_pages = expand(node.pages, node.size // self.page_size)
            part = mine[off:off + len(tree_pages)]
            off += len(part)
            if node.secondary[g] is None:
                set_component(self._tree.group_index, node, self.index, part.copy())
                self.ledger.move(part, CACHED)
                self._map(tree_pages, part)  # the tree's full pages, when the Sequence's were duplicates
            else:
                self.ledger.release(part)

    def trim(self, row: int, bottom: TreeNode, cached_len: int) -> None:
        """After a commit of the Sequence in `row` (its lock now on `bottom`, reused prefix
        `cached_len`): tombstone the window KV of the nodes it inserted that no one reads any more
        and no match is likely to end after: whole nodes ending at or before first(bottom.end)
        (bottom.end - W + 1; a chunk group: the start of bottom.end's chunk), so a match at
        bottom.end, or below it after close, still resumes; not after first(b) of a branch point b
        (a node with two children: where other requests' matches end); not
        protected by another lock. Each node is decided once (`_trimmed[row]`), so a commit walks
        only the nodes since the last one."""
        lo, done = self.reach.first(bottom.end), self._trimmed.get(row, cached_len)
        node, branch, decided, chunks = bottom, None, done, list[np.ndarray]()
        while node.parent is not None and node.depth >= done:
            if len(node.children) > 1:
                branch = node.end
            if node.end <= lo:
                decided = max(decided, node.end)
                if (branch is None or node.end <= self.reach.first(branch)) and not self.protected(node):
                    pages = drop_component(self._tree.group_index, node, self.index)  # None: a tombstone already
                    if pages is not None:
                        chunks.append(pages)
            node = node.parent  # type: ignore[assignment]  # a TreeNode's parent is a TreeNode
        self._trimmed[row] = decided
        if chunks:
            self.ledger.release(np.concatenate(chunks))

    def close(self, row: int, full_pages: np.ndarray) -> None:
        """The Sequence in `row` closes and frees its private `full_pages`: their window pages go too."""
        self.ledger.release(self.page_map[full_pages])
        self._trimmed.pop(row, None)

    # ------------------------------------------------------------------ the forward's inputs

    def window_inputs(self, inputs: BatchInputs, req_to_token: torch.Tensor, max_len: int) -> WindowInputs:
        """The step's rows of `req_to_token` (`[max_requests, max_context_len]`, full slots), their
        first `max_len` positions translated to window slots, and the window `out_slots`."""
        self._own()
        self._flush()
        table = self.full_to_window[req_to_token[inputs.rows.long(), :max_len].long()].to(torch.int32)
        rows = torch.arange(len(inputs.rows), dtype=torch.int32, device=table.device)
        return WindowInputs(table, rows, self.full_to_window[inputs.out_slots])

    def _map(self, full_pages: np.ndarray, window_pages: np.ndarray) -> None:
        self.page_map[full_pages] = window_pages
        self._pending.append((full_pages.copy(), window_pages.copy()))

    def _flush(self) -> None:
        if self._pending:
            full, window = (np.concatenate(a) for a in zip(*self._pending))
            self._pending = []
            device = self.full_to_window.device
            self.full_to_window[torch.from_numpy(page_slots(full, self.page_size)).to(device)] = \
                torch.from_numpy(page_slots(window, self.page_size)).to(device)

    # ------------------------------------------------------------------ checks

    def check_window(self, private: list[np.ndarray], needed: list[np.ndarray]) -> None:
        """Recompute who holds each window page: tree components (CACHED) and the window pages of
        open Sequences' private full pages (`private`, RESERVED) must be exactly the ledger's, and
        every full page an open Sequence still reads (`needed`: its positions from committed_len -
        W + 1 on) must map to a window page held for it, on the host and on the device."""
        self.check()
        g, nodes = self.index - 1, [n for n in self._tree.nodes() if n.parent is not None]
        held = [(expand(n.pages or [], n.size // self.page_size), w)
                for n in nodes if (w := n.secondary[g]) is not None]
        held += [(p, self.page_map[p]) for p in private]
        full = np.concatenate([f for f, _ in held]) if held else np.empty(0, dtype=np.int64)
        window = np.concatenate([w for _, w in held]) if held else full
        if not np.array_equal(self.page_map[full], window):
            raise AssertionError(f"window group {self.index}: page_map disagrees with the pages held")
        reserved = np.flatnonzero(self.ledger.state == RESERVED)
        mine = np.concatenate([self.page_map[p] for p in private]) if private else reserved[:0]
        if not np.array_equal(np.sort(mine), reserved) or (mine < 0).any():
            raise AssertionError(f"window group {self.index}: RESERVED pages != open Sequences' window pages")
        held_for = np.full(self.ledger.num_pages, -1, dtype=np.int64)
        held_for[window] = full
        need = np.concatenate(needed) if needed else full[:0]
        got_w = self.page_map[need]
        if (got_w < 0).any() or (held_for[got_w] != need).any():
            raise AssertionError(f"window group {self.index}: an open Sequence lost window KV it still reads")
        self._flush()
        got = self.full_to_window[torch.from_numpy(page_slots(full, self.page_size))].cpu().numpy()
        if not np.array_equal(got, page_slots(window, self.page_size)):
            raise AssertionError(f"window group {self.index}: full_to_window disagrees with page_map")


def path_between(top: TreeNode, bottom: TreeNode) -> list[TreeNode]:
    """The nodes below `top` down to `bottom` (its descendant, included), top to bottom."""
    out: list[TreeNode] = []
    node: TreeNode | None = bottom
    while node is not top and node is not None:
        out.append(node)
        node = node.parent  # type: ignore[assignment]  # a TreeNode's parent is a TreeNode
    return out[::-1]
