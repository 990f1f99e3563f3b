"""Belady's offline optimum (OPT) for a prefix cache: the best token hit rate any eviction policy
could reach on a trace at a given capacity, under the rules the RadixCache runner plays by.

The rules (the runner's request lifecycle, `radixkv.bench.runner`), in pages of `page_size` tokens:
  1. match: the hit is the cached whole-page prefix of the prompt (a partial last page never
     matches); that matched path is locked for the rest of the request.
  2. alloc: `ceil((len(tokens) - hit) / page_size)` fresh pages; when fewer are free, exactly the
     shortfall is evicted from unlocked cached pages, leaf tails first (contents stay
     prefix-closed). With one request in flight this always succeeds unless the sequence alone
     needs more pages than the cache has; such a request is rejected before step 1 (no match, no
     hit, counted in `oom`), as a scheduler would refuse it.
  3. insert: every whole page of `tokens` is cached afterwards; the partial last page is freed.
Hit rate = matched prompt tokens / prompt tokens (SGLang's harness counts the same way).

How OPT is computed. Cached contents are always prefix-closed, so a request's hit equals the
number of its prompt pages that are cached: paging with unit pages, where request i *references*
its whole prompt pages (a hit when cached) and *loads* all its whole pages. Belady's rule evicts
the page whose next reference lies furthest ahead (never again = infinitely far). The trace is
first cut into segments (a compressed trie, split also at every prompt end and sequence end)
inside which every page has the same references, so the simulation moves segments, not tokens:
a max-heap of evictable leaf segments keyed (next reference, depth), trimmed tail first.
Cost O(segment visits * log segments) after an O(tokens) numpy trie build; about 10 ms for 1,000
requests of 2,000 tokens.

When it is exact. Evicting from leaves is Belady's rule itself when a page's next reference is
never earlier than its parent's. That holds whenever no request's output pages (whole pages past
its whole prompt pages) were cached before it, i.e. no output repeats tokens of an earlier
sequence at the same position: true of every workload in radixkv.bench.workloads (outputs are
fresh random ids) and checked per run (`OptResult.exact`). Otherwise a cached page can be worth
nothing now (it is reloaded as output before anyone reads it) yet sit above a useful child, and
the leaf rule can lose a little; the result is then a lower bound on the optimum.
tests/test_opt.py checks equality with exhaustive search over all eviction choices on small
traces where `exact` holds, and the lower bound where it does not.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np

from radixkv.bench.workloads import Request

_INF = 1 << 62  # next reference of a page that is worthless to keep


@dataclass
class Segments:
    """Compressed page trie of a trace. Node 0 is the root (no pages)."""

    page_size: int
    parent: list[int]  # node -> parent node (-1 for the root)
    length: list[int]  # node -> pages on its edge
    end: list[int]  # node -> pages from the root to its end
    paths: list[list[int]]  # request -> nodes root-excluded, root to the end of its whole pages
    prompt_nodes: list[int]  # request -> how many leading nodes of its path lie inside the prompt
    prompt_pages: list[int]  # request -> whole prompt pages (the most it can match)

    @property
    def total_pages(self) -> int:
        """Distinct whole pages over the trace (tokens a cache needs to hold everything / page_size)."""
        return sum(self.length)


class _TrieBuilder:
    def __init__(self, reqs: Sequence[Request], ps: int) -> None:
        self.reqs, self.ps = reqs, ps
        self.src, self.start = [-1], [0]  # node -> (request whose tokens hold its edge, first page)
        self.parent, self.length, self.end = [-1], [0], [0]
        self.children: list[dict[bytes, int]] = [{}]

    def _page(self, r: int, p: int) -> bytes:
        return self.reqs[r].tokens[p * self.ps:(p + 1) * self.ps].tobytes()

    def _new(self, src: int, start: int, length: int, parent: int) -> int:
        nid = len(self.parent)
        self.src.append(src), self.start.append(start), self.length.append(length)
        self.parent.append(parent), self.end.append(self.end[parent] + length), self.children.append({})
        self.children[parent][self._page(src, start)] = nid
        return nid

    def _split(self, nd: int, m: int) -> int:
        """Cut `nd` after m pages; the lower half keeps `nd` (and its end), a new node is the upper."""
        par = self.parent[nd]
        up = len(self.parent)
        self.src.append(self.src[nd]), self.start.append(self.start[nd]), self.length.append(m)
        self.parent.append(par), self.end.append(self.end[par] + m), self.children.append({})
        self.children[par][self._page(self.src[nd], self.start[nd])] = up
        self.start[nd] += m
        self.length[nd] -= m
        self.parent[nd] = up
        self.children[up][self._page(self.src[nd], self.start[nd])] = nd
        return up

    def descend(self, r: int, upto: int) -> int:
        """The node ending exactly `upto` pages down request r's sequence, creating and splitting."""
        ps, toks = self.ps, self.reqs[r].tokens
        nd, pos = 0, 0
        while pos < upto:
            child = self.children[nd].get(self._page(r, pos))
            if child is None:
                return self._new(r, pos, upto - pos, nd)
            k = min(self.length[child], upto - pos)
            s0 = self.start[child] * ps
            a = self.reqs[self.src[child]].tokens[s0:s0 + k * ps]
            diff = np.flatnonzero(a != toks[pos * ps:(pos + k) * ps])
            m = int(diff[0]) // ps if len(diff) else k
            if m < self.length[child]:
                child = self._split(child, m)
            nd, pos = child, pos + m
        return nd


