"""The Redis checkpointer the runner uses, on one Redis server, a Sentinel-managed one or a
Redis Cluster (`from_url` takes any `REDIS_URL`).

With langgraph-checkpoint-redis 0.5.2 the stock savers lose approvals (see
`docs/redis-checkpointer.md`):

1. `RedisSaver.get_tuple` loads a checkpoint's pending writes only when the
   checkpoint document says `has_writes: true`. Background checkpoint saves
   (`durability="async"`) can land `put_writes(C)` before `put(C)`, and `put`
   resets the flag. The hidden writes include `__interrupt__` and the messages a
   DeltaChannel rebuilds from ancestors, so an approved tool call never runs.
2. Both savers return a checkpoint's writes ordered by (idx, task id) instead
   of `writes_sort_key` (task_path, task_id, idx), so parallel tool results
   are replayed in another order than the live run produced.
3. On a cluster everything built on FT.SEARCH fails or lies (an index sees one shard).

They also cost 3-4 times what LangGraph's `InMemorySaver` does per step (RedisJSON documents,
a search index, 40-odd round trips a run). So this package writes a layout of its own
(`slots`), shaped as `InMemorySaver` keeps a thread:

* every key of a thread carries the thread's id as its hash tag: on a cluster a thread lives
  on one node, so each call is one Lua script there (`put`, `put_writes`, the read of a
  checkpoint with its values and writes, `delete_thread`); nothing is indexed or searched;
* a checkpoint is stored without its channel values, each value once per version (shared
  by the checkpoints after it), and its writes in a hash (a special channel's write replaces,
  any other is kept: `WRITES_IDX_MAP`), read back in `writes_sort_key` order;
* a registry (a sorted set of `<namespace>\\0<checkpoint id>`) written by the same script as
  what it names answers the latest checkpoint (its newest member whose checkpoint is stored:
  writes may land before their checkpoint), `list`, `delete_thread` and `prune` (which keeps
  the ancestors a DeltaChannel replays and the writes of a checkpoint on its way);
* a checkpoint whose parent is not stored is refused (`ParentNotSaved`): LangGraph saves
  the next step even when the last save failed, and a hole in the chain loses messages.

The async saver sends its scripts on one connection it keeps, and the requests made while
one is in flight go together in one pipeline (`batches`); arguments go as one packed string
and the read's reply comes as one: a round trip costs what a PING does, near enough.

Threads of the layout before (the stock saver's RedisJSON documents, with the registry an
earlier Signoff kept beside them) are still read, continued, listed and deleted (`legacy`)
whenever Redis may hold some: on one server, the stock index holds documents; on a cluster, a
node holds a stock latest pointer (a scan at setup). A thread continued from there keeps its
history whole: the old checkpoints are read in place, the new ones written here.

Sync and async savers share every body (in `base`): generators that yield the Redis
requests they need; each saver only runs them with its own client.

* `slots`: the layout, its scripts, and the packing of what they take and give (no I/O),
* `requests`: what a body asks of Redis (pipelined commands, a search, a scan),
* `documents`: the pure parts both layouts share (registry members, list queries, what a
  prune keeps) and the stock documents,
* `base`: the bodies (`SlotBody`), `WRITE_FENCE` and `resolve_keep_last`,
* `legacy`: reading and deleting the layout before,
* `encryption`: checkpoints encrypted at rest (`CheckpointKeys`: LangGraph's `EncryptedSerializer`,
  AES-256-GCM, `SIGNOFF_CHECKPOINT_KEY`), and their values encrypted again (`signoff migrate --rekey`),
* `batches`: the async saver's kept connection and its batches,
* `sync`: `RedisCheckpointer`, running the bodies with a blocking client,
* `aio`: `AsyncRedisCheckpointer`, running them with an asyncio client (and awaiting the
  runner's write fence before it saves).

Everything a graph needs is importable from here.
"""

from agent_runner.checkpointer.aio import AsyncRedisCheckpointer
from agent_runner.checkpointer.base import WRITE_FENCE, Rekeyed, resolve_keep_last
from agent_runner.checkpointer.encryption import CheckpointKeyError, CheckpointKeys
from agent_runner.checkpointer.requests import ParentNotSaved
from agent_runner.checkpointer.sync import RedisCheckpointer

__all__ = [
    "WRITE_FENCE",
    "AsyncRedisCheckpointer",
    "CheckpointKeyError",
    "CheckpointKeys",
    "ParentNotSaved",
    "RedisCheckpointer",
    "Rekeyed",
    "resolve_keep_last",
]
