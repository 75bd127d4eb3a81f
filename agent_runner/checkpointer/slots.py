"""The checkpointer's own layout: every key of a thread in one hash slot, one script per call.

Laid out as LangGraph's `InMemorySaver` keeps a thread, so that Redis costs about what that
saver does: a checkpoint without its channel values, each channel's value stored once per
version, and the writes of each checkpoint. The thread's id is the keys' hash tag, so on a
Redis Cluster every key of a thread lives on one node, and each call is one script there:

* `checkpoints:{T}:r` the registry, a sorted set of `<namespace>\\0<checkpoint id>` at score 0
  (sorted by namespace, then id: uuid6 ids sort as their time does), written by the same
  script as what it names, so no key of a thread escapes it;
* `checkpoints:{T}:c:<namespace>:<id>` a checkpoint (hash): the checkpoint without its values
  (`c`; without its channel versions too when `n` alone gives them back, `versions_as_text`),
  its metadata (`m`), its parent's id (`p`), the `<channel>\\0<version>` fields of its
  values (`n`) and the channels it holds a value of (`f`, for `prune`);
* `checkpoints:{T}:b:<namespace>` the values (hash): `<channel>\\0<version>` -> the value,
  written with the checkpoint that made that version and shared by the ones after it;
* `checkpoints:{T}:w:<namespace>:<id>` a checkpoint's writes (hash): `<task id>\\0<idx>` ->
  task path, channel and value (a write of a special channel replaces; any other is kept).

Every stored value is `<serde type>\\0<bytes>`, as `serde.dumps_typed` made it (with a checkpoint
key, as LangGraph's `EncryptedSerializer` made it: `<serde type>+aes\\0<ciphertext>`, see
`encryption`). Nothing is indexed: a registry answers everything a search did. Pure parts only;
no I/O here.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Sequence
from struct import Struct
from typing import Any

from langgraph.checkpoint.base import WRITES_IDX_MAP, PendingWrite, writes_sort_key

PREFIX = "checkpoints"
SEP = b"\x00"  # between a typed value's parts, and a field's
LIST_SEP = b"\x01"  # between the fields of `n` and the channels of `f`
FRAME, NIL = Struct(">I"), 0xFFFFFFFF

# Each script's arguments after the registry (its one key, so that a cluster routes it) are one
# string of frames (`pack`), read by this: a call with one argument costs the client and the
# server less than one with twenty.
FRAMES = """
local function frames(s)
  local count = struct.unpack('>I4', s, 1)
  local out, at = {}, 5 + 4 * count
  for i = 1, count do
    local size = struct.unpack('>I4', s, 1 + 4 * i)
    out[i] = string.sub(s, at, at + size - 1)
    at = at + size
  end
  return out
end
local a = frames(ARGV[1])
"""

# A save by a runner that lost the thread never lands (`FENCED`): the thread's fence key
# (`<base>:fence`) holds the lock token of the runner that took the thread last (`claim`), and a
# save names its own (ARGV[2]); a save of another token is refused, however late it reaches Redis
# (a request held up by a network cut past the lease). A save without a token (no runner: tests,
# tools) and a thread no runner claimed are not checked.
FENCE_LUA = """
local function holds_the_fence(base)
  local token = ARGV[2]
  if not token or token == '' then return true end
  local holder = redis.call('GET', base .. ':fence')
  return not holder or holder == token
end
"""
FENCED = -1  # a save's reply when its token is not the thread's

# Save a checkpoint: refused (0) when its parent is not stored, as `base.SlotBody._put` says.
# a: key base, namespace, id, parent id, whether to check the parent ('1'), TTL, checkpoint,
# metadata, fields `n`, channels `f`, then the new values' field, value pairs.
PUT = (
    FRAMES
    + FENCE_LUA
    + """
