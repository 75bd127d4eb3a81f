"""The checkpointer's cost per run against LangGraph's own floor, in one run.

    .venv/bin/python bench/resume.py [--threads 300] [--rounds 3] [REDIS_URL]

One `create_agent` graph with `HumanInTheLoopMiddleware` (a scripted model, one gated tool),
`--threads` threads started (each pauses before the tool), then each resumed with approve
(the tool runs, the model answers), on each saver in turn:

* `InMemorySaver`: LangGraph's own, which also serializes every checkpoint: the floor;
* `AsyncRedisCheckpointer`: the project's (`agent_runner.checkpointer`);
* `AsyncRedisSaver`: langgraph-checkpoint-redis's stock saver.

Counted per thread: the CPU time of this process (`time.process_time`) plus the Redis
server's own CPU (`INFO cpu`, user + sys), for starts and for resumes apart. Each saver runs
`--rounds` times in turn and the best round is kept (the host is shared). Printed as
milliseconds and as ratios to the floor. Starts its own Redis unless a URL is given.

Then, for one thread (after one warm-up thread: scripts loaded, indexes made), the saver calls
LangGraph makes to start it and to resume it, and the round trips to Redis each kind of call
began (a request or a pipeline sent on a connection, counted where redis-py sends it, for the
call whose task sent it: a task's writes that Signoff's saver holds for the step's checkpoint,
or that wait for a request in flight, count in the call that took them along, which may be a
put; the total is the thread's).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import HumanInTheLoopMiddleware  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.checkpoint.redis.aio import AsyncRedisSaver  # noqa: E402
from langgraph.types import Command  # noqa: E402
from redis.asyncio import Redis  # noqa: E402
from redis.asyncio.connection import AbstractConnection  # noqa: E402

from agent_runner.checkpointer import AsyncRedisCheckpointer  # noqa: E402
from signoff_demo import redis_server  # noqa: E402
from signoff_demo.scripted_model import ScriptedChatModel, tool_call  # noqa: E402

APPROVE: Command[Any] = Command(resume={"decisions": [{"type": "approve"}]})


def send_email(to: str, subject: str) -> str:
    """Send an email."""
    return f"Email to {to} sent: {subject}"


def agent(saver: Any) -> Any:
    call = tool_call("send_email", {"to": "finance@acme.com", "subject": "Q3 numbers"}, "c1")
    model = ScriptedChatModel(turns=[AIMessage(content="", tool_calls=[call]), AIMessage(content="Sent.")])
    gate = HumanInTheLoopMiddleware(interrupt_on={"send_email": True})
    return create_agent(model=model, tools=[send_email], middleware=[gate], checkpointer=saver)


@asynccontextmanager
async def in_memory(url: str) -> AsyncIterator[Any]:
    yield InMemorySaver()


@asynccontextmanager
async def stock(url: str) -> AsyncIterator[Any]:
    async with AsyncRedisSaver.from_conn_string(url) as saver:
        await saver.asetup()
        yield saver


@asynccontextmanager
async def ours(url: str) -> AsyncIterator[Any]:
    # On a database of its own: the stock saver's threads in database 0 (RediSearch indexes
    # only that one) would have it read the layout before too, as after an upgrade.
    async with AsyncRedisCheckpointer.from_url(urlsplit(url)._replace(path="/1").geturl()) as saver:
        assert not saver.legacy
        yield saver


SAVERS: dict[str, Callable[[str], AbstractAsyncContextManager[Any]]] = {
    "InMemorySaver (floor)": in_memory,
    "AsyncRedisCheckpointer (Signoff)": ours,
    "AsyncRedisSaver (stock)": stock,
}


async def redis_cpu(client: Redis) -> float:
    info = await client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def measured(client: Redis, step: Callable[[], Any]) -> float:
    """Seconds of CPU, this process's and the Redis server's, that `step` took."""
    cpu, server = time.process_time(), await redis_cpu(client)
    await step()
    return time.process_time() - cpu + await redis_cpu(client) - server


async def one_round(name: str, url: str, threads: int, client: Redis) -> tuple[float, float]:
    """(start, resume) CPU per thread, in milliseconds, for the saver `name`."""
    async with SAVERS[name](url) as saver:
        graph = agent(saver)
        configs = [{"configurable": {"thread_id": uuid.uuid4().hex}} for _ in range(threads)]

        async def start() -> None:
            for config in configs:
                paused = await graph.ainvoke({"messages": [("user", "email finance")]}, config)
                assert paused["__interrupt__"], "the graph did not pause"

        async def resume() -> None:
            for config in configs:
                done = await graph.ainvoke(APPROVE, config)
                assert done["messages"][-1].content == "Sent.", "the run did not finish"

        started = await measured(client, start)
        resumed = await measured(client, resume)
    return started * 1000 / threads, resumed * 1000 / threads


CALLS = ("aget_tuple", "aput", "aput_writes")
CALL: ContextVar[str] = ContextVar("call", default="other")
TRIPS: Counter[str] = Counter()  # round trips begun, by the saver call that began them


def count_round_trips() -> None:
    """Count every request (or pipeline) redis-py's asyncio connections send, by `CALL`."""
    send = AbstractConnection.send_packed_command

    async def counted(self: Any, command: Any, check_health: bool = True) -> None:
        TRIPS[CALL.get()] += 1
        await send(self, command, check_health)

    AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]


