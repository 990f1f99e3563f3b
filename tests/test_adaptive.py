"""The learning policies through the real RadixCache, each against the fixed policies it should match:
the shadow cache against the real cache (request for request), `adaptive` against the better of LRU
and LFU, `lrfu` against its learned regimes, `slru` against LRU."""

from __future__ import annotations

import pytest
import torch

from radixkv import RadixCache
from radixkv.bench.opt import build_segments
from radixkv.bench.runner import replay, sim_config
from radixkv.bench.workloads import Request, agent, chat, gsp, tot
from radixkv.eviction import POLICIES, make_policy
from radixkv.eviction.adaptive import Adaptive
from radixkv.eviction.history import History
from radixkv.eviction.view import CachedNodeView
from radixkv.eviction.lrfu import LRFU
from radixkv.radix.shadow import ShadowTree

SESSIONS = {"chat": chat(num_convs=48, turns=6, system_prompt_len=256, user_len=32, answer_len=64),
            "agent": agent(num_agents=24, steps=8, tools_prompt_len=256, action_len=32, tool_output_len=96)}
SHARED = {"gsp": gsp(num_groups=24, prompts_per_group=10, system_prompt_len=512, question_len=32, output_len=64),
          "tot": tot(num_trees=6, shared_prefix_len=128, root_len=256, branch=3, depth=3, thought_len=32)}


