"""`radixkv demo`: a few prompts into a small cache, the radix tree they share, then eviction.

Tokens come from a built-in word tokenizer (each new word or punctuation mark gets the next id),
so the tree prints as words. The cache is real (RadixCache with a 1x1x1 KV per token); one
request stays open (locked) while a long prompt forces eviction, and every victim is listed with
the policy key that made it go first, including a parent that became a leaf when its children went.
"""

from __future__ import annotations

import re

import numpy as np
import torch
from rich.console import Console
from rich.tree import Tree

from radixkv import CacheConfig, RadixCache
from radixkv.keys import namespace_key
from radixkv.radix.node import TreeNode

PROMPTS = (
    "What is the capital of France ?",
    "What is the capital of Germany ?",
    "What is the largest planet ?",
    "What is the capital of France ? Answer in one word .",
    "What is the largest planet in the solar system ?",
)
PRESSURE = "Summarize the history of the Roman Empire from the founding of Rome to the fall of Constantinople ."


class WordTokenizer:
    """Words and punctuation to ids, assigned in order of first appearance."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.words: list[str] = []

    def encode(self, text: str) -> list[int]:
        out = []
        for w in re.findall(r"\w+|[^\w\s]", text):
            if w not in self.ids:
                self.ids[w] = len(self.words)
                self.words.append(w)
            out.append(self.ids[w])
        return out

    def decode(self, ids) -> str:
        return " ".join(self.words[int(i)] for i in ids)


def serve(cache: RadixCache, tokens: list[int]) -> int:
    """One request through the tree-level API; returns how many cached tokens it reused."""
    r = cache.match_prefix(tokens)
    cache.lock(r.node)
    new = cache.alloc(len(tokens) - r.length)
    cache.insert(tokens, torch.cat([r.slots, new]))
    cache.unlock(r.node)
    return r.length


def render(cache: RadixCache, tok: WordTokenizer, title: str) -> Tree:
    root = cache.tree.root(namespace_key(None))
    tree = Tree(f"[bold]{title}[/]  cached {cache.sizes().cached} tokens, free {cache.sizes().free}")

    def add(parent: Tree, node: TreeNode) -> None:
        for child in sorted(node.children.values(), key=lambda n: n.id):
            lock = f" [red]locked x{child.lock_ref}[/]" if child.lock_ref else ""
            label = (f"[cyan]{tok.decode(child.tokens())}[/]  [dim]{len(child)} tok, hits {child.hit_count}, "
                     f"last use {child.last_access}[/]{lock}")
            add(parent.add(label), child)

    add(tree, root)
    return tree


def evict_for(cache: RadixCache, need: int) -> list[tuple[tuple, np.ndarray, int]]:
    """Evict `need` tokens one victim at a time, in the order an allocation would (a leaf can become a
    victim only once its children went). Returns each victim's (policy key, tokens evicted, edge length)."""
    index, victims = cache.tree.index, []
    while need > 0 and len(index):
        node = index.peek()
        key, toks = index.current_key(node), node.tokens().copy()
        freed = cache.evict(min(need, len(toks)))
        victims.append((key, toks[len(toks) - freed:], len(toks)))
        need -= freed
    return victims


def min_capacity() -> int:
    """Slots the demo needs: the locked in-flight request plus the long prompt that forces eviction."""
    tok = WordTokenizer()
    for text in PROMPTS:
        tok.encode(text)
    return len(tok.encode(PROMPTS[1])) + len(tok.encode(PRESSURE))


def main(policy: str = "lru", capacity: int = 32, console: Console | None = None) -> RadixCache:
    """Run the demo and print it; returns the cache (tests inspect it)."""
    con = console or Console()
    tok = WordTokenizer()
    cfg = CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=capacity, page_size=1,
                      max_requests=1, max_context_len=capacity, dtype=torch.float16, eviction=policy)
    cache = RadixCache(cfg)
    total = 0
    for text in PROMPTS:
        ids = tok.encode(text)
        total += len(ids)
        con.print(f"[green]+[/] {text!r}: {len(ids)} tokens, {serve(cache, ids)} reused from the cache")
    locked = cache.match_prefix(tok.encode(PROMPTS[1])).node  # an in-flight request still holds this one
    cache.lock(locked)
    s = cache.sizes()
    con.print(render(cache, tok, "radix tree"))
    con.print(f"{total} prompt tokens held in {s.cached} cached tokens: sharing saved {total - s.cached} "
              f"({1 - s.cached / total:.0%}). {PROMPTS[1]!r} is still in flight: its path is locked.")

    ids = tok.encode(PRESSURE)
    con.print(f"\n[yellow]pressure:[/] {PRESSURE!r} needs {len(ids)} slots, {cache.sizes().free} free; "
              f"policy {policy!r} evicts the smallest keys first (locked paths are never candidates)")
    for key, gone, size in evict_for(cache, len(ids) - cache.sizes().free):
        part = f"{len(gone)} tok" if len(gone) == size else f"{len(gone)} of {size} tok: its tail"
        con.print(f"  [red]-[/] {tok.decode(gone)!r} ({part}) key={key}")
    serve(cache, ids)
    cache.unlock(locked)
    con.print(render(cache, tok, "after eviction"))
    cache.check_invariants()
    return cache
