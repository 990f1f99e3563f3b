"""InsertSlots: the slots given to `RadixCache.insert`, checked before anything changes.

For insert(tokens, slots) with n = len(tokens) // page_size * page_size whole-page positions:

    [0, cached_len)      per page: the tree's own slots there (they stay), or the page_size slots of
                         one private page in order (a duplicate: freed)
    [cached_len, n)      the page_size slots of one private page per page, in order (become the tree's)
    [n, len(tokens))     a trailing partial page: private slots, whose pages are freed

Every private page named must be distinct. `accept` runs inside the tree's insert, after its
read-only walk found cached_len and before it changes anything, so a refusal changes nothing.

The usual caller matched, allocated and inserted: its slots are the match's (the tree's own) and
then exactly what alloc() just handed out. The ledger proves the second part in one comparison
(`PageLedger.fresh_start`: every page there private, named once, whole pages in order). The first
part is proved by one comparison too, with `MatchedSlots`: the runs of the pages whose slots the
cache's last match_prefix returned (so slots equal to their first ones are whole pages in order;
runs.are_first_slots compares without copying either side), and the node that match ended at with
the pages list (runs) it held then. While that node holds the very same list, the tree's pages down
to it are still the match's (`still_cached`), so `accept` need not read them; otherwise it compares
with the tree's. Anything else gets the full checks.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from radixkv.errors import InvalidSlotsError
from radixkv.pools import PageLedger, page_slots, slot_pages
from radixkv.radix.device_path import device_pages
from radixkv.radix.node import TreeNode
from radixkv.runs import are_first_slots
from radixkv.tokens import check_range, same_values, starts_with

_EMPTY: Final = np.empty(0, dtype=np.int64)  # (Final: compiled, a C static, not a module-dict lookup)
_any: Final = np.logical_or.reduce  # (no Python wrappers)
_ne: Final = np.not_equal
_cat: Final = np.concatenate
# An insert walks on from the last match's node only past this many tokens: below, the key bytes it spares
# (4 a token) cost less than its own slice and memcmp (callgrind, rag page 1: a 256-token match lost ~1.5k)
RESUME_MIN: Final = 1024


class MatchedSlots:
    """What the last match_prefix returned, kept by the cache: the runs of its slots' pages (lists nobody writes
    in place: the caller may write into its own tensor), the node it ended at and that node's pages list then,
    and the key it walked below `root` (int32 bytes of whole pages, the cache's own); `checked`: whether that key
    spells the caller's ids as_tokens checked (no extra keys gave it multimodal ids, which are negative)."""

    def __init__(self, runs: list[int], node: TreeNode, pages: list[int] | None, key: bytes, root: TreeNode,
                 checked: bool) -> None:
        self.runs = runs
        self.node = node
        self.pages = pages
        self.key = key
        self.root = root
        self.checked = checked

    def resumes(self, toks: np.ndarray, n: int, root: TreeNode) -> TreeNode | None:
        """The match's node, if an insert of int32 `toks` (n whole-page tokens) below `root` may walk on
        from it: `toks` start with the tokens of its path (one memcmp against the match's key: the path
        spelled them then, and a split keeps what a path spells) and it still holds its pages list
        (still_cached: still in the tree, at the same end); None otherwise, or below RESUME_MIN tokens."""
        node = self.node
        length = node.end - root.end
        if length < RESUME_MIN or length > n or root is not self.root or node.pages is not self.pages:
            return None
        return node if starts_with(self.key, toks if length == len(toks) else toks[:length]) else None

    def still_cached(self, path: list[TreeNode], k: int) -> bool:
        """Whether the device pages of `path[:k]` (an insert's walk from the match's root) start with
        the match's: its node is among them and holds the very list it held then. A node's pages
        are never written in place, only replaced (split, drop, regain); its ancestors keep theirs
        while it keeps its own (device residency is prefix-closed; a split keeps their concatenation)."""
        node = self.node
        if node.pages is not self.pages:
            return False
        for i in range(k):
            if path[i] is node:
                return True
        return False


class InsertSlots:
    def __init__(self, ledger: PageLedger, given: np.ndarray, n: int, matched: MatchedSlots | None = None) -> None:
        """`given`: int64 `[len(tokens)]` slots, not yet range-checked; `n`: whole-page positions;
        `matched`: the cache's record of its last match_prefix, or None."""
        ps = ledger.page_size
        self.ledger = ledger
        start = ledger.fresh_start(given)  # positions [start, len(given)) are alloc()'s own slots, or -1
        self.fresh = start // ps  # ... from this page on (-1: none)
        body = given if n == len(given) else given[:n]
        head = body if start < 0 else body[:start]  # (alloc()'s own slots are whole pages in order)
        # the match's slots there: whole pages in order (one pass, no copy), and the tree's while still_cached
        self.matched = matched if matched is not None and len(head) and are_first_slots(matched.runs, ps, head) \
            else None
        if ps == 1:
            self.pages = body
        else:  # each page of positions: the slots of one page, in order
            self.pages = slot_pages(body, ps)  # int64 [n // ps]
            if len(head) and self.matched is None \
                    and page_slots(self.pages[:len(head) // ps], ps).tobytes() != head.tobytes():
                raise InvalidSlotsError("insert: each page of positions must be the tree's own slots there "
                                        "or the page_size slots of one private page, in order")
        if n == len(given):
            self.tail = _EMPTY
        else:  # the pages of the partial tail: alloc()'s last page, or checked
            self.tail = slot_pages(given[n:n + 1], ps) if start >= 0 else self._tail_pages(given[n:], ps)
        self.duplicates = self.new = _EMPTY
        self.run_at = -1

    def _tail_pages(self, tail: np.ndarray, ps: int) -> np.ndarray:
        check_range(tail, self.ledger.num_pages * ps, "insert: slots")
        if len(set(tail.tolist())) != len(tail):  # fewer than page_size slots
            raise InvalidSlotsError("insert: slots must be distinct; the same slot appears twice")
        return np.array(sorted(set((tail // ps).tolist())), dtype=np.int64)

    def accept(self, cached_len: int, path: list[TreeNode], k: int) -> list[int] | None:
        """Classify the given pages against the tree's (cached_len tokens, `path[:k]`'s pages);
        InvalidSlotsError unless every page that is not the tree's own is private and named once.
        Returns the runs of the new pages (`new`) when they are alloc()'s in order, else None."""
        ledger = self.ledger
        kp, f = cached_len // ledger.page_size, self.fresh
        if 0 <= f <= kp and (not f or self._head_cached(path, k, f)):
            # the tree's own pages up to f, alloc()'s from there: those before kp duplicate cached ones
            pages = self.pages
            self.duplicates, self.new = (pages[f:kp] if f < kp else _EMPTY), (pages[kp:] if kp else pages)
            self.run_at = kp - f  # `new`: alloc()'s pages in order from its (kp - f)-th on (PageLedger.settle)
            return ledger.fresh_runs(kp - f, len(self.new))
        head = self.pages[:kp]
        differ = _ne(head, device_pages(path, k, kp))  # (kp pages each)
        duplicates = _EMPTY if not kp or not _any(differ) else head[differ]
        new = self.pages[kp:] if kp else self.pages
        private = new if not len(duplicates) and not len(self.tail) else _cat([duplicates, new, self.tail])
        why = ledger.private_and_distinct(private)
        if why is not None:
            raise InvalidSlotsError(f"insert: slots must be the tree's own, or distinct private pages from "
                                    f"alloc(): {why}")
        self.duplicates, self.new = duplicates, new
        return None

    def _head_cached(self, path: list[TreeNode], k: int, f: int) -> bool:
        """Whether the given pages [0, f) are the tree's there: the match's, still cached, or compared."""
        matched = self.matched
        if matched is not None and matched.still_cached(path, k):
            return True
        return same_values(self.pages[:f], device_pages(path, k, f))

    def freed(self) -> np.ndarray:
        """Pages the caller gives up: duplicates of cached pages and the partial tail's pages."""
        return self.tail if not len(self.duplicates) else _cat([self.duplicates, self.tail])