def build_segments(reqs: Sequence[Request], page_size: int) -> Segments:
    """Cut the trace into segments: trie edges split at every prompt end and sequence end."""
    b = _TrieBuilder(reqs, page_size)
    full = [len(r.tokens) // page_size for r in reqs]
    prompt = [min(r.prompt_len // page_size, f) for r, f in zip(reqs, full)]
    ends = [b.descend(i, full[i]) for i in range(len(reqs))]
    for i in range(len(reqs)):
        b.descend(i, prompt[i])
    paths, pnodes = [], []
    for i, nd in enumerate(ends):
        path = []
        while nd > 0:
            path.append(nd)
            nd = b.parent[nd]
        path.reverse()
        paths.append(path)
        pnodes.append(sum(1 for n in path if b.end[n] <= prompt[i]))
    return Segments(page_size, b.parent, b.length, b.end, paths, pnodes, prompt)


def unique_prefix_tokens(reqs: Sequence[Request]) -> int:
    """Distinct token prefixes over all full sequences = tokens a radix tree needs to hold them all."""
    return build_segments(reqs, page_size=1).total_pages


class OptResult(NamedTuple):
    hit_tokens: int  # matched prompt tokens over the trace
    prompt_tokens: int  # all prompt tokens
    oom: int  # requests rejected: the whole sequence needs more pages than the cache has
    exact: bool  # True when the no-repeated-output condition holds, so this is the optimum

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def _next_refs(seg: Segments, admitted: list[bool]) -> list[list[tuple[int, int]]]:
    """node -> its (request, value) appearances in order; value = request if referenced else _INF."""
    refs: list[list[tuple[int, int]]] = [[] for _ in seg.parent]
    for i, path in enumerate(seg.paths):
        if not admitted[i]:
            continue
        cp = seg.prompt_nodes[i]
        for j, nd in enumerate(path):
            refs[nd].append((i, i if j < cp else _INF))
    return refs


def opt_hit_rate(reqs: Sequence[Request], capacity: int, page_size: int = 1,
                 segments: Segments | None = None) -> OptResult:
    """Belady's optimal token hit rate of `reqs` in a cache of `capacity` tokens (see module doc).

    Pure function of its inputs; pass `segments` (from `build_segments`) to reuse a trie across capacities.
    """
    seg = segments if segments is not None else build_segments(reqs, page_size)
    ps, n_pages = page_size, capacity // page_size
    admitted = [-(-len(r.tokens) // ps) <= n_pages for r in reqs]
    refs = _next_refs(seg, admitted)
    ptr = [0] * len(seg.parent)  # node -> index of its next appearance in refs[node]
    cached = [0] * len(seg.parent)  # node -> pages of its edge cached (a prefix of the edge)
    cached_kids = [0] * len(seg.parent)
    version = [0] * len(seg.parent)
    nxt = [_INF] * len(seg.parent)
    heap: list[tuple[int, int, int, int]] = []  # (-next reference, -end, version, node)
    used = hits = prompt_tokens = oom = 0
    seen = [False] * len(seg.parent)
    exact = True

    def push_if_leaf(nd: int) -> None:
        version[nd] += 1
        if cached[nd] and not cached_kids[nd]:
            heapq.heappush(heap, (-nxt[nd], -seg.end[nd], version[nd], nd))

    for i, req in enumerate(reqs):
        path, cp = seg.paths[i], seg.prompt_nodes[i]
        prompt_tokens += req.prompt_len
        if not admitted[i]:
            oom += 1
            continue
        exact = exact and not any(seen[nd] for nd in path[cp:])
        for nd in path:
            seen[nd] = True
        m, locked = 0, set()
        for nd in path[:cp]:
            if not cached[nd]:
                break
            locked.add(nd)
            m += cached[nd]
            if cached[nd] < seg.length[nd]:
                break
        hits += m * ps
        need = -(-(len(req.tokens) - m * ps) // ps)
        short, aside = need - (n_pages - used), []
        while short > 0:
            negn, nege, ver, nd = heapq.heappop(heap)
            if ver != version[nd]:
                continue
            if nd in locked:
                aside.append((negn, nege, ver, nd))
                continue
            k = min(short, cached[nd])
            cached[nd] -= k
            used -= k
            short -= k
            if cached[nd]:
                heapq.heappush(heap, (negn, nege, ver, nd))
            else:
                version[nd] += 1
                par = seg.parent[nd]
                cached_kids[par] -= 1
                if par > 0 and not cached_kids[par]:
                    push_if_leaf(par)
        for e in aside:
            heapq.heappush(heap, e)
        for nd in path:  # insert: the whole path is cached; advance each node past request i
            if not cached[nd]:
                cached_kids[seg.parent[nd]] += 1
            used += seg.length[nd] - cached[nd]
            cached[nd] = seg.length[nd]
            r, p = refs[nd], ptr[nd] + 1
            ptr[nd] = p
            nxt[nd] = r[p][1] if p < len(r) else _INF
        for nd in path:  # re-key; only the last one can be a leaf
            push_if_leaf(nd)
    return OptResult(hits, prompt_tokens, oom, exact)
