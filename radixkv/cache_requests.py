"""The request level's state changes: what RadixCache.open / reserve / commit / close do.

The public methods (cache.py) check the calling thread and hand over; these functions validate
their whole input, then ask the owners (cache_base.py) to change in an order that cannot fail
halfway, like every call of the facade. A Sequence's pages: matched at open (the tree's, locked),
reserved (private to the Sequence), committed (inserted: the lock moves down to them), and at
close the partial last page and every reserved-but-uncommitted page go back to the ledger.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from radixkv.cache_base import CacheBase
from radixkv.cache_host import promote
from radixkv.cache_windows import path_between
from radixkv.keys import as_extra_keys
from radixkv.pools import CACHED, RESERVED, page_slots
from radixkv.radix import SEQUENCE, locks, lookup
from radixkv.runs import expand_slots
from radixkv.sequences import Sequence
from radixkv.tokens import ExtraKeysArg, IntArg, SecondsArg, SequenceArg, TokensLike, as_count, as_priority, as_tokens


def open_sequence(c: CacheBase, tokens: TokensLike, namespace: Any, max_reuse: IntArg, priority: IntArg,
                  extra_keys: ExtraKeysArg, pin_ttl: SecondsArg) -> Sequence:
    """RadixCache.open."""
    extra = as_extra_keys(extra_keys)
    ns, toks = c._key(as_tokens(tokens), namespace, extra)
    prio = as_priority(priority)
    reuse = len(toks) if max_reuse is None else min(as_count(max_reuse, "max_reuse"), len(toks))
    until = None if pin_ttl is None else c.pins.deadline(pin_ttl, "open(pin_ttl=...)")
    c.seqs.check_length(len(toks), "open")
    c.seqs.check_row_free()
    root = c.tree.root(ns)
    key = c._page_key(toks[:reuse])
    if until is not None:  # plan the pin before the match and promotion change anything
        c.pins.charge(sum(lookup.peek(c.tree, key, root)) - c.pins.pinned_length(key, root), "open(pin_ttl=...)")
    m = c._match(key, root, reuse)
    if m.host_length and c.host is not None:
        m = promote(c.tree, c.ledger, c.host, c._take, toks[:reuse], m)
    if until is not None:
        c.pins.pin(m.node, until, "open(pin_ttl=...)")  # within the charge above: cannot fail
    locks.lock(c.tree, m.node, SEQUENCE)
    seq = c.seqs.open(toks, namespace, prio, m.node, expand_slots(m.runs, m.length, c.page_size), extra)
    if until is not None:
        c.pins.open_row(seq.row, until)
    return seq


def reserve(c: CacheBase, seq: SequenceArg, n: IntArg) -> torch.Tensor:
    """RadixCache.reserve."""
    rec = c.seqs.get(seq)
    n, ps, start = as_count(n, "reserve(n)"), c.page_size, rec.kv_len
    c.seqs.check_length(start + n, "reserve")
    fill = min(-start % ps, n)  # free positions left in the last private page
    k = -(-(n - fill) // ps)
    for window in c.windows:  # window pages go with full pages: check first, change nothing
        window.check_room(k)
    pages = c._take(k, RESERVED)
    for window in c.windows:
        window.reserve(pages)
    head = rec.slots[start - 1] + 1 + np.arange(fill, dtype=np.int64)
    slots = np.concatenate([head, page_slots(pages, ps)[:n - fill]])
    c.seqs.extend(rec, slots)
    return torch.from_numpy(slots.copy())


def commit(c: CacheBase, seq: SequenceArg, tokens: TokensLike) -> None:
    """RadixCache.commit."""
    rec = c.seqs.get(seq)
    toks = as_tokens(tokens)
    if rec.extra_keys is not None and rec.extra_keys.mm:
        toks = rec.extra_keys.rekey(toks, rec.committed_len, rec.tokens)
    c.seqs.check_commit(rec, toks)
    start, end = c.seqs.commit(rec, toks)
    if end == start:
        return
    ps, node = c.page_size, rec.node
    pages = rec.slots[start:end][::ps] // ps
    result = c.tree.insert(rec.tokens[start:end].tobytes(), pages, node, rec.priority)
    if c.windows:
        nodes = path_between(node, result.node)
        for window in c.windows:
            window.commit(nodes, pages)
    k = result.cached_len // ps  # [start, start + k * ps): another request cached these first
    c.ledger.release(pages[:k])
    c.ledger.move(pages[k:], CACHED)
    if k:
        c.seqs.repoint(rec, start, page_slots(result.tree_pages, ps))
    locks.move_lock(c.tree, node, result.node, SEQUENCE)
    c.seqs.move_lock(rec, result.node)
    for window in c.windows:
        window.trim(rec.row, result.node, rec.cached_len)
    c.pins.extend(rec.row, result.node)
    if c.host is not None:
        c.host.back_up(result.gained)


def close(c: CacheBase, seq: SequenceArg) -> None:
    """RadixCache.close."""
    rec = c.seqs.get(seq)
    node = rec.node
    c.pins.close_row(rec.row)
    private = c.seqs.close(rec)[::c.page_size] // c.page_size
    for window in c.windows:
        window.close(rec.row, private)
    c.ledger.release(private)
    locks.unlock(c.tree, node, SEQUENCE)
