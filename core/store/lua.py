"""The Lua fragments several rooms of the Store compose into their scripts: Redis's clock
(`NOW`), SHA-256 and appending an entry to an audit chain (`SHA256`, `APPEND_AUDIT`), queuing a
decision's entry for the chain (`QUEUE_AUDIT`), and a due list taken with a lease (`TAKE_DUE`,
`DONE_DUE`: the deadlines and the bot's refresh lanes). Every other script sits at the top of
the room that runs it. Each names its KEYS and ARGV as locals at the top (as arq's `lua.py`
does); a script is one atomic step.

SHA-256: Redis's Lua has `redis.sha1hex` but no SHA-256. The scripts that grant, escalate,
reveal and trim hash their entry in the step that appends it. A decision, on a click's path to
its ack, only queues its entry (its place in the chain fixed in that step): it is hashed in
Python moments later (`core.store.audit.Audit.chain`), or by the next script that appends, first.
`SHA256` is FIPS 180-4 on Lua 5.1 numbers and the `bit` library Redis ships: 32-bit words as
signed numbers, sums folded back with `bit.tobit` (a sum of five words stays exact in a double);
it defines `sha256(text)`, the lowercase hex digest, as `hashlib.sha256(text).hexdigest()` gives
(checked against hashlib through a real Redis: tests/redis/test_audit_chain.py). Cost, measured
on one core: about 30-55 µs of Redis's time per 64 bytes hashed, so 0.2-0.3 ms for a decision
with small arguments and 0.5-0.9 ms more per KB of arguments.
"""

from __future__ import annotations

# Every time Signoff records (a decision, an expiry, an escalation, an approval's creation) is
# Redis's: one clock for every replica, whatever a process's own clock says.
NOW = """
local clock = redis.call('TIME')
local now = clock[1] .. '.' .. string.format('%06d', tonumber(clock[2]))
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
"""


SHA256 = r"""
local sha256
do
  local band, bnot, bxor, rshift, lshift, ror, tobit, tohex =
    bit.band, bit.bnot, bit.bxor, bit.rshift, bit.lshift, bit.ror, bit.tobit, bit.tohex
  local K = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2}

  -- 0 <= n < 2^32, as four big-endian bytes
  local function be32(n)
    return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
      math.floor(n / 256) % 256, n % 256)
  end

  -- one 64-byte block into the state H (eight words)
  local function block(H, text, at, w)
    for j = 1, 16 do
      local b1, b2, b3, b4 = string.byte(text, at + j * 4 - 4, at + j * 4 - 1)
      w[j] = tobit(lshift(b1, 24) + lshift(b2, 16) + lshift(b3, 8) + b4)
    end
    for j = 17, 64 do
      local x, y = w[j - 15], w[j - 2]
      local s0 = bxor(ror(x, 7), ror(x, 18), rshift(x, 3))
      local s1 = bxor(ror(y, 17), ror(y, 19), rshift(y, 10))
      w[j] = tobit(w[j - 16] + s0 + w[j - 7] + s1)
    end
    local a, b, c, d, e, f, g, h = H[1], H[2], H[3], H[4], H[5], H[6], H[7], H[8]
    for j = 1, 64 do
      local t1 = h + bxor(ror(e, 6), ror(e, 11), ror(e, 25)) + bxor(band(e, f), band(bnot(e), g))
        + K[j] + w[j]
      local t2 = bxor(ror(a, 2), ror(a, 13), ror(a, 22)) + bxor(band(a, b), band(a, c), band(b, c))
      h, g, f, e, d, c, b, a = g, f, e, tobit(d + t1), c, b, a, tobit(t1 + t2)
    end
    H[1], H[2], H[3], H[4] = tobit(H[1] + a), tobit(H[2] + b), tobit(H[3] + c), tobit(H[4] + d)
    H[5], H[6], H[7], H[8] = tobit(H[5] + e), tobit(H[6] + f), tobit(H[7] + g), tobit(H[8] + h)
  end

  sha256 = function(text)
    local bits = #text * 8
    text = text .. '\128' .. string.rep('\0', (64 - (#text + 9) % 64) % 64)
      .. be32(math.floor(bits / 4294967296)) .. be32(bits % 4294967296)
    local H = {tobit(0x6a09e667), tobit(0xbb67ae85), tobit(0x3c6ef372), tobit(0xa54ff53a),
      tobit(0x510e527f), tobit(0x9b05688c), tobit(0x1f83d9ab), tobit(0x5be0cd19)}
    local w = {}
    for at = 1, #text, 64 do block(H, text, at, w) end
    local hex = {}
    for j = 1, 8 do hex[j] = tohex(H[j], 8) end
    return table.concat(hex)
  end
end
"""


# An audit entry about action i of `approval` (-1: the whole approval); with the SHA-256 of the
# preview its card showed (`core.previews`), when it had one.
AUDIT_FIELDS = r"""
local function audit_fields(approval, i, tool, who, what, outcome)
  local fields = {'approval_id', redis.call('HGET', approval, 'approval_id') or '',
    'thread_id', redis.call('HGET', approval, 'thread_id') or '',
    'interrupt_id', redis.call('HGET', approval, 'interrupt_id') or '',
    'index', i, 'tool', tool, 'user', who, 'at', now, 'decision', what, 'outcome', outcome,
    'original_args', redis.call('HGET', approval, 'args:' .. i) or 'null'}
  local preview = redis.call('HGET', approval, 'preview:' .. i)
  if preview then
    fields[#fields + 1] = 'preview_sha256'
    fields[#fields + 1] = preview
  end
  return fields
end
"""


