"""The sync saver, `RedisCheckpointer`: runs the bodies `base` shares with its own (blocking)
client. (The async one, `AsyncRedisCheckpointer`, is in `aio`.)"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.redis import RedisSaver
from redis.exceptions import NoScriptError
from redis.retry import Retry

from agent_runner.checkpointer.base import Rekeyed, SlotBody, resolve_keep_last
from agent_runner.checkpointer.documents import ListQuery
from agent_runner.checkpointer.encryption import CheckpointKeys
from agent_runner.checkpointer.requests import Request, Scan, Search, Step, T, resending, with_scripts
from core import connections


class RedisCheckpointer(SlotBody, RedisSaver):
    """A blocking saver on one Redis server, a Sentinel-managed one or a cluster."""

    @classmethod
    @contextmanager
    def from_url(
        cls,
        url: str,
        *,
        ttl: dict[str, Any] | None = None,
        keys: CheckpointKeys | None = None,
        **options: Any,
    ) -> Iterator[RedisCheckpointer]:
        """A set-up saver on the Redis a Signoff `REDIS_URL` names (`redis://`,
        `redis+cluster://`, `redis+sentinel://`), encrypting with `keys` when given
        (`CheckpointKeys.from_settings`); `options` go to the client. Closes it on exit."""
        client = connections.sync_client(url, decode_responses=False, **{**resending(Retry), **options})
        try:
            saver = cls(redis_client=client, ttl=ttl, keys=keys)
            saver.setup()
            yield saver
        finally:
            client.close()

    def setup(self) -> None:
        """No index to make: only see whether Redis holds threads of the layout before."""
        self._detect_cluster_mode()
        self.legacy = self._run(self._legacy_present())

    def _run(self, step: Step[T]) -> T:
        reply: Any = None
        while True:
            try:
                request = step.send(reply)
            except StopIteration as done:
                return done.value
            reply = self._execute(request)

    def _execute(self, request: Request) -> Any:
        if isinstance(request, Search):
            index = self.checkpoints_index if request.index == "checkpoints" else self.checkpoint_writes_index
            return index.search(request.query).docs
        if isinstance(request, Scan):
            return list(self._redis.scan_iter(match=request.pattern, count=1000))
        try:
            return self._send(request)
        except NoScriptError:  # a server that has not seen the script yet (new, restarted, failed over)
            return self._send(with_scripts(request))

    def _send(self, request: list[Any]) -> list[Any]:
        if len(request) == 1:  # one command: no pipeline to build
            return [request[0](self._redis)]
        if not request:
            return []
        with self._redis.pipeline(transaction=False) as pipeline:
            for queue in request:
                queue(pipeline)
            return pipeline.execute()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._run(self._get(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        query = ListQuery.of(config, filter, before, limit)
        emitted = 0
        for page in query.pages(self._run(self._listed_refs(query))):
            for found in self._run(self._listed_page(query, page)):
                yield found
                emitted += 1
                if query.limit is not None and emitted >= query.limit:
                    return

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._run(self._put(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if writes:
            self._run(self._put_writes(config, writes, task_id, task_path))

    def rekey(self, threads: Collection[str] | None = None) -> Rekeyed:
        """As `AsyncRedisCheckpointer.arekey`."""
        return self._run(self._rekey(threads))

    def delete_thread(self, thread_id: str) -> None:
        self._run(self._drop(thread_id))

    def prune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
        max_results: int = 10000,
    ) -> None:
        """Keep the newest `keep_last` checkpoints of each namespace (1 for "keep_latest", 0 for
        "delete") and what their DeltaChannels need; `max_results` caps the search that finds a
        thread the stock saver wrote."""
        kept = resolve_keep_last(keep_last, strategy, max_results)
        for thread_id in thread_ids:
            self._run(self._prune_slots(thread_id, kept))
            if self.legacy:
                self._run(self._prune(thread_id, kept, max_results))
