"""How the async saver's scripts reach one Redis server: on one connection it keeps, one
request at a time, and the requests made while one is in flight go together, as one pipeline,
when it returns (a busy runner's many threads save at once). A request made while nothing is
in flight is sent at once, so a lone call waits for nothing, except a task's writes: LangGraph
saves the step's checkpoint right after the step's tasks end, without waiting for their writes,
so the writes linger (`LINGER_S`) for the checkpoint to go with them (not a pause's or a
failure's: they are the run's last): a `create_agent` run
makes 5 round trips to start and 5 to resume, not 7 and 10. Whatever else comes sends them at
once. (LangGraph waits for a task's writes to a DeltaChannel, such as a deep agent's messages,
before it saves the checkpoint: those gain nothing and are later by `LINGER_S`.)

A round trip through the client (`execute_command`: a connection taken from the pool and given
back, its retry wrapper, the reply's callbacks) costs this process about 80 µs on this kind of
host; the same command on a kept connection about 60 (`bench/README.md`). Requests of other
commands, and every request on a cluster (whose client routes each key to its node), go
through the client as before."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError, ResponseError

from agent_runner.checkpointer.requests import Queue, with_scripts
from agent_runner.checkpointer.slots import Script

Waiting = tuple[list[Script], "asyncio.Future[list[Any]]"]

# How long a task's writes wait for the step's checkpoint: LangGraph's work between the two
# (the step's writes applied, the next tasks prepared) is a few hundred µs here. (The selector
# loop's epoll waits in whole milliseconds, so it is about 1 ms when the loop is idle.)
LINGER_S = 0.0005


class Together:
    """One saver's requests to Redis."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.direct = not isinstance(client, RedisCluster)
        self.connection: Any = None
        self.in_flight = False
        self.waiting: list[Waiting] = []
        self.flusher: asyncio.Task[None] | None = None
        self.lingering: asyncio.TimerHandle | None = None

    async def send(self, request: list[Queue]) -> list[Any]:
        if not self.direct or not all(isinstance(queue, Script) for queue in request):
            return await through_client(request, self.client)
        scripts: list[Script] = request  # type: ignore[assignment]
        lingers = all(script.lingers for script in scripts)
        if self.in_flight or lingers:
            reply: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
            self.waiting.append((scripts, reply))
            if not self.in_flight:  # writes: they wait a moment for the step's checkpoint
                self.in_flight = True
                self.then()
            elif self.lingering is not None and not lingers:
                self.flush()
            return await reply
        self.in_flight = True
        try:
            try:
                return self.checked(scripts, await self.sent(scripts))
            except Unloaded:
                return self.checked(scripts, await self.sent(scripts, text=True))
        finally:
            self.then()

    def then(self) -> None:
        """After a round trip: what waits is sent now, or lingers if it is only writes; with
        nothing waiting, the line is free."""
        if not self.waiting:
            self.in_flight = False
        elif all(script.lingers for scripts, _ in self.waiting for script in scripts):
            if self.lingering is None:
                self.lingering = asyncio.get_running_loop().call_later(LINGER_S, self.flush)
        else:
            self.flush()

    def flush(self) -> None:
        """Send what waits, now."""
        if self.lingering is not None:
            self.lingering.cancel()
            self.lingering = None
        # (kept: the loop holds only a weak reference to a task)
        self.flusher = asyncio.create_task(self.send_waiting())
        self.flusher.add_done_callback(self.flushed)

    async def send_waiting(self) -> None:
        batch, self.waiting = self.waiting, []
        try:
            await self.together(batch)
        except BaseException as exc:  # cancelled at shutdown: no caller is left waiting for ever
            for _, reply in [*batch, *self.waiting]:
                if not reply.done():
                    reply.set_exception(exc)
            self.waiting = []
            self.in_flight = False
            raise
        self.then()

    def flushed(self, flusher: asyncio.Task[None]) -> None:
        """A flusher cancelled (the loop shutting down): nobody waits for ever, and no timer
        left behind starts a second flusher beside a request sent meanwhile on the same
        connection (a request made between the cancellation and this callback is cancelled)."""
        if flusher.cancelled() and flusher is self.flusher and self.in_flight:
            if self.lingering is not None:
                self.lingering.cancel()
                self.lingering = None
            for _, reply in self.waiting:
                if not reply.done():
                    reply.cancel()
            self.waiting = []
            self.in_flight = False

    async def together(self, batch: list[Waiting]) -> None:
        """Several requests in one pipeline; each caller gets its own replies, or its error."""
        try:
            replies = await self.sent([script for scripts, _ in batch for script in scripts])
        except Exception as exc:  # the connection: every request in it failed
            for _, reply in batch:
                if not reply.done():
                    reply.set_exception(exc)
            return
        start = 0
        for scripts, reply in batch:
            mine = replies[start : start + len(scripts)]
            start += len(scripts)
            try:
                try:
                    found = self.checked(scripts, mine)
                except Unloaded:
                    found = self.checked(scripts, await self.sent(scripts, text=True))
            except Exception as exc:
                if not reply.done():
                    reply.set_exception(exc)
                continue
            if not reply.done():
                reply.set_result(found)

    def checked(self, scripts: list[Script], replies: list[Any]) -> list[Any]:
        for reply in replies:
            if isinstance(reply, NoScriptError):
                raise Unloaded(scripts)
            if isinstance(reply, Exception):
                raise reply
        return replies

    async def sent(self, scripts: list[Script], text: bool = False) -> list[Any]:
        """The replies to `scripts` (their text with `text`), sent on the kept connection (an
        error reply in its place), with the client's retry: a connection lost is made again and
        the request sent again."""
        commands = [script.text if text else script.command for script in scripts]
        retry = self.client.get_retry()
        try:
            if retry is None:
                return await self.exchange(commands)
            return await retry.call_with_retry(lambda: self.exchange(commands), self.drop)
        except BaseException:  # (cancelled half way too: the connection may hold a reply unread)
            await self.drop(None)
            raise

    async def exchange(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        if self.connection is None:
            self.connection = await self.client.connection_pool.get_connection()
        connection = self.connection
        if len(commands) == 1:
            packed = connection.pack_command(*commands[0])
        else:
            packed = connection.pack_commands(commands)
        await connection.send_packed_command(packed, check_health=False)
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await connection.read_response())
            except ResponseError as exc:  # one command's error: the others' replies follow
                replies.append(exc)
        return replies

    async def drop(self, _error: Exception | None) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.disconnect()
            await self.client.connection_pool.release(connection)


class Unloaded(Exception):
    """A script the server did not have: the request is sent again with the scripts' text."""

    def __init__(self, scripts: list[Script]) -> None:
        super().__init__("NOSCRIPT")
        self.scripts = scripts


async def through_client(request: list[Queue], client: Any) -> list[Any]:
    try:
        return await by_client(request, client)
    except NoScriptError:  # a server that has not seen the script yet (new, restarted, failed over)
        return await by_client(with_scripts(request), client)


async def by_client(request: list[Queue], client: Any) -> list[Any]:
    if len(request) == 1:  # one command: no pipeline to build
        return [await request[0](client)]  # type: ignore[misc]
    pipeline = client.pipeline(transaction=False)
    for queue in request:
        queue(pipeline)
    return list(await pipeline.execute())