local base, ns, id, parent, ttl = a[1], a[2], a[3], a[4], tonumber(a[6])
local key, values = base .. ':c:' .. ns .. ':' .. id, base .. ':b:' .. ns
if not holds_the_fence(base) then return -1 end
if a[5] == '1' and redis.call('EXISTS', base .. ':c:' .. ns .. ':' .. parent) == 0 then return 0 end
redis.call('ZADD', KEYS[1], 0, ns .. '\\0' .. id)
redis.call('HSET', key, 'c', a[7], 'm', a[8], 'p', parent, 'n', a[9], 'f', a[10])
if #a > 10 then redis.call('HSET', values, unpack(a, 11)) end
if ttl > 0 then
  for _, k in ipairs({KEYS[1], key, values}) do redis.call('EXPIRE', k, ttl) end
end
return 1
"""
)

# Save a task's writes. a: key base, namespace, id, TTL, then (replace?, field, value) triples.
WRITES = (
    FRAMES
    + FENCE_LUA
    + """
local key, ttl = a[1] .. ':w:' .. a[2] .. ':' .. a[3], tonumber(a[4])
if not holds_the_fence(a[1]) then return -1 end
redis.call('ZADD', KEYS[1], 0, a[2] .. '\\0' .. a[3])
for i = 5, #a, 3 do
  if a[i] == '1' then redis.call('HSET', key, a[i + 1], a[i + 2])
  else redis.call('HSETNX', key, a[i + 1], a[i + 2]) end