def counting(saver: Any, calls: Counter[str]) -> None:
    """Wrap `saver`'s calls so that each is counted and the round trips it begins are its own."""
    for name in CALLS:
        method = getattr(saver, name)

        async def wrapped(*args: Any, _name: str = name, _method: Any = method, **kwargs: Any) -> Any:
            calls[_name] += 1
            CALL.set(_name)  # (this call's task only: a task copies its context)
            return await _method(*args, **kwargs)

        setattr(saver, name, wrapped)


async def round_trips(name: str, url: str) -> dict[str, tuple[Counter[str], Counter[str]]]:
    """{"start" / "resume": (calls, round trips) by saver call} for one thread."""
    found: dict[str, tuple[Counter[str], Counter[str]]] = {}
    async with SAVERS[name](url) as saver:
        graph = agent(saver)
        await graph.ainvoke(
            {"messages": [("user", "email finance")]}, {"configurable": {"thread_id": "warm"}}
        )
        await graph.ainvoke(APPROVE, {"configurable": {"thread_id": "warm"}})
        calls: Counter[str] = Counter()
        counting(saver, calls)
        config = {"configurable": {"thread_id": uuid.uuid4().hex}}
        for phase, given in (("start", {"messages": [("user", "email finance")]}), ("resume", APPROVE)):
            calls.clear()
            TRIPS.clear()
            await graph.ainvoke(given, config)
            await asyncio.sleep(0.05)  # (anything held back has gone)
            found[phase] = (Counter(calls), Counter(TRIPS))
    return found


async def print_round_trips(url: str) -> None:
    print("\nsaver calls and the round trips they began, one thread (calls / round trips)")
    print(f"{'saver':34} {'phase':7} " + " ".join(f"{c:>12}" for c in CALLS) + f" {'all':>9}")
    for name in list(SAVERS)[1:]:
        for phase, (calls, trips) in (await round_trips(name, url)).items():
            cells = " ".join(f"{f'{calls[c]} / {trips[c]}':>12}" for c in CALLS)
            print(f"{name:34} {phase:7} {cells} {f'{sum(calls.values())} / {sum(trips.values())}':>9}")


async def main(url: str, threads: int, rounds: int) -> None:
    client = Redis.from_url(url)
    best: dict[str, tuple[float, float]] = {}
    for _ in range(rounds):
        for name in SAVERS:
            start, resume = await one_round(name, url, threads, client)
            old = best.get(name, (float("inf"), float("inf")))
            best[name] = (min(old[0], start), min(old[1], resume))
    await client.aclose()
    floor = best["InMemorySaver (floor)"]
    print(f"{threads} threads, best of {rounds} rounds; CPU per thread (this process + Redis)")
    print(f"{'saver':34} {'start ms':>9} {'×floor':>7} {'resume ms':>10} {'×floor':>7}")
    for name, (start, resume) in best.items():
        print(f"{name:34} {start:9.2f} {start / floor[0]:7.2f} {resume:10.2f} {resume / floor[1]:7.2f}")
    count_round_trips()
    await print_round_trips(url)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", nargs="?", help="a Redis with RediSearch and RedisJSON (default: start one)")
    parser.add_argument("--threads", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    with redis_server.running(options.url, appendonly=False) as redis_url:
        asyncio.run(main(redis_url, options.threads, options.rounds))