# Append an entry to a partition's audit chain (`core.audit_chain`): `prev` is the chain's head,
# `hash` the SHA-256 of the entry's canonical encoding, and the head moves to it in the same
# step; the entries a decision queued before it (`QUEUE_AUDIT`) are chained first, in their
# order. `fields`: name, value, ... (names sorted bytewise here: Lua's `<` follows the locale).
APPEND_AUDIT = (
    SHA256
    + AUDIT_FIELDS
    + r"""
local function byte_less(x, y)
  for n = 1, math.min(#x, #y) do
    local a, b = string.byte(x, n), string.byte(y, n)
    if a ~= b then return a < b end
  end
  return #x < #y
end

local function chain_one(stream, head, fields)
  fields[#fields + 1] = 'prev'
  fields[#fields + 1] = redis.call('GET', head) or ''
  local order = {}
  for n = 1, #fields, 2 do
    fields[n + 1] = tostring(fields[n + 1])
    order[#order + 1] = n
  end
  table.sort(order, function(x, y) return byte_less(fields[x], fields[y]) end)
  local parts = {}
  for _, n in ipairs(order) do
    parts[#parts + 1] = fields[n] .. '=' .. #fields[n + 1] .. ':' .. fields[n + 1] .. '\n'
  end
  local hash = sha256(table.concat(parts))
  fields[#fields + 1] = 'hash'
  fields[#fields + 1] = hash
  redis.call('XADD', stream, '*', unpack(fields))
  redis.call('SET', head, hash)
end

-- At most 100 queued entries are hashed here (a backlog never holds Redis's one thread):
-- with more left, this entry is queued behind them, in its place, for `Audit.chain`.
local function chain_queued(stream, head, queued)
  for _ = 1, 100 do
    local waiting = redis.call('LPOP', queued)
    if not waiting then return true end
    chain_one(stream, head, cjson.decode(waiting))
  end
  return redis.call('LLEN', queued) == 0
end

local function append_audit(stream, head, queued, fields)
  if chain_queued(stream, head, queued) then
    chain_one(stream, head, fields)
  else
    for n = 2, #fields, 2 do fields[n] = tostring(fields[n]) end
    redis.call('RPUSH', queued, cjson.encode(fields))
  end
end
"""
)


# The queue chained here, in Lua, at most 100 entries (`Audit.chain`'s way for an entry Python
# cannot read back as it was written: bytes that are not UTF-8, which only another writer leaves).
CHAIN_IN_LUA = (
    NOW
    + APPEND_AUDIT
    + """
local audit, audit_head, audit_queued = KEYS[1], KEYS[2], KEYS[3]
local before = redis.call('LLEN', audit_queued)
chain_queued(audit, audit_head, audit_queued)
return before - redis.call('LLEN', audit_queued)
"""
)


# A decision's audit entry, queued in the decision's atomic step: its place in the chain is
# taken there (after every entry before it), its `prev` and `hash` are added moments later,
# after the click's ack (`core.store.audit.Audit.chain`), so the SHA-256 is not on the ack's
# path (in Redis's Lua it is about 0.2 ms of Redis's one thread per decision; in Python, µs).
QUEUE_AUDIT = (
    AUDIT_FIELDS
    + r"""
local function queue_audit(queued, fields)
  for n = 2, #fields, 2 do fields[n] = tostring(fields[n]) end
  redis.call('RPUSH', queued, cjson.encode(fields))
end
"""
)


# Take up to `count` due items (cosmetic updates, deadlines) not held by a live taker, then say
# when the next item comes due. A taken item's due time moves to now + lease: if the taker dies,
# it comes due again. `now` (ms) is
# Redis's clock unless given (deadlines always use Redis's: one clock for every replica).
TAKE_DUE = (
    NOW
    + """
local due, claims = KEYS[1], KEYS[2]
local lease, count = tonumber(ARGV[2]), tonumber(ARGV[3])
if ARGV[1] ~= '' then now = tonumber(ARGV[1]) else now = now_ms end

local taken = {}
for _, item in ipairs(redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, count * 4)) do
  local claim = tonumber(redis.call('HGET', claims, item) or '0')
  if claim <= now then
    redis.call('HSET', claims, item, now + lease)
    redis.call('ZADD', due, now + lease, item)
    taken[#taken + 1] = item
    taken[#taken + 1] = tostring(now + lease)
    if #taken >= count * 2 then break end
  end
end
-- then when the list's next item comes due (ms; '' when it is empty): a taker rests until then
local after = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
taken[#taken + 1] = after[2] or ''
return taken
"""
)


# Done with an item: remove it, unless it was marked again meanwhile (its due time changed);
# `retry_at` (ms, or "") puts it back for later instead.
DONE_DUE = """
local due, claims = KEYS[1], KEYS[2]
local item, token, retry_at = ARGV[1], ARGV[2], ARGV[3]

redis.call('HDEL', claims, item)
if tonumber(redis.call('ZSCORE', due, item) or '-1') == tonumber(token) then
  if retry_at == '' then redis.call('ZREM', due, item)
  else redis.call('ZADD', due, retry_at, item) end
end
return 1
"""


def sooner(known: int | None, said: str | int | None) -> int | None:
    """The sooner of two due times (ms): `TAKE_DUE`'s last element ('' for an empty list)."""
    if said is None or said == "":
        return known
    at = int(float(said))
    return at if known is None else min(known, at)