end
if ttl > 0 then redis.call('EXPIRE', KEYS[1], ttl); redis.call('EXPIRE', key, ttl) end
return 1
"""
)

# Read a checkpoint (the newest stored one of a namespace when no id is given) with its values
# and writes, or nil: one string of frames (`frames` reads it: a reply of one string costs the
# client a fraction of what parsing a nested reply does): id, checkpoint, metadata, parent,
# fields, one value per field, then the writes' field, value pairs.
GET = """
local out = {}
local function add(s)
  if s then out[#out + 1] = struct.pack('>I4', #s) .. s else out[#out + 1] = '\\255\\255\\255\\255' end
end
local base, ns, id = ARGV[1], ARGV[2], ARGV[3]
local key
if id == '' then
  local offset = 0
  while true do
    local found = redis.call('ZRANGE', KEYS[1], '(' .. ns .. '\\1', '[' .. ns .. '\\0',
      'BYLEX', 'REV', 'LIMIT', offset, 1)
    if #found == 0 then return false end
    id = string.sub(found[1], #ns + 2)
    key = base .. ':c:' .. ns .. ':' .. id
    if redis.call('EXISTS', key) == 1 then break end
    offset = offset + 1  -- writes whose checkpoint has not landed
  end
else
  key = base .. ':c:' .. ns .. ':' .. id
end
local c = redis.call('HMGET', key, 'c', 'm', 'p', 'n')
if not c[1] then return false end
add(id); add(c[1]); add(c[2]); add(c[3]); add(c[4])
if c[4] ~= '' then
  local fields = {}
  for field in string.gmatch(c[4], '[^\\1]+') do fields[#fields + 1] = field end
  for _, value in ipairs(redis.call('HMGET', base .. ':b:' .. ns, unpack(fields))) do add(value) end
end
local writes_key = base .. ':w:' .. ns .. ':' .. id
for _, item in ipairs(redis.call('HGETALL', writes_key)) do add(item) end
local ttl = tonumber(ARGV[4])
if ttl > 0 then
  for _, k in ipairs({KEYS[1], key, base .. ':b:' .. ns, writes_key}) do redis.call('EXPIRE', k, ttl) end
end
return table.concat(out)
"""

# Delete a thread: every key its registry names, its values, then the registry.
DELETE = """
local base, spaces = ARGV[1], {}
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
for _, member in ipairs(members) do
  local at = string.find(member, '\\0', 1, true)
  local ns, id = string.sub(member, 1, at - 1), string.sub(member, at + 1)
  redis.call('DEL', base .. ':c:' .. ns .. ':' .. id, base .. ':w:' .. ns .. ':' .. id)
  spaces[ns] = true
end
for ns in pairs(spaces) do redis.call('DEL', base .. ':b:' .. ns) end
redis.call('DEL', KEYS[1], base .. ':fence')
return #members
"""


# Rewrite values of one hash (`signoff migrate --rekey`), each only if it still holds what was
# read: a value written meanwhile (a runner saving while the keys are rotated) is left as it is.
# a: (field, value it must still hold, new value) triples.
RESEAL = (
    FRAMES
    + """
local done = 0
for i = 1, #a, 3 do
  if redis.call('HGET', KEYS[1], a[i]) == a[i + 1] then
    redis.call('HSET', KEYS[1], a[i], a[i + 2])
    done = done + 1
  end
end
return done
"""
)


def tag(thread_id: str) -> str:
    """The thread's id as a hash tag: `%`, `{` and `}` escaped, so that it is the whole tag
    (and an empty id `%`: Redis ignores an empty tag, which would spread the keys over slots)."""
    return thread_id.replace("%", "%25").replace("{", "%7B").replace("}", "%7D") or "%"


def untag(text: str) -> str:
    if text == "%":
        return ""
    return text.replace("%7D", "}").replace("%7B", "{").replace("%25", "%")


@functools.lru_cache(maxsize=4096)
def base(thread_id: str) -> str:
    return f"{PREFIX}:{{{tag(thread_id)}}}"


def registry(thread_id: str) -> str:
    return base(thread_id) + ":r"


REGISTRY_PATTERN = f"{PREFIX}:{{*}}:r"  # every thread's registry (`{` is no glob character)


def thread_of(registry_key: Any) -> str | None:
    """The thread a registry key names (None for a key that is not one)."""
    text = registry_key.decode() if isinstance(registry_key, bytes) else str(registry_key)
    head = f"{PREFIX}:{{"
    if not text.startswith(head) or not text.endswith("}:r"):
        return None
    return untag(text[len(head) : -3])


def fence_key(thread_id: str) -> str:
    """The lock token of the runner that took the thread last (`FENCE_LUA`)."""
    return f"{base(thread_id)}:fence"


def checkpoint_key(thread_id: str, namespace: str, checkpoint_id: str) -> str:
    return f"{base(thread_id)}:c:{namespace}:{checkpoint_id}"


def writes_key(thread_id: str, namespace: str, checkpoint_id: str) -> str:
    return f"{base(thread_id)}:w:{namespace}:{checkpoint_id}"


def values_key(thread_id: str, namespace: str) -> str:
    return f"{base(thread_id)}:b:{namespace}"


def typed(dumped: tuple[str, bytes]) -> bytes:
    return dumped[0].encode() + SEP + dumped[1]


def untyped(raw: bytes) -> tuple[str, bytes]:
    kind, _, data = raw.partition(SEP)
    return kind.decode(), data


def value_field(channel: str, version: Any) -> bytes:
    return f"{channel}\x00{version}".encode()


def versions_as_text(versions: dict[str, Any], fields: bytes) -> bool:
    """Whether a checkpoint's channel versions read back the same from its `n` fields alone
    (`fields`, `decode_versions`): every version a string (as this saver's `get_next_version`
    makes them), no name or version holding NUL or \\x01 (each field holds one NUL, and one
    \\x01 lies between two fields). Then the stored checkpoint leaves them out: they were
    stored twice, and they are a third of a checkpoint without its values. (A checkpoint
    stored with them, by an earlier Signoff or with versions of another type, is read as it
    was stored.)"""
    return (
        all(type(version) is str for version in versions.values())
        and fields.count(SEP) == len(versions)
        and fields.count(LIST_SEP) == max(len(versions) - 1, 0)
    )


def decode_versions(fields: bytes) -> dict[str, str]:
    """A checkpoint's channel versions from its `n` fields, in the order they were saved."""
    found: dict[str, str] = {}
    for field in fields.split(LIST_SEP) if fields else ():
        channel, _, version = field.decode().partition("\x00")
        found[channel] = version
    return found


def plain(text: str, what: str) -> bytes:
    if "\x00" in text or "\x01" in text:
        raise ValueError(f"a {what} may not contain NUL or \\x01: {text!r}")
    return text.encode()


def write_triples(writes: Sequence[tuple[str, Any]], task_id: str, task_path: str, dumps: Any) -> list[Any]:
    """A task's writes as the WRITES script takes them (`dumps`: a value -> typed bytes)."""
    head = plain(task_path, "task path") + SEP
    found: list[Any] = []
    for idx, (channel, value) in enumerate(writes):
        index = WRITES_IDX_MAP.get(channel, idx)
        found += [
            b"1" if index < 0 else b"0",
            plain(task_id, "task id") + SEP + str(index).encode(),
            head + plain(channel, "channel") + SEP + dumps(value),
        ]
    return found


def keyed_writes(
    stored: Sequence[bytes] | dict[bytes, bytes], loads: Any
) -> list[tuple[str, str, int, str, Any]]:
    """A writes hash (as the GET script returns it, flat, or as HGETALL does) -> (task path,
    task id, idx, channel, value) in `writes_sort_key` order."""
    pairs = stored.items() if isinstance(stored, dict) else zip(stored[::2], stored[1::2], strict=True)
    found = []
    for field, value in pairs:
        task_id, _, idx = field.decode().rpartition("\x00")
        task_path, channel, rest = value.split(SEP, 2)
        found.append((task_path.decode(), task_id, int(idx), channel.decode(), rest))
    found.sort(key=lambda w: writes_sort_key(w[0], w[1], w[2]))
    return [
        (path, task_id, idx, channel, loads(untyped(rest))) for path, task_id, idx, channel, rest in found
    ]


def decode_writes(stored: Sequence[bytes] | dict[bytes, bytes], loads: Any) -> list[PendingWrite]:
    """A writes hash -> pending writes in `writes_sort_key` order."""
    return [(task_id, channel, value) for _, task_id, _, channel, value in keyed_writes(stored, loads)]


def decode_values(fields: bytes, values: Sequence[bytes | None], loads: Any) -> dict[str, Any]:
    """A checkpoint's channel values from its `n` fields and the values HMGET found."""
    found: dict[str, Any] = {}
    for field, raw in zip(fields.split(LIST_SEP) if fields else (), values, strict=True):
        if raw is None:
            continue
        kind, data = untyped(raw)
        if kind == "empty":
            continue
        found[field.partition(SEP)[0].decode()] = loads((kind, data))
    return found


def pack(items: Sequence[bytes]) -> bytes:
    """Items as the scripts read them: their count and each one's length (4-byte big-endian
    numbers), then the items one after the other."""
    return struct.pack(f">{len(items) + 1}I", len(items), *map(len, items)) + b"".join(items)


def frames(reply: bytes) -> list[bytes | None]:
    """The GET script's reply: each frame is a 4-byte big-endian length (all ones: nil), then
    that many bytes."""
    found: list[bytes | None] = []
    at, end = 0, len(reply)
    while at < end:
        (size,) = FRAME.unpack_from(reply, at)
        at += 4
        if size == NIL:
            found.append(None)
            continue
        found.append(reply[at : at + size])
        at += size
    return found


class Script:
    """A script call, queued on a pipeline or sent as it is (`command`): EVALSHA, or EVAL
    (`fallback`) for a server that has not seen the script yet. One that `lingers` waits a
    moment for another to go with it (`batches`)."""

    def __init__(
        self, sha: str, text: str, keys: Sequence[Any], args: Iterable[Any], lingers: bool = False
    ) -> None:
        self.lingers = lingers
        tail = (len(keys), *keys, *args)
        self.command = ("EVALSHA", sha, *tail)
        self.text = ("EVAL", text, *tail)

    def __call__(self, pipe: Any) -> object:
        return pipe.execute_command(*self.command)

    def fallback(self, pipe: Any) -> object:
        return pipe.execute_command(*self.text)
