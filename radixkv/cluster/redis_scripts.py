"""The Lua scripts RedisIndex runs on the server (radixkv/cluster/redis_index.py has the key layout):
each applies or reads a whole batch in one call, atomically, with keys computed inside the script."""

from __future__ import annotations

# ARGV = key prefix, instance id, ttl seconds (0: none), then ops, each `kind medium count hash...`
# with kind S (stored), R (removed), C (all cleared: count 0), D (dropped: cleared, and the marker
# and group specs deleted in the same call, so no reader sees one without the other) or G (a group's
# spec: `G group 1 spec`). Applies the batch atomically and
# returns whether the instance's marker existed before it.
INGEST_LUA = """
local p, inst, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local own, marker, specs = p .. 'i:' .. inst, p .. 'k:' .. inst, p .. 'g:' .. inst
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
  if kind == 'G' then
    if redis.call('TYPE', specs).ok ~= 'hash' then redis.call('DEL', specs) end
    redis.call('HSET', specs, medium, ARGV[i])
    i = i + n
  elseif kind == 'C' or kind == 'D' then
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
  redis.call('DEL', marker, specs)
  return known
end
redis.call('SET', marker, 1)
if ttl > 0 then
  redis.call('EXPIRE', marker, ttl)
  redis.call('EXPIRE', own, ttl)
  redis.call('EXPIRE', specs, ttl)
end
return known
"""

# KEYS = block keys, ARGV = (key prefix) or (). Returns one string: per block, its members joined by
# ',', blocks joined by newlines (one small reply instead of one array per block: parsing is most of
# a lookup's cost); with a prefix, one more line: the holders that have group specs (hybrid models).
HOLDERS_LUA = """
local out, seen, hybrid, p = {}, {}, {}, ARGV[1]
for i, k in ipairs(KEYS) do  -- a key of another type (WRONGTYPE) reads as empty
  local members = redis.call('TYPE', k).ok == 'set' and redis.call('SMEMBERS', k) or {}
  out[i] = table.concat(members, ',')
  for _, m in ipairs(p and members or {}) do
    local inst = string.match(m, '^[^:]+:(.+)$')
    if inst and not seen[inst] then
      seen[inst] = true
      if redis.call('EXISTS', p .. 'g:' .. inst) == 1 then hybrid[#hybrid + 1] = inst end
    end
  end
end
if p then out[#KEYS + 1] = table.concat(hybrid, ',') end
return table.concat(out, '\\n')
"""

# ARGV = key prefix, instance id, ttl seconds. Gives every key the instance holds its TTL again, so
# blocks it still holds never expire while it keeps publishing (one call, no payload).
REFRESH_LUA = """
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
redis.call('EXPIRE', p .. 'g:' .. inst, ttl)
return n
"""
