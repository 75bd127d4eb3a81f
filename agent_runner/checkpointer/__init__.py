"""The Redis checkpointer the runner uses: langgraph-checkpoint-redis, mended, on one Redis
server, a Sentinel-managed one or a Redis Cluster (`from_url` takes any `REDIS_URL`).

With langgraph-checkpoint-redis 0.5.2 the stock savers lose approvals (see
`docs/redis-checkpointer.md`):

1. `RedisSaver.get_tuple` loads a checkpoint's pending writes only when the
   checkpoint document says `has_writes: true`. Background checkpoint saves
   (`durability="async"`) can land `put_writes(C)` before `put(C)`, and `put`
   resets the flag. The writes are stored; only the flag lies. The hidden
   writes include `__interrupt__` and the messages a DeltaChannel (deepagents
   >= 0.6) rebuilds from ancestors, so an approved tool call never runs.
2. Both savers return a checkpoint's writes ordered by (idx, task id) instead
   of `writes_sort_key` (task_path, task_id, idx), so parallel tool results
   are replayed in another order than the live run produced.

So writes are read from the per-checkpoint write-key registry that `put_writes`
maintains (never from the flag), sorted with `writes_sort_key`.

On a cluster the stock savers fail further: everything built on FT.SEARCH (`list`,
`delete_thread`, `prune`, the writes and sends fallbacks) fails or lies, because a
RediSearch index lives on one shard and sees only that shard's keys, while a thread's
keys (the library's names have no hash tags) are spread over every shard; even
`asetup` fails (Redis routes FT.CREATE by the index name's slot, redisvl sends it to
a random node). So nothing here searches on a cluster, and no index is made there.
Instead each thread gets one more key, a registry of its checkpoints: a sorted set
`checkpoint_thread:<thread id>` whose members are `<namespace>\0<checkpoint id>`, all
at score 0 so that they sort by namespace, then id. It is written before the
document or the writes it names (and outlives them on delete), so no key of a
thread escapes it, on any node. Read by direct key reads in pipelines, which
redis-py's cluster client splits per node, it answers:

* the latest checkpoint of a namespace: its newest member whose document is stored
  (the library's `checkpoint_latest` pointer is written after the document, by a
  second command, so a crash leaves it one step behind),
* `list`: namespaces (the root one "" alone), `before`, any metadata key, `limit`,
* `delete_thread`: every key of the thread, including the writes (and the
  `{"has_writes": true}` stub) of a checkpoint whose `put` never came,
* `prune`: besides the newest checkpoints of each namespace, it keeps the
  ancestors their DeltaChannels replay, back to the last snapshot (the stock
  "keep the latest" empties deepagents' messages), and writes whose `put` is on
  its way,
* the pending sends of a checkpoint of the old format (< 4), from its parent's
  writes; the DeltaChannel history walks `get_tuple` over the parents.

Single server and cluster run the same code, so the conformance suite on one node
tests what runs on a cluster, but for what a search does on one server and something
else does on a cluster: finding a thread the stock saver wrote, listing every thread,
and the indexes themselves. The key names are the library's, so threads the stock
saver wrote stay readable: one without a registry is found by the stock search on a
single server, and by following parent links from its root `checkpoint_latest`
pointer on a cluster (the root namespace only: nothing else finds the others there).
Our first write to such a thread puts what was found into a new registry. Listing
every thread (`list(None)`) uses the search on a single server and scans each node
for registries on a cluster (rare; a key every `put` would write is not).

Sync and async savers share every body (in `base`): generators that yield the Redis
requests they need; each saver only runs them with its own client.

The package is shaped as langgraph-checkpoint-postgres's (`base`, `aio`, and the sync saver):

* `requests`: what a body asks of Redis (pipelined commands, the registry's Lua, a search, a
  scan) and the errors it tells apart; it never touches Redis itself,
* `documents`: the pure parts (registry members, checkpoint and write documents, list
  queries, what a prune keeps),
* `base`: the bodies both savers share (`RegistryBody`), `WRITE_FENCE` and `resolve_keep_last`,
* `sync`: `RedisCheckpointer`, running the bodies with a blocking client,
* `aio`: `AsyncRedisCheckpointer`, running them with an asyncio client (and awaiting the
  runner's write fence before it saves).

Everything a graph needs is importable from here.
"""

from agent_runner.checkpointer.aio import AsyncRedisCheckpointer
from agent_runner.checkpointer.base import WRITE_FENCE, resolve_keep_last
from agent_runner.checkpointer.requests import ParentNotSaved
from agent_runner.checkpointer.sync import RedisCheckpointer

__all__ = [
    "WRITE_FENCE",
    "AsyncRedisCheckpointer",
    "ParentNotSaved",
    "RedisCheckpointer",
    "resolve_keep_last",
]
