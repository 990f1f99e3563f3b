"""Router: send each request to the instance that already caches the longest part of its prompt.

Per request: hash the prompt's full blocks exactly as the engine's KV events do
(radixkv.events.BlockHasher: the same namespace, block size and `event_hash` scheme, so a Router with
event_hash="sha256_cbor" routes vLLM engines that run `--prefix-caching-hash-algo sha256_cbor` with
the same PYTHONHASHSEED), ask the index which
instances hold each block (one lookup), score every registered instance with one of llm-d's
kv-cache-manager scorers, and pick the best score; ties go to the instance with the fewest open
requests, then to the one registered first. When no instance scores above 0, or the index cannot be
reached, the request goes to the least-loaded instance. With `load_slack`, instances more than that
many open requests above the least-loaded one are scored 0 (SGLang's router and llm-d's scheduler
likewise let load override cache affinity; without it, one popular prefix takes all its traffic to
the instance that cached it first).

Scorers (scores are in blocks; `holders[b]` = instances holding block b of the prompt):

    longest_prefix     blocks held consecutively from block 0 (the default; what a prefix cache reuses)
    highest_block_hit  1 + index of the last block held, whatever lies before it
    coverage           how many of the prompt's blocks are held, anywhere

Hybrid models (cluster/groups.py): an instance's score never exceeds the prefix where every one of
its KV-cache groups can resume (a sliding-window group needs the window before that point, a state
group a snapshot at it), so a window whose blocks were removed is never predicted as a hit.

Load is what instances report (`report_load`: their open requests); the router also counts each
request it routes as one more open request on its instance until the next report, so a burst between
reports spreads out. An index outage is logged once (warning) and its end once (info).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from radixkv.cluster.index import IndexUnavailableError, KVIndex, check_instance_id, longest_prefix
from radixkv.cluster.loop_metrics import Loop
from radixkv.errors import ConfigError, InvalidArgumentError
from radixkv.events import BlockHasher
from radixkv.keys import ExtraKeys
from radixkv.tokens import TokensLike, as_tokens

log = logging.getLogger(__name__)

Scorer = Callable[[Sequence[frozenset[str]]], dict[str, int]]


def highest_block_hit(holders: Sequence[frozenset[str]]) -> dict[str, int]:
    """{instance: 1 + index of the last block it holds}."""
    out: dict[str, int] = {}
    for b, held in enumerate(holders):
        for inst in held:
            out[inst] = b + 1
    return out


def coverage(holders: Sequence[frozenset[str]]) -> dict[str, int]:
    """{instance: number of the blocks it holds}."""
    out: dict[str, int] = {}
    for held in holders:
        for inst in held:
            out[inst] = out.get(inst, 0) + 1
    return out


SCORERS: dict[str, Scorer] = {
    "longest_prefix": longest_prefix, "highest_block_hit": highest_block_hit, "coverage": coverage,
}


@dataclass(frozen=True)
class RouteDecision:
    instance: str
    score: int  # the chosen instance's score in blocks; 0 when routed by load alone
    by_load: bool  # True when nothing matched or the index was unreachable
    request_id: int = 0  # pass to report_hit() with what the instance matched (closes the loop)
    predicted_tokens: int = 0  # prompt tokens predicted cached on `instance` (longest_prefix: score * block_size)


@dataclass
class RouterStats:
    routed: int = 0
    by_load: int = 0  # of which routed by load alone
    index_errors: int = 0  # lookups that found the index unreachable
    load_guarded: int = 0  # requests where load_slack passed over the best-scoring instance


class Router:
    """KV-cache-aware routing over a KVIndex. Not thread-safe; one per routing process."""

    def __init__(self, index: KVIndex, *, block_size: int = 16, scorer: str = "longest_prefix",
                 load_slack: int | None = None, event_hash: str = "xxh3") -> None:
        """Args:
            index: where instances publish their KV events (InMemoryIndex or RedisIndex).
            block_size: tokens per block; must equal the instances' `event_block_size`.
            scorer: a name in SCORERS.
            load_slack: None (default): load only breaks ties. An int: an instance with more than
                `least open requests + load_slack` open requests gets no credit for its cache, so a
                prefix shared by most traffic spills to more instances instead of piling onto one.
            event_hash: how the instances name blocks; must equal their `CacheConfig.event_hash`
                ("xxh3", or vLLM's "sha256_cbor" / "xxhash_cbor" for engines of either kind).
        Raises ConfigError for any argument out of range.
        """
        if load_slack is not None and (isinstance(load_slack, bool) or not isinstance(load_slack, int)
                                       or load_slack < 0):
            raise ConfigError(f"Router load_slack must be None or an int >= 0, got {load_slack!r:.60}")
        self.load_slack = load_slack
        if not isinstance(scorer, str) or scorer not in SCORERS:
            raise ConfigError(f"Router: unknown scorer {scorer!r:.60}; choose from {sorted(SCORERS)}")
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ConfigError(f"Router block_size must be a positive int, got {block_size!r:.60}")
        for name in ("holders", "ingest"):
            if not callable(getattr(index, name, None)):
                raise ConfigError("Router index must be a KVIndex (InMemoryIndex, RedisIndex), "
                                  f"got {type(index).__name__}")
        self.hasher = BlockHasher(event_hash)
        self.index, self.block_size, self.scorer = index, block_size, scorer
        self._score = SCORERS[scorer]
        self._load: dict[str, int] = {}  # instance -> open requests; insertion order breaks last ties
        self.index_available = True
        self.stats = RouterStats()
        self.loop = Loop()
        self._next_request = 0

    @property
    def instances(self) -> list[str]:
        return list(self._load)

    def report_load(self, instance_id: str, open_requests: int) -> None:
        """Register an instance, or update its number of open requests. Mutates."""
        check_instance_id(instance_id)
        if isinstance(open_requests, bool) or not isinstance(open_requests, int) or open_requests < 0:
            raise InvalidArgumentError(f"open_requests must be an int >= 0, got {open_requests!r:.60}")
        self._load[instance_id] = open_requests

    def remove_instance(self, instance_id: str) -> None:
        """Stop routing to an instance (its index entries stay until it is dropped there)."""
        check_instance_id(instance_id)
        self._load.pop(instance_id, None)

    def route(self, tokens: TokensLike, namespace: Hashable = None, extra_keys: ExtraKeys | dict | None = None
              ) -> RouteDecision:
        """Pick an instance for a prompt (tokens as the engine takes them: InvalidTokensError otherwise;
        `namespace` and `extra_keys` as the engine's open() gets them, so the block hashes are the
        same) and count one more open request on it. InvalidArgumentError when no instance is
        registered; never raises for an index outage (routes by load instead)."""
        if not self._load:
            raise InvalidArgumentError("no instances registered; call report_load(instance_id, open_requests) first")
        tokens = as_tokens(tokens)
        prefix: dict[str, int] = {}
        hasher = self.hasher
        scores = self._scores(hasher.ints(hasher.request(tokens, namespace, self.block_size, extra_keys)), prefix)
        if self.load_slack is not None and scores:
            ceiling = min(self._load.values()) + self.load_slack
            kept = {i: s for i, s in scores.items() if self._load[i] <= ceiling}
            self.stats.load_guarded += max(scores.values()) > max(kept.values(), default=0)
            scores = kept
        best = max(scores.values(), default=0)
        # the best score, then the fewest open requests, then the earliest registered (dict order)
        pick = min((i for i in self._load if scores.get(i, 0) == best), key=self._load.__getitem__)
        self._load[pick] += 1
        self.stats.routed += 1
        self.stats.by_load += best == 0
        n = len(tokens)
        held = prefix.get(pick, 0) * self.block_size  # consecutive blocks from the start, whatever the scorer
        self._next_request += 1
        self.loop.predict(self._next_request, pick, min(held, n), n)
        return RouteDecision(pick, best, best == 0, self._next_request, min(held, n))

    def report_hit(self, decision: RouteDecision | int, matched_tokens: int) -> bool:
        """The instance's answer for a routed request: the prompt tokens its cache actually matched
        (e.g. `seq.cached_len` after open). Updates the loop metrics (cluster/loop_metrics.py);
        False for an unknown or already reported request. Mutates."""
        rid = decision.request_id if isinstance(decision, RouteDecision) else decision
        if type(rid) is not int or type(matched_tokens) is not int:
            raise InvalidArgumentError(f"report_hit takes a RouteDecision (or its request_id) and an int, "
                                       f"got {decision!r:.60}, {matched_tokens!r:.30}")
        return self.loop.report(rid, matched_tokens)

    def prometheus(self, model_name: str = "") -> str:
        """The loop metrics in Prometheus text (HELP, TYPE, labels model_name and instance)."""
        if not isinstance(model_name, str):
            raise InvalidArgumentError(f"model_name must be a str, got {model_name!r:.60}")
        return self.loop.prometheus(model_name)

    def _scores(self, hashes: list[int], prefix: dict[str, int]) -> dict[str, int]:
        if not hashes:
            return {}
        try:
            holders = self.index.holders(hashes)
            full = longest_prefix(holders)
            capped = self.index.resumable(hashes, full)  # hybrid instances: where every group resumes
        except IndexUnavailableError as e:
            self.stats.index_errors += 1
            if self.index_available:
                log.warning("KV index unavailable, routing by load until it is back: %s", e)
                self.index_available = False
            return {}
        if not self.index_available:
            log.info("KV index reachable again; routing by prefix")
            self.index_available = True
        prefix.update(capped)
        scores = {i: s for i, s in self._score(holders).items() if i in self._load}
        for i, k in capped.items():
            if k < full[i] and i in scores:
                scores[i] = min(scores[i], k)
        return scores