def _capacity(reqs: list[Request], frac: float, page_size: int = 1) -> int:
    cap = max(int(frac * build_segments(reqs, 1).total_pages), max(len(r.tokens) for r in reqs))
    return -(-cap // page_size) * page_size


def _serve(cache: RadixCache, r: Request) -> int:
    """The bench lifecycle for one request; returns its hit."""
    m = cache.match_prefix(r.tokens[:r.prompt_len])
    cache.lock(m.node)
    cache.insert(r.tokens, torch.cat([m.slots, cache.alloc(len(r.tokens) - m.length)]))
    cache.unlock(m.node)
    return m.length


@pytest.mark.parametrize("policy", ["lru", "lfu", "slru", "fifo"])
@pytest.mark.parametrize("page_size", [1, 4])
def test_shadow_matches_the_real_cache_request_for_request(policy: str, page_size: int) -> None:
    """A ShadowTree under policy P, fed the same lookups and inserts with the real cache's
    occupancy as its capacity, matches exactly what a real RadixCache under P matches."""
    for reqs in (SESSIONS["chat"], SHARED["tot"]):
        cache = RadixCache(sim_config(_capacity(reqs, 0.1, page_size), page_size, policy, 4096))
        shadow = ShadowTree(make_policy(policy), page_size)
        for r in reqs:
            want = shadow.match(b"", r.tokens[:r.prompt_len // page_size * page_size].tobytes())
            assert _serve(cache, r) == want
            occupancy = cache.tree.evictable_size + cache.tree.protected_size
            shadow.insert(b"", r.tokens[:len(r.tokens) // page_size * page_size].tobytes(), occupancy)
            assert shadow.used == occupancy


def test_adaptive_keeps_up_with_the_better_fixed_policy() -> None:
    """LRU wins the session traces and LFU the shared-prefix ones (at these capacities); adaptive
    ends up following each winner and loses at most 2 points to it on these short traces (a few
    hundred requests: the lag before the first switch is most of the loss; bench/RESULTS.md has the
    margins on full-size traces)."""
    cells = [(SESSIONS, "chat", 0.25), (SESSIONS, "agent", 0.25), (SESSIONS, "agent", 0.5),
             (SHARED, "gsp", 0.5), (SHARED, "tot", 0.1), (SHARED, "tot", 0.25)]
    for group, name, frac in cells:
        winner, loser = ("lru", "lfu") if group is SESSIONS else ("lfu", "lru")
        reqs = group[name]
        cap = _capacity(reqs, frac)
        hit = {p: replay(reqs, cap, p).hit_rate for p in ("lru", "lfu", "adaptive")}
        assert hit[winner] > hit[loser] + 0.01, (name, frac, hit)  # the trace does separate the policies
        assert hit["adaptive"] >= hit[winner] - 0.02, (name, frac, hit)
        cache = RadixCache(sim_config(cap, 1, "adaptive", 4096))
        for r in reqs:
            _serve(cache, r)
        assert cache.tree.policy.leader == winner, (name, frac)


def test_adaptive_switch_rekeys_the_index() -> None:
    """After each switch every stored key is the new expert's key (check_invariants verifies
    stable keys against key(node) after every request)."""
    reqs = SHARED["gsp"]
    cache = RadixCache(sim_config(_capacity(reqs, 0.25), 1, "adaptive", 4096))
    policy = cache.tree.policy
    assert isinstance(policy, Adaptive)
    for r in reqs:
        _serve(cache, r)
        cache.check_invariants()
    assert policy.switches >= 1 and policy.leader == "lfu"
    assert all(cache.tree.index.current_key(n) == policy.experts[1].key(n) for n in cache.tree.index.nodes())


def _learned_rate(reqs: list[Request], cap: int) -> float:
    cache = RadixCache(sim_config(cap, 1, "lrfu", max(len(r.tokens) for r in reqs)))
    for r in reqs:
        _serve(cache, r)
    policy = cache.tree.policy
    assert isinstance(policy, LRFU)
    return policy.rate


def test_lrfu_learns_sessions_from_shared_prefixes() -> None:
    for name, reqs in SESSIONS.items():
        assert _learned_rate(reqs, _capacity(reqs, 0.25)) > LRFU.R_HI, name  # LRU order
    for name, reqs in SHARED.items():
        assert _learned_rate(reqs, _capacity(reqs, 0.25)) < LRFU.R_LO, name  # frequency-led


def test_slru_protects_twice_hit_nodes() -> None:
    """SLRU evicts a once-used prefix before an older one used three times (an insert, then two
    requests' match + insert, each counted once); LRU does the opposite."""
    a, b, c = (torch.arange(i * 100, i * 100 + 8, dtype=torch.int32) for i in range(1, 4))
    survivors = {}
    for policy in ("slru", "lru"):
        cache = RadixCache(sim_config(16, 1, policy, 16))
        for toks in (a, a, a, b):  # a: used three times (older); b: once (newer)
            m = cache.match_prefix(toks)
            cache.insert(toks, torch.cat([m.slots, cache.alloc(len(toks) - m.length)]))
        m = cache.match_prefix(c)
        cache.insert(c, torch.cat([m.slots, cache.alloc(8)]))  # needs 8 slots: one of a, b goes
        survivors[policy] = [cache.match_prefix(t).length == 8 for t in (a, b)]
        cache.check_invariants()
    assert survivors == {"slru": [True, False], "lru": [False, True]}


def _survivor(policy: str, older: int, newer: int) -> list[bool]:
    """Insert prefix A `older` times, then B `newer` times (direct inserts: alloc + insert, no
    match), then a third that needs one of them evicted; which of A, B is still cached."""
    a, b, c = (torch.arange(i * 100, i * 100 + 8, dtype=torch.int32) for i in range(1, 4))
    cache = RadixCache(sim_config(16, 1, policy, 16))
    for toks, times in ((a, older), (b, newer)):
        for _ in range(times):
            cache.insert(toks, cache.alloc(8))  # a duplicate's slots are freed, the tree keeps its own
    cache.insert(c, cache.alloc(8))  # needs 8 slots: one of a, b goes
    cache.check_invariants()
    return [cache.match_prefix(t).length == 8 for t in (a, b)]


@pytest.mark.parametrize("policy", ["lfu", "slru"])
def test_a_direct_insert_is_a_use(policy: str) -> None:
    """SGLang's SLRU accuracy case: a prefix inserted three times outlives a newer one inserted
    once under LFU and SLRU (before, inserts counted nothing and the older one went first, as LRU)."""
    assert _survivor(policy, 3, 1) == [True, False]
    assert _survivor("lru", 3, 1) == [False, True]  # the reference: recency alone


def test_a_match_then_its_own_insert_counts_once() -> None:
    """hit_count after each step against a count by hand: insert 1; match + insert 1 more; a bare
    match 1 more; a commit of an opened Sequence adds nothing beyond its open's match."""
    cache = RadixCache(sim_config(64, 1, "lfu", 64))
    toks = torch.arange(1, 9, dtype=torch.int32)
    cache.insert(toks, cache.alloc(8))
    node = cache.match_prefix(toks).node
    uses = [node.hit_count - 1]  # the match just counted one
    m = cache.match_prefix(toks)
    cache.insert(toks, m.slots)
    uses.append(node.hit_count - 1)
    seq = cache.open(toks.tolist())
    uses.append(node.hit_count - 1)
    cache.reserve(seq, 1)
    cache.commit(seq, [9])
    cache.close(seq)
    uses.append(node.hit_count - 1)
    assert uses == [1, 2, 3, 3]


@pytest.mark.parametrize("policy,order", [("mru", "newest access first"), ("filo", "newest creation first")])
def test_mru_and_filo_evict_in_sglang_order(policy: str, order: str) -> None:
    """Three prefixes created a, b, c and then touched c, a, b (so recency order is c < a < b);
    one eviction of 8 tokens: MRU takes the most recently touched (b), FILO the newest created (c)."""
    a, b, c = (torch.arange(i * 100, i * 100 + 8, dtype=torch.int32) for i in range(1, 4))
    cache = RadixCache(sim_config(24, 1, policy, 24))
    for toks in (a, b, c):
        cache.insert(toks, cache.alloc(8))
    for toks in (c, a, b):
        cache.match_prefix(toks)
    assert cache.evict(8) == 8
    want = {"mru": [True, False, True], "filo": [True, True, False]}[policy]
    assert [cache.match_prefix(t).length == 8 for t in (a, b, c)] == want, order


@pytest.mark.parametrize("key_len", [0, 4, 64, 1000])
def test_adaptive_history_is_charged_at_least_its_real_bytes_from_the_first_lookup(key_len: int) -> None:
    """Lookups before the first eviction are kept for the prior replay: the bytes charged per entry
    are at least what tracemalloc measures over 20k entries, for empty keys too (a lookup shorter than a page:
    before, 0 bytes were charged for them), and no more than the 3-tuple form took, whose charge is kept
    (eviction/history.py); and the history never outgrows HISTORY: it is dropped once the charge passes it."""
    import tracemalloc

    cache = RadixCache(sim_config(64, 1, "adaptive", 64))
    policy, root = cache.tree.policy, cache.tree.root(b"ns")
    policy.HISTORY, n = 1 << 30, 20_000  # more entries than the interpreter's tuple free lists hold
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(n):
            policy.on_lookup(root, i.to_bytes(4, "little") * (key_len // 4), 0)
        measured = (tracemalloc.get_traced_memory()[0] - base) / n
        charged = policy._history.bytes / n
        assert len(policy._history) == n and measured <= charged == History.ENTRY_BYTES + key_len, (measured, charged)
        assert measured <= History.ENTRY_BYTES - 40 + 1.01 * key_len  # three list slots an entry, no 64-byte tuple
        policy.HISTORY = policy._history.bytes + 1_000_000  # room for 1 MB more, then dropped
        peak = 0
        while policy._history is not None:
            policy.on_lookup(root, n.to_bytes(4, "little") * (key_len // 4), 0)
            n += 1
            if n % 64 == 0 and policy._history is not None:
                peak = max(peak, tracemalloc.get_traced_memory()[0] - base)
        assert 0 < peak <= policy.HISTORY, (peak, policy.HISTORY)
    finally:
        tracemalloc.stop()


def test_history_replays_the_traffic_before_the_first_eviction_without_its_key_bytes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the first eviction the prior's history keeps, per request of the bench lifecycle, a
    length (the lookup) and a leaf (the insert) instead of key bytes, and replays exactly the
    (ns, key, use) entries the policy saw; lookups no insert extends and inserts that made no leaf
    keep their bytes (before: every entry kept its whole key, 20x the bytes on this small trace)."""
    reqs = SESSIONS["chat"]
    seen: list[tuple[bytes, bytes, bool | None]] = []

    class Recording(Adaptive):  # an interpreted subclass of the (maybe compiled) policy
        def on_lookup(self, start: CachedNodeView, key: bytes, length: int) -> None:
            seen.append((start.ns, key, None))
            super().on_lookup(start, key, length)

        def on_cache(self, start: CachedNodeView, key: bytes, n: int, use: bool) -> None:
            seen.append((start.ns, key, use))
            super().on_cache(start, key, n, use)

    monkeypatch.setitem(POLICIES, "adaptive", Recording)
    cache = RadixCache(sim_config(sum(len(r.tokens) for r in reqs), 1, "adaptive", 4096))  # never evicts
    policy = cache.tree.policy
    assert isinstance(policy, Recording) and policy._history is not None
    for r in reqs:
        _serve(cache, r)
    history = policy._history
    assert history is not None and list(history) == seen
    assert history.bytes == History.ENTRY_BYTES * len(seen)
    assert sum(len(key) for _, key, _ in seen) > 10 * history.bytes
    for r in reqs[:20]:  # a lookup alone, then a request whose insert makes no leaf (all cached)
        cache.match_prefix(r.tokens[:3])
        _serve(cache, r)
    assert list(history) == seen and policy._shadows == {}


def test_policy_switches_traces_the_policy_without_changing_it() -> None:
    """bench/policy_switches.py (pure core only) logs the first eviction and each switch of the default
    policy; its traced run must hit exactly what a plain run of `adaptive` hits, and its switches must be
    the policy's own (seed 2013 at 10%: the held-out cell with three switches after the prior)."""
    import os
    import subprocess
    import sys

    from scripts import ROOT, load_script

    cell = "seed:2013@0.1"
    env = {**os.environ, "RADIXKV_PURE_PYTHON": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "policy_switches.py"), cell], capture_output=True,
                         text=True, check=True, env=env, cwd=ROOT).stdout.splitlines()
    grid = load_script(ROOT / "bench" / "policy_grid.py")
    reqs, page = grid.load("seed:2013")
    cap = grid.capacity(0.1, build_segments(reqs, page).total_pages * page, max(len(r.tokens) for r in reqs), page)
    cache = RadixCache(sim_config(cap, page, "adaptive", max(len(r.tokens) for r in reqs), False, "xxh3"))
    for r in reqs:  # the replay's lifecycle, keeping the cache to read its policy's switch count
        m = cache.match_prefix(r.tokens[:r.prompt_len])
        cache.lock(m.node)
        cache.insert(r.tokens, torch.cat([m.slots, cache.alloc(len(r.tokens) - m.length)]))
        cache.unlock(m.node)
    policy = cache.tree.policy
    assert isinstance(policy, Adaptive)
    hit = replay(reqs, cap, "adaptive", page).hit_rate
    assert out[0].startswith(f"{cell}: {len(reqs)} requests, capacity {cap}, adaptive {hit:.4f} ("), out
    assert out[1].startswith("  first eviction at request ") and out[1].endswith("follows lru"), out
    assert sum("-> lfu" in line or "-> lru" in line for line in out[2:]) == policy.switches, out


@pytest.mark.parametrize("page_size", [3, 16])
def test_a_shadow_copy_keeps_matching_the_real_cache(page_size: int) -> None:
    """A shadow copied from the real cache mid-trace (its keys the real tree's key objects themselves) matches,
    request for request from then on, what the real cache under the same policy matches; its keys hold the
    tokens' bytes, 4 a token."""
    reqs = SESSIONS["agent"]
    cache = RadixCache(sim_config(_capacity(reqs, 0.25, page_size), page_size, "lru", 4096))
    for r in reqs[:len(reqs) // 2]:
        _serve(cache, r)
    shadow = cache.tree.shadow_copy(make_policy("lru"))
    assert isinstance(shadow, ShadowTree) and shadow.used == cache.tree.evictable_size
    leaves = [n for n in map(shadow._entry, shadow._heap) if n is not None]
    assert leaves and {id(n.key) for n in leaves} <= {id(n.key) for n in cache.tree.nodes()}
    (ns,) = cache.tree.roots  # the default namespace's key
    for r in reqs[len(reqs) // 2:]:
        want = shadow.match(ns, r.tokens[:r.prompt_len].tobytes())
        assert _serve(cache, r) == want
        shadow.insert(ns, r.tokens.tobytes(), cache.tree.evictable_size + cache.tree.protected_size)
    nodes = list(shadow.roots[ns].children.values())
    for node in nodes:
        nodes.extend(node.children.values())
    assert all(len(n.key) == 4 * n.size for n in nodes) and sum(n.size for n in nodes) == shadow.used


def test_policy_switches_lfu_from_is_lru_then_lfu() -> None:
    """bench/policy_switches.py --lfu-from R: LRU until request R, then LFU, and no other decision. Past
    the trace's end it never switches, so it hits exactly what LRU hits; within it, one forced switch."""
    import os
    import subprocess
    import sys

    from scripts import ROOT

    cell = "seed:2013@0.1"
    env = {**os.environ, "RADIXKV_PURE_PYTHON": "1", "PYTHONPATH": str(ROOT)}

    def run(r: int) -> list[str]:
        return subprocess.run([sys.executable, str(ROOT / "bench" / "policy_switches.py"), cell, "--lfu-from", str(r)],
                              capture_output=True, text=True, check=True, env=env, cwd=ROOT).stdout.splitlines()

    never = run(10**9)
    lru = never[0].split("(lru ")[1].split(",")[0]
    assert f"adaptive {lru} (" in never[0] and not any("->" in line for line in never), never
    once = run(60)
    assert [line.strip() for line in once if "->" in line] == ["request 60: -> lfu (forced)"], once


@pytest.mark.parametrize("page_size", [1, 16])
def test_ghost_counts_give_a_reinserted_prefix_its_uses_back_within_its_extent(page_size: int) -> None:
    """eviction/ghosts.py: an evicted edge leaves its uses, keyed by where it started; while the LFU
    expert is active, an edge re-inserted there that ends within the old edge is ordered by its
    hit_count plus those uses, one that runs past it (prefix + a new suffix in one leaf) is not; inactive,
    the key is plain LFU's."""
    ps = page_size
    prefix = torch.arange(1000, 1000 + 8 * ps, dtype=torch.int32)
    cache = RadixCache(sim_config(16 * ps, ps, "adaptive", 16 * ps))
    policy = cache.tree.policy
    assert isinstance(policy, Adaptive)
    for _ in range(4):  # four uses of the prefix
        _serve(cache, Request(prefix, len(prefix)))
    _serve(cache, Request(torch.arange(5000, 5000 + 16 * ps, dtype=torch.int32), 0))  # evicts it whole
    assert cache.match_prefix(prefix).length == 0
    ghosts = policy._ghosts
    assert ghosts.ghosts and max(g >> 40 for g in ghosts.ghosts.values()) >= 4
    longer = torch.cat([prefix, torch.arange(9000, 9000 + 2 * ps, dtype=torch.int32)])
    _serve(cache, Request(longer, 0))  # the prefix back, with a suffix, in one leaf
    leaf = cache.match_prefix(longer).node
    assert leaf.end == len(longer) and leaf.depth == 0
    ghosts.active = True
    assert ghosts.key(leaf) == (leaf.hit_count, leaf.last_access, leaf.id)  # past the old edge's end
    cache.match_prefix(torch.cat([prefix, torch.arange(7000, 7000 + ps, dtype=torch.int32)]))  # splits at the prefix
    upper = cache.match_prefix(prefix).node
    assert upper.end == len(prefix) and upper.depth == 0
    uses = max(g >> 40 for g in ghosts.ghosts.values() if g & ((1 << 40) - 1) == len(prefix))
    assert uses >= 4
    assert ghosts.key(upper) == (upper.hit_count + uses, upper.last_access, upper.id)
    ghosts.active = False
    assert ghosts.key(upper) == (upper.hit_count, upper.last_access, upper.id)
    assert len(ghosts.ghosts) <= ghosts.GHOSTS


@pytest.mark.parametrize("policy", ["lru", "lfu"])
def test_a_shadows_int_keys_order_as_the_policys_tuples(policy: str) -> None:
    """Under LRU and LFU a shadow keys its heap by one int packing the policy's key tuple; it matches a
    shadow keyed by the tuples themselves (a subclass: same key, no int path) request for request, and
    still does after its clock passes 2**SMALL_BITS (wider fields) or 2**ID_BITS (it falls back to the tuples
    there) mid-trace."""
    from radixkv.eviction.policies import EvictionPolicy
    from radixkv.radix import shadow_heap as shadow_module

    expert = make_policy(policy)
    tupled = type("Tupled", (EvictionPolicy,), {"key": lambda self, node: expert.key(node),  # the same key,
                                                 "insert_is_use": expert.insert_is_use})()  # not LRU or LFU
    reqs = SHARED["tot"] + SESSIONS["chat"]
    cap = _capacity(reqs, 0.1, 4)
    fast, slow, late = ShadowTree(expert, 4), ShadowTree(tupled, 4), ShadowTree(expert, 4)
    assert fast._kind != shadow_module.TUPLE_KEY and slow._kind == shadow_module.TUPLE_KEY
    late.tick = late._next_id = (1 << shadow_module.ID_BITS) - len(reqs)  # an offset keeps every order
    wide = ShadowTree(expert, 4)
    wide.tick = wide._next_id = (1 << shadow_module.SMALL_BITS) - len(reqs)
    for r in reqs:
        prompt, full = r.tokens[:r.prompt_len // 4 * 4].tobytes(), r.tokens[:len(r.tokens) // 4 * 4].tobytes()
        got = {s.match(b"", prompt) for s in (fast, slow, late, wide)}
        assert len(got) == 1
        for s in (fast, slow, late, wide):
            s.insert(b"", full, cap)
        assert fast.used == slow.used == late.used == wide.used
    assert late._kind == shadow_module.TUPLE_KEY and fast._kind != shadow_module.TUPLE_KEY
    assert fast._bits == shadow_module.SMALL_BITS and wide._bits == shadow_module.ID_BITS and wide._kind == fast._kind



def test_the_plain_lfu_twin_keeps_ghost_counts_on_only_while_they_pay() -> None:
    """After a switch to LFU the policy copies the real cache into a plain-LFU shadow (the twin) and adds
    up what the twin matched more than the real cache (ghost LFU). Past the first turnover the ghosts
    stay on while they lead the twin (GHOST_KEEP), and go off (with a re-key) once they do not; the
    twin lives only while ghosts are on in LFU. Two caches on the same trace, the twin's lead set at the
    switch so that one's ghosts pay and the other's do not: they part exactly at the turnover."""
    reqs = SHARED["gsp"]
    caches = [RadixCache(sim_config(_capacity(reqs, 0.25), 1, "adaptive", 4096)) for _ in range(2)]
    policies = [c.tree.policy for c in caches]
    assert all(isinstance(p, Adaptive) for p in policies)
    switched = turned = None
    at_turn = off = 0  # its switches at the turnover; requests after it (until its next switch) checked off
    for i, r in enumerate(reqs):
        before = [(p.mode, 1 in p._shadows) for p in policies]  # type: ignore[union-attr]
        for cache in caches:
            _serve(cache, r)
            cache.check_invariants()  # keys re-keyed after the ghosts go off
        for (mode, warm), policy, sign in zip(before, policies, (-1, 1)):
            assert isinstance(policy, Adaptive)
            assert policy._twin is None or (policy.mode == 1 and policy._ghosts.active)
            if policy.mode == 1 and mode == 0 and switched is None:
                assert policy._twin is not None and policy._ghosts.active
                policy._twin_lead = sign * 10**12  # the first cache's ghosts lead, the second's trail
            if warm and 1 not in policy._shadows and policy.mode == 1:  # the first turnover just ended
                assert policy._ghosts.active == (sign < 0) and (policy._twin is not None) == (sign < 0)
                turned, at_turn = i, policy.switches
            elif sign > 0 and turned is not None and policy.switches == at_turn:  # plain LFU from then on
                assert not policy._ghosts.active and policy._twin is None
                off += 1
        if switched is None and policies[0].mode == 1:
            switched = i
    assert switched is not None and turned is not None and turned > switched and off > 0
    kept = policies[0]
    assert kept.mode == 1 and kept._ghosts.active and kept._twin is not None  # type: ignore[union-attr]
