"""RedisIndex: the KVIndex on a Redis server, shared by every router and instance of a fleet.

Keys (`p` = key_prefix, hashes in hex, `m` = medium "GPU" or "CPU"):

    p + "b:" + hash       SET of "m:instance"   who holds the block (the only key a lookup reads)
    p + "i:" + instance   SET of "m:hash"       what the instance holds (to clear it in one call)
    p + "k:" + instance   "1"                   the index holds state for this instance

So a cached block costs one key however many instances hold it, plus one member per holder in
that key and one in the holder's own set. Writes: one `ingest` batch is one MULTI/EXEC pipeline (one
round trip); AllBlocksCleared runs a Lua script inside it, so a resync (clear + stores) is atomic.
Reads: `holders`/`lookup` send one pipeline of SMEMBERS, one round trip per lookup. With
`ttl_s`, every key written is (re)given that TTL, so the entries of an instance that died without
clearing age out; a block cached and not re-stored for longer than `ttl_s` is forgotten too, and
the instance is told to resync when its marker has expired (`ingest` returns False).

Failures: a refused, reset or timed-out connection raises IndexUnavailableError (nothing applied
for an ingest, since the batch is one transaction). The client never retries on its own, so an
outage costs one connect attempt per call, bounded by `socket_timeout_s`. Batch validation and the
`stats()` counters (this client's view) are as in index.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from radixkv.cluster.index import IndexStats, IndexUnavailableError, check_instance_id, longest_prefix, parse_batch
from radixkv.events import AllBlocksCleared, BlockStored, KVEvent

# KEYS[1] = the instance's own set; ARGV = key prefix, instance id. Removes the instance from every
# block key it is in, then its own set; returns how many (block, medium) entries it dropped.
_CLEAR_LUA = """
local members = redis.call('SMEMBERS', KEYS[1])
for _, m in ipairs(members) do
  local medium, h = string.match(m, '^([^:]+):(.+)$')
  redis.call('SREM', ARGV[1] .. 'b:' .. h, medium .. ':' .. ARGV[2])
end
redis.call('DEL', KEYS[1])
return #members
"""

_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


class RedisIndex:
    """A KVIndex stored on Redis (see the module docstring for the key layout and costs)."""

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", *, key_prefix: str = "radixkv:",
                 ttl_s: int | None = None, socket_timeout_s: float = 1.0,
                 client: redis.Redis | None = None) -> None:
        """Args:
            url: redis:// or unix:// URL of the server (ignored when `client` is given).
            key_prefix: prepended to every key, so several fleets can share one server.
            ttl_s: seconds each written key lives unless written again; None keeps keys forever.
            socket_timeout_s: connect and read timeout; bounds how long a call waits in an outage.
            client: a ready redis.Redis to use instead of connecting to `url`.
        """
        if ttl_s is not None and (isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s < 1):
            raise ValueError(f"ttl_s must be a positive int of seconds or None, got {ttl_s!r}")
        self.key_prefix, self.ttl_s = key_prefix, ttl_s
        self.client = client or redis.Redis.from_url(
            url, socket_timeout=socket_timeout_s, socket_connect_timeout=socket_timeout_s,
            retry=Retry(NoBackoff(), 0))
        self._stats = IndexStats()

    def _block_key(self, h: int) -> str:
        return f"{self.key_prefix}b:{h:x}"

    def ingest(self, instance_id: str, events: Iterable[KVEvent | dict]) -> bool:
        """Apply one batch from `instance_id` in one transaction; return whether the index held state
        for this instance before (False: resync it). IndexUnavailableError if the server is down."""
        check_instance_id(instance_id)
        batch = parse_batch(instance_id, events, self._stats)
        p, ttl = self.key_prefix, self.ttl_s
        own, marker = f"{p}i:{instance_id}", f"{p}k:{instance_id}"
        pipe = self.client.pipeline(transaction=True)
        pipe.exists(marker)
        for ev in batch:
            if isinstance(ev, AllBlocksCleared):
                pipe.eval(_CLEAR_LUA, 1, own, p, instance_id)
                continue
            member = f"{ev.medium}:{instance_id}"
            mine = [f"{ev.medium}:{h:x}" for h in ev.block_hashes]
            if not mine:
                continue
            for h in ev.block_hashes:
                key = self._block_key(h)
                if isinstance(ev, BlockStored):
                    pipe.sadd(key, member)
                    if ttl:
                        pipe.expire(key, ttl)
                else:
                    pipe.srem(key, member)
            (pipe.sadd if isinstance(ev, BlockStored) else pipe.srem)(own, *mine)
        pipe.set(marker, 1, ex=ttl)
        if ttl:
            pipe.expire(own, ttl)
        try:
            replies = pipe.execute()
        except _DOWN as e:
            raise IndexUnavailableError(f"KV index at {self._where()} unreachable: {e}") from e
        self._stats.applied += len(batch)
        return bool(replies[0])

    def holders(self, block_hashes: Sequence[int]) -> list[frozenset[str]]:
        """Instances holding each block (any medium), in order; one round trip. Does not mutate."""
        if not block_hashes:
            return []
        pipe = self.client.pipeline(transaction=False)
        for h in block_hashes:
            pipe.smembers(self._block_key(h))
        try:
            replies = pipe.execute()
        except _DOWN as e:
            raise IndexUnavailableError(f"KV index at {self._where()} unreachable: {e}") from e
        return [frozenset(m.split(b":", 1)[1].decode() for m in members) for members in replies]

    def lookup(self, block_hashes: Sequence[int]) -> dict[str, int]:
        """{instance: longest consecutive hit in blocks from block 0}; one round trip."""
        return longest_prefix(self.holders(block_hashes))

    def drop_instance(self, instance_id: str) -> None:
        """Forget everything about an instance (it left the fleet); one round trip."""
        check_instance_id(instance_id)
        p = self.key_prefix
        pipe = self.client.pipeline(transaction=True)
        pipe.eval(_CLEAR_LUA, 1, f"{p}i:{instance_id}", p, instance_id)
        pipe.delete(f"{p}k:{instance_id}")
        try:
            pipe.execute()
        except _DOWN as e:
            raise IndexUnavailableError(f"KV index at {self._where()} unreachable: {e}") from e

    def stats(self) -> IndexStats:
        return IndexStats(self._stats.applied, self._stats.rejected, self._stats.rejected_batches)

    def _where(self) -> str:
        kw = self.client.connection_pool.connection_kwargs
        return kw.get("path") or f"{kw.get('host')}:{kw.get('port')}"
