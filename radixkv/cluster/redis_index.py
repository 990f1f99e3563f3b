"""RedisIndex: the KVIndex on a Redis server, shared by every router and instance of a fleet.

Keys (`p` = key_prefix, hashes in hex, `m` = medium "GPU" or "CPU"):

    p + "b:" + hash       SET of "m:instance"   who holds the block (the only key a lookup reads)
    p + "i:" + instance   SET of "m:hash"       what the instance holds (to clear it in one call)
    p + "k:" + instance   "1"                   the index holds state for this instance

So a cached block costs one key however many instances hold it, plus one member per holder in
that key and one in the holder's own set. Writes: one `ingest` batch is one EVALSHA of a Lua script
that applies every event in order (one round trip, atomic: a resync, clear + stores, is never seen
half done), unless the batch holds more than `max_hashes_per_call` hashes: then it is cut into
several calls, each atomic, so one huge resync cannot stall the server for every router. Reads: `holders`/`lookup` are one EVALSHA that reads every block key and returns one
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

from radixkv.cluster.index import (INSTANCE_ID_CHARS, IndexStats, IndexUnavailableError, check_hashes,
                                   check_instance_id, longest_prefix, parse_batch)
from radixkv.errors import ConfigError
from radixkv.events import MEDIA, AllBlocksCleared, BlockStored, KVEvent

# ARGV = key prefix, instance id, ttl seconds (0: none), then ops, each `kind medium count hash...`
# with kind S (stored), R (removed), C (all cleared: count 0) or D (dropped: cleared, and the marker
# deleted in the same call, so no reader sees one without the other). Applies the batch atomically and
# returns whether the instance's marker existed before it.
_INGEST_LUA = """
local p, inst, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local own, marker = p .. 'i:' .. inst, p .. 'k:' .. inst
local function own_key(key)  -- a value of another type at one of our keys (WRONGTYPE) is dropped
  local t = redis.call('TYPE', key).ok
  if t ~= 'set' and t ~= 'none' then redis.call('DEL', key) end
end
local known, dropped = redis.call('EXISTS', marker), false
own_key(own)
local i = 4
while i <= #ARGV do
  local kind, medium, n = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  i = i + 3
  if kind == 'C' or kind == 'D' then
    dropped = dropped or kind == 'D'
    for _, m in ipairs(redis.call('SMEMBERS', own)) do
      local md, h = string.match(m, '^([^:]+):(.+)$')
      if md then redis.call('SREM', p .. 'b:' .. h, md .. ':' .. inst) end  -- a malformed member: skipped
    end
    redis.call('DEL', own)
  else
    local member = medium .. ':' .. inst
    for j = i, i + n - 1 do
      local key = p .. 'b:' .. ARGV[j]
      if kind == 'S' then
        own_key(key)
        redis.call('SADD', key, member)
        redis.call('SADD', own, medium .. ':' .. ARGV[j])
        if ttl > 0 then redis.call('EXPIRE', key, ttl) end
      elseif redis.call('TYPE', key).ok == 'set' then
        redis.call('SREM', key, member)
        redis.call('SREM', own, medium .. ':' .. ARGV[j])
      end
    end
    i = i + n
  end
end
if dropped then  -- drop_instance: the marker goes with the blocks, in the same call
  redis.call('DEL', marker)
  return known
end
redis.call('SET', marker, 1)
if ttl > 0 then
  redis.call('EXPIRE', marker, ttl)
  redis.call('EXPIRE', own, ttl)
end
return known
"""

# KEYS = block keys. Returns one string: per block, its members joined by ',', blocks joined by
# newlines (one small reply instead of one array per block: parsing is most of a lookup's cost).
_HOLDERS_LUA = """
local out = {}
for i, k in ipairs(KEYS) do  -- a key of another type (WRONGTYPE) reads as empty
  out[i] = redis.call('TYPE', k).ok == 'set' and table.concat(redis.call('SMEMBERS', k), ',') or ''
end
return table.concat(out, '\\n')
"""

# ARGV = key prefix, instance id, ttl seconds. Gives every key the instance holds its TTL again, so
# blocks it still holds never expire while it keeps publishing (one call, no payload).
_REFRESH_LUA = """
local p, inst, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local own, marker = p .. 'i:' .. inst, p .. 'k:' .. inst
if redis.call('TYPE', own).ok ~= 'set' then return 0 end
local n = 0
for _, m in ipairs(redis.call('SMEMBERS', own)) do
  local h = string.match(m, '^[^:]+:(.+)$')
  if h then n = n + redis.call('EXPIRE', p .. 'b:' .. h, ttl) end
end
redis.call('EXPIRE', own, ttl)
redis.call('EXPIRE', marker, ttl)
return n
"""

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
        if isinstance(socket_timeout_s, bool) or not isinstance(socket_timeout_s, (int, float)) or not 0 < socket_timeout_s <= 3600:
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
        self._ingest = self.client.register_script(_INGEST_LUA)
        self._holders = self.client.register_script(_HOLDERS_LUA)

        self._refresh = self.client.register_script(_REFRESH_LUA)

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
            kind, hashes = ("S" if isinstance(ev, BlockStored) else "R"), ev.block_hashes
            while hashes:
                if room == 0:
                    calls.append([])
                    room = self.max_hashes_per_call
                part, hashes = hashes[:room], hashes[room:]
                calls[-1] += [kind, ev.medium, len(part), *(f"{h:x}" for h in part)]
                room -= len(part)
        return calls

    def holders(self, block_hashes: Sequence[int]) -> list[frozenset[str]]:
        """Instances holding each block (any medium), in order; one round trip. Does not mutate."""
        if not check_hashes(block_hashes):
            return []
        reply = self._call(self._holders, [self._block_key(h) for h in block_hashes], [])
        text = reply if isinstance(reply, str) else bytes(reply).decode("utf-8", "replace")
        lines = text.split("\n")
        if len(lines) != len(block_hashes):  # not this script's reply: read as no holders
            self._stats.malformed_members += 1
            return [_EMPTY] * len(block_hashes)
        return [self._members(line) if line else _EMPTY for line in lines]

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
        """{instance: longest consecutive hit in blocks from block 0}; one round trip."""
        return longest_prefix(self.holders(block_hashes))

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
