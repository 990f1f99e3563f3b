"""RedisIndex: the KVIndex on a Redis server, shared by every router and instance of a fleet.

Keys (`p` = key_prefix, hashes in hex, `m` = medium "GPU" or "CPU"):

    p + "b:" + hash       SET of "m:instance"   who holds the block (the only key a lookup reads)
    p + "i:" + instance   SET of "m:hash"       what the instance holds (to clear it in one call)
    p + "k:" + instance   "1"                   the index holds state for this instance
    p + "g:" + instance   HASH group -> spec    a hybrid model's groups >= 1 (cluster/groups.py)

A hybrid model's blocks of group g >= 1 live under p + "b:" + hash + "/" + g (and "m:hash/g" in the
instance's set), so they never touch group 0's keys; `resumable` reads them for the instances that
have groups (one more round trip for the specs, one for the group keys, only when a lookup found
candidates).

So a cached block costs one key however many instances hold it, plus one member per holder in
that key and one in the holder's own set. Writes: one `ingest` batch is one EVALSHA of a Lua script
that applies every event in order (one round trip, atomic: a resync, clear + stores, is never seen
half done), unless the batch holds more than `max_hashes_per_call` hashes: then it is cut into
several calls, each atomic, so one huge resync cannot stall the server for every router.
Reads: `holders`/`lookup` are one EVALSHA that reads every block key and returns one
string, one round trip per lookup. (A MULTI pipeline of SADD/SMEMBERS does the same in one round
trip too, but redis-py spends ~25 µs of Python per queued command; the scripts make a 136-block
lookup about 1 command.) After a server restart the first call of each script also loads it. Keys
are computed inside the scripts, so this targets one Redis server (or a primary with replicas), not
Redis Cluster. With `ttl_s`, every key written is (re)given that TTL, so the entries of an instance
that died without clearing age out; a block cached and not re-stored for longer than `ttl_s` is
forgotten too, and the instance is told to resync when its marker has expired (`ingest` returns False).

Failures: a refused, reset or timed-out connection, and a call the server refuses (OOM under
`maxmemory`, READONLY on a replica after a failover, LOADING), raise IndexUnavailableError (nothing
applied for an ingest of one script call: Redis refuses a script's first write). A value of another
type at one of the index's keys (WRONGTYPE) reads as an empty block and is replaced on the next
write, so neither `route` nor `ingest` fails on it. The client never retries on its own, so an
outage costs one connect attempt per call, bounded by `socket_timeout_s`. Batch validation and the
`stats()` counters (this client's view) are as in index.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.commands.core import Script
from redis.retry import Retry

from radixkv.cluster.groups import GroupSpec, group_of, parse_spec, resume_point, spec_of, spec_text
from radixkv.cluster.index import (INSTANCE_ID_CHARS, IndexStats, IndexUnavailableError, check_hashes,
                                   check_instance_id, longest_prefix, parse_batch)
from radixkv.cluster.redis_scripts import HOLDERS_LUA, INGEST_LUA, REFRESH_LUA
from radixkv.errors import ConfigError
from radixkv.events import MEDIA, AllBlocksCleared, BlockStored, KVEvent

_EMPTY: frozenset[str] = frozenset()

_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


class RedisIndex:
    """A KVIndex stored on Redis (see the module docstring for the key layout and costs)."""

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", *, key_prefix: str = "radixkv:",
                 ttl_s: int | None = None, socket_timeout_s: float = 1.0,
                 max_hashes_per_call: int = 8192, client: redis.Redis | None = None) -> None:
        """Args:
            url: redis:// or unix:// URL of the server (ignored when `client` is given).
            key_prefix: prepended to every key, so several fleets can share one server.
            ttl_s: seconds each written key lives unless written again; None keeps keys forever.
            socket_timeout_s: connect and read timeout; bounds how long a call waits in an outage.
            max_hashes_per_call: a batch with more block hashes is sent in several script calls, so
                a big resync never holds the server for long (8,192 hashes took ~35 ms of server
                time on our 2-core VM; 100,000 in one call took ~1 s, blocking every router).
            client: a ready redis.Redis to use instead of connecting to `url`.
        """
        if ttl_s is not None and (isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s < 1):
            raise ConfigError(f"RedisIndex ttl_s must be a positive int of seconds or None, got {ttl_s!r:.60}")
        if isinstance(max_hashes_per_call, bool) or not isinstance(max_hashes_per_call, int) or max_hashes_per_call < 1:
            raise ConfigError(f"RedisIndex max_hashes_per_call must be a positive int, got {max_hashes_per_call!r:.60}")
        if not isinstance(key_prefix, str):
            raise ConfigError(f"RedisIndex key_prefix must be a str, got {key_prefix!r:.60}")
        if (isinstance(socket_timeout_s, bool) or not isinstance(socket_timeout_s, (int, float))
                or not 0 < socket_timeout_s <= 3600):
            raise ConfigError(f"RedisIndex socket_timeout_s must be in (0, 3600] seconds, got {socket_timeout_s!r:.60}")
        if client is None and (not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://"))):
            raise ConfigError(f"RedisIndex url must be a redis://, rediss:// or unix:// URL, got {url!r:.60}")
        self.key_prefix, self.ttl_s, self.max_hashes_per_call = key_prefix, ttl_s, max_hashes_per_call
        try:
            self.client = client or redis.Redis.from_url(
                url, socket_timeout=socket_timeout_s, socket_connect_timeout=socket_timeout_s,
                retry=Retry(NoBackoff(), 0))
        except ValueError as e:  # redis-py's URL parser
            raise ConfigError(f"RedisIndex url {url!r:.60}: {e}") from None
        self._stats = IndexStats()
        self._ingest = self.client.register_script(INGEST_LUA)
        self._holders = self.client.register_script(HOLDERS_LUA)

        self._refresh = self.client.register_script(REFRESH_LUA)
        self._hybrid: tuple[tuple[int, ...], set[str]] = ((), set())  # the last holders(): its hashes, hybrid holders

    def _block_key(self, h: int) -> str:
        return f"{self.key_prefix}b:{h:x}"

    def ingest(self, instance_id: str, events: Iterable[KVEvent | dict]) -> bool:
        """Apply one batch from `instance_id` in order, in one round trip per `max_hashes_per_call`
        hashes, each call atomic; return whether the index held state for this instance before (False:
        resync it). IndexUnavailableError if unreachable (a multi-call batch may then be partly
        applied; the publisher's resync starts with AllBlocksCleared, which repairs that)."""
        check_instance_id(instance_id)
        batch = parse_batch(instance_id, events, self._stats)
        known = None
        for ops in self._chunks(batch):
            reply = self._call(self._ingest, [], [self.key_prefix, instance_id, self.ttl_s or 0, *ops])
            known = bool(reply) if known is None else known
        self._stats.applied += len(batch)
        return bool(known)

    def _chunks(self, batch: list[KVEvent]) -> list[list[str | int]]:
        """The script's op list, cut so that no call carries more than max_hashes_per_call hashes."""
        calls: list[list[str | int]] = [[]]
        room = self.max_hashes_per_call
        for ev in batch:
            if isinstance(ev, AllBlocksCleared):
                calls[-1] += ["C", "", 0]
                continue
            kind, hashes, g = ("S" if isinstance(ev, BlockStored) else "R"), ev.block_hashes, group_of(ev)
            if g and isinstance(ev, BlockStored):
                calls[-1] += ["G", str(g), 1, spec_text(spec_of(ev))]
            while hashes:
                if room == 0:
                    calls.append([])
                    room = self.max_hashes_per_call
                part, hashes = hashes[:room], hashes[room:]
                calls[-1] += [kind, ev.medium, len(part), *(f"{h:x}/{g}" if g else f"{h:x}" for h in part)]
                room -= len(part)
        return calls

    def holders(self, block_hashes: Sequence[int]) -> list[frozenset[str]]:
        """Instances holding each block (any medium), in order; one round trip. Does not mutate."""
        if not check_hashes(block_hashes):
            return []
        found = self._read([self._block_key(h) for h in block_hashes], specs=True)
        self._hybrid = (tuple(block_hashes), set(found.pop().split(",")) if found else set())
        return [self._members(line) if line else _EMPTY for line in found]

    def _read(self, keys: list[str], specs: bool = False) -> list[str]:
        """One line of members per block key in `keys` (one round trip); with `specs`, one more line:
        the holders that have group specs. All empty for a reply that is not the script's."""
        reply = self._call(self._holders, keys, [self.key_prefix] if specs else [])
        text = reply if isinstance(reply, str) else bytes(reply).decode("utf-8", "replace")
        lines = text.split("\n")
        if len(lines) != len(keys) + specs:  # not this script's reply: read as no holders
            self._stats.malformed_members += 1
            return [""] * (len(keys) + specs)
        return lines

    def _members(self, line: str) -> frozenset[str]:
        """Instances of one block's "medium:instance" members; any other member is skipped and counted
        (written by something else, or by a client that allowed other ids), so no route fails on it."""
        out = set()
        for m in line.split(","):
            medium, sep, inst = m.partition(":")
            if sep and medium in MEDIA and inst and INSTANCE_ID_CHARS.issuperset(inst):
                out.add(inst)
            else:
                self._stats.malformed_members += 1
        return frozenset(out)

    def lookup(self, block_hashes: Sequence[int]) -> dict[str, int]:
        """{instance: longest consecutive hit in blocks from block 0 where every group can resume};
        one round trip, or three when an instance that has one has groups."""
        return self.resumable(block_hashes, longest_prefix(self.holders(block_hashes)))

    def resumable(self, block_hashes: Sequence[int], prefix: dict[str, int]) -> dict[str, int]:
        """`prefix` ({instance: blocks}) capped, per hybrid instance, where all its groups can resume
        (cluster/groups.py). Right after holders() of the same hashes (what lookup and the Router
        do), no round trip unless a candidate has groups; then one for their specs and one for
        their groups' block keys. Does not mutate the index."""
        check_hashes(block_hashes)
        out = dict(prefix)
        candidates = [i for i, k in prefix.items() if k > 0]
        if self._hybrid[0] == tuple(block_hashes):  # holders() just said which of them have groups
            candidates = [i for i in candidates if i in self._hybrid[1]]
        specs = self._specs(candidates)
        if not specs:
            return out
        groups = sorted({g for s in specs.values() for g in s})
        k_max = min(len(block_hashes), max(prefix[i] for i in specs))
        keys = [f"{self._block_key(block_hashes[b])}/{g}" for g in groups for b in range(k_max)]
        lines = self._read(keys)
        held = dict(zip(((g, b) for g in groups for b in range(k_max)),
                        (self._members(line) if line else _EMPTY for line in lines)))
        for inst, mine in specs.items():
            out[inst] = resume_point(min(prefix[inst], k_max), mine,
                                     lambda g, b, i=inst: i in held[(g, b)])  # type: ignore[misc]
        return out

    def _specs(self, instances: list[str]) -> dict[str, dict[int, GroupSpec]]:
        """{instance: its groups' specs} of those of `instances` that have groups."""
        if not instances:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for inst in instances:
            pipe.hgetall(f"{self.key_prefix}g:{inst}")
        try:
            replies = pipe.execute(raise_on_error=False)
        except _DOWN as e:
            raise IndexUnavailableError(f"KV index at {self._where()} unreachable: {e}") from e
        out = {}
        for inst, raw in zip(instances, replies):
            if isinstance(raw, dict) and raw:
                out[inst] = {g: s for g, s in (parse_spec(k, v) for k, v in raw.items()) if g}
        return {i: s for i, s in out.items() if s}

    def drop_instance(self, instance_id: str) -> None:
        """Forget everything about an instance (it left the fleet); one round trip, atomic: its blocks
        and its marker go together (never a marker saying "known" over cleared state)."""
        check_instance_id(instance_id)
        self._call(self._ingest, [], [self.key_prefix, instance_id, 0, "D", "", 0])

    def refresh(self, instance_id: str) -> int:
        """Give every key `instance_id` holds its full TTL again (a no-op without `ttl_s`); one round
        trip. Returns the block keys refreshed. IndexUnavailableError as for ingest."""
        check_instance_id(instance_id)
        if not self.ttl_s:
            return 0
        return int(self._call(self._refresh, [], [self.key_prefix, instance_id, self.ttl_s]))

    def _call(self, script: Script, keys: list[str], args: list[str | int]) -> Any:
        try:
            return script(keys=keys, args=args)
        except _DOWN as e:
            raise IndexUnavailableError(f"KV index at {self._where()} unreachable: {e}") from e
        except redis.exceptions.ResponseError as e:  # OOM (maxmemory), READONLY (a replica), LOADING, ...
            self._stats.server_errors += 1
            raise IndexUnavailableError(f"KV index at {self._where()} refused the call: {e}") from e

    def stats(self) -> IndexStats:
        return IndexStats(**vars(self._stats))

    def _where(self) -> str:
        kw = self.client.connection_pool.connection_kwargs
        return kw.get("path") or f"{kw.get('host')}:{kw.get('port')}"
