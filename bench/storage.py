"""Storage: Redis bytes per run and per approval, and what is left once the retention passed.

    .venv/bin/python bench/storage.py [--runs 2000] [--concurrency 8]

Starts its own Redis (AOF off: memory, not disk, is measured), the runner's
worker on the demo agent (a real LangGraph agent on a scripted model, the
project's checkpointer), and a stand-in for the bot that takes the events
(acknowledges them as the bot's consumer group does). Each run asks for an
email, pauses for approval, is approved, resumes, sends it and finishes:
one run, one approval, one decision. It prints `used_memory` before, after
the runs (bytes per run), the bytes of the approval records alone and of the
checkpoints, and after the janitor has purged everything older than the
retention (it runs with a clock moved past it): that must return to the
baseline, within noise.

Then the same runs against two floors (issue 46), each on the same demo agent through the
same `Runner` calls the worker makes (the same message, the same approval), without the
worker (no approval record, no streams: the saver alone):

* the stock `AsyncRedisSaver` (langgraph-checkpoint-redis) on a Redis of its own: its
  `used_memory` growth per run (its keys and its RediSearch indexes), against all of
  Signoff's growth per run (checkpoints, approval records, streams, markers);
* `InMemorySaver`: the bytes it holds serialized, counted as `len(type) + len(bytes)` of each
  `(type, bytes)` pair its serde made (every checkpoint without its values, every metadata,
  every channel value once per version, every pending write's value), against the memory
  (`MEMORY USAGE`, each key's overhead included) of Signoff's checkpoint keys.

A table gives each kind of key Signoff leaves per run (the ids in its name replaced by
`<id>`), its keys and bytes per run, as `MEMORY USAGE` counts them.

Not a test: it prints figures; bench/README.md quotes a run.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.checkpoint.redis.aio import AsyncRedisSaver  # noqa: E402
from redis.asyncio import Redis  # noqa: E402

from agent_runner.checkpointer import AsyncRedisCheckpointer  # noqa: E402
from agent_runner.retention import Janitor  # noqa: E402
from agent_runner.runner import Runner  # noqa: E402
from agent_runner.worker import RunnerWorker  # noqa: E402
from core.keys import BOTS_GROUP  # noqa: E402
from core.logs import configure_logging  # noqa: E402
from core.producer import start_run  # noqa: E402
from core.protocol import Approve  # noqa: E402
from core.records import RunState  # noqa: E402
from core.store import Store  # noqa: E402
from signoff_demo import redis_server  # noqa: E402
from signoff_demo.agent import build_demo_agent  # noqa: E402


async def used(store: Store) -> int:
    """`used_memory` less the Lua interpreter's heap, which its garbage collector grows and
    shrinks by tens of kB whatever the data (Signoff's scripts run there), and less the
    connections' buffers (`mem_clients_normal`: about 2 kB a connection, and a pool's count of
    connections moves with the load, not with the data)."""
    memory = await store.redis.info("memory")
    lua, clients = int(memory.get("used_memory_vm_eval", 0)), int(memory.get("mem_clients_normal", 0))
    return int(memory["used_memory"]) - lua - clients


async def settled(store: Store) -> int:
    """`used` once Redis has freed what it frees lazily: the search indexes' garbage collector
    (which runs on its own every few seconds) is invoked first, if there are indexes."""
    for _ in range(3):  # a cycle cleans what the one before it left
        for index in await store.redis.execute_command("FT._LIST"):
            await store.redis.execute_command("FT.DEBUG", "GC_FORCEINVOKE", index)
    await store.redis.execute_command("MEMORY", "PURGE")
    await asyncio.sleep(0.5)
    return await used(store)


async def key_bytes(store: Store, pattern: str) -> int:
    total = 0
    async for key in store.redis.scan_iter(pattern, count=1000):
        total += int(await store.redis.memory_usage(key, samples=0) or 0)
    return total


KINDS = {
    "c": "checkpoints (without their values)",
    "b": "channel values, once per version",
    "w": "pending writes",
    "r": "thread registries",
}


async def state_bytes(saver: AsyncRedisCheckpointer, graph: Any, threads: list[str]) -> float:
    """The mean size of a finished run's own state as the saver serializes it: its messages and
    every other value of the graph's state."""
    sizes = []
    for thread_id in threads[:100]:
        state = await graph.aget_state({"configurable": {"thread_id": thread_id}})
        sizes.append(sum(len(saver._dumps(value)) for value in state.values.values()))
    return sum(sizes) / len(sizes)


async def take_events(store: Store, stop: asyncio.Event) -> None:
    """What the bot's consumer group does with events, minus Slack: read and acknowledge."""
    (events,) = [p.events for p in store.keys.partitions]  # one server: one partition
    while not stop.is_set():
        got = await store.redis.xreadgroup(BOTS_GROUP, "bench-bot", {events: ">"}, count=100, block=200)
        for _, entries in got or []:
            if entries:
                await store.redis.xack(events, BOTS_GROUP, *(entry_id for entry_id, _ in entries))


async def until(check: Any, what: str, timeout: float = 1800) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def runs_of(store: Store, runs: int) -> dict[str, str]:
    """`runs` runs, each approved once it pauses; returns the approval ids, once all finished."""
    threads = [
        await start_run(
            store, f'Email u{n}@acme.com "report {n}"', "C0BENCH", "demo", f"bench-{uuid.uuid4().hex[:10]}"
        )
        for n in range(runs)
    ]
    decided: dict[str, str] = {}  # approval id -> its thread

    async def all_decided() -> bool:
        for approval in await store.approvals.pending_in(limit=runs):
            if approval.approval_id not in decided:
                await store.decisions.decide(approval.approval_id, 0, Approve(), "U0ALICE")
                decided[approval.approval_id] = approval.thread_id
        return len(decided) >= runs

    async def all_finished() -> bool:
        return all([await store.runs.state(t) is RunState.FINISHED for t in threads])

    await until(all_decided, "every approval decided")
    await until(all_finished, "every run finished")
    return decided


def kind_of(key: str) -> str:
    """A key's kind: its name with the thread's hash tag and the ids in it replaced."""
    kind = re.sub(r"\{[^}]*\}", "{T}", key)
    kind = re.sub(r"(bench-)?[0-9a-f]{8,}(-[0-9a-f]+)*", "<id>", kind)
    return re.sub(r":-?[0-9]+$", ":<idx>", kind)  # (the stock saver's write keys end in its index)


async def kinds_of(redis: Redis) -> dict[str, tuple[int, int]]:
    """Every key's kind -> (keys, bytes as `MEMORY USAGE` counts them, the key's overhead in)."""
    kinds: dict[str, tuple[int, int]] = {}
    async for raw in redis.scan_iter("*", count=1000):
        key = raw.decode() if isinstance(raw, bytes) else raw
        keys, size = kinds.get(kind_of(key), (0, 0))
        kinds[kind_of(key)] = (keys + 1, size + int(await redis.memory_usage(key, samples=0) or 0))
    return kinds


async def same_runs(saver: Any, runs: int) -> None:
    """`runs` runs of the demo agent on `saver`, as the worker makes them (`Runner.start` with
    the command's message id, then `Runner.resume` with the approval), one at a time."""
    runner = Runner(build_demo_agent(saver), "demo")
    for n in range(runs):
        thread_id = f"bench-{uuid.uuid4().hex[:10]}"
        text = f'Email u{n}@acme.com "report {n}"'
        paused = await runner.start(thread_id, text, message_id=f"signoff-{int(time.time() * 1000)}-{n}")
        (request,) = paused.pending
        done = await runner.resume(thread_id, {request.interrupt_id: {"decisions": [{"type": "approve"}]}})
        assert done.state is RunState.FINISHED, done


def in_memory_bytes(saver: InMemorySaver) -> dict[str, int]:
    """What `InMemorySaver` holds serialized, by part: `len(type) + len(bytes)` of each pair."""
    found = {"checkpoints": 0, "metadata": 0, "values": 0, "writes": 0}
    for spaces in saver.storage.values():
        for stored in spaces.values():
            for checkpoint, metadata, _parent in stored.values():
                found["checkpoints"] += len(checkpoint[0]) + len(checkpoint[1])
                found["metadata"] += len(metadata[0]) + len(metadata[1])
    for kind, data in saver.blobs.values():
        found["values"] += len(kind) + len(data)
    for writes in saver.writes.values():
        for _task_id, _channel, (kind, data), _path in writes.values():
            found["writes"] += len(kind) + len(data)
    return found


async def stock_bytes(runs: int) -> tuple[float, dict[str, tuple[int, int]]]:
    """The stock saver's `used_memory` growth per run, on a Redis of its own (after 20 warm-up
    runs: its indexes made, its scripts loaded), and its keys by kind."""
    with redis_server.running(None, appendonly=False) as url:
        client = Redis.from_url(url)
        store = Store.from_url(url, "stock")
        async with AsyncRedisSaver.from_conn_string(url) as saver:
            await saver.asetup()
            await same_runs(saver, 20)
            baseline = await settled(store)
            await same_runs(saver, runs)
            after = await settled(store)
            warm = await kinds_of(client)
        await client.aclose()
        await store.close()
    return (after - baseline) / runs, warm


async def floors(runs: int) -> tuple[dict[str, int], float, dict[str, tuple[int, int]]]:
    """The floors' figures for `runs` runs: `InMemorySaver`'s serialized bytes (in all), the
    stock saver's growth per run and its keys by kind (20 warm-up runs included)."""
    memory = InMemorySaver()
    await same_runs(memory, runs)
    stock, stock_kinds = await stock_bytes(runs)
    return in_memory_bytes(memory), stock, stock_kinds


def print_floors(
    runs: int, per_run: float, kinds: dict[str, tuple[int, int]], floors_found: tuple[Any, ...]
) -> None:
    """Signoff's keys by kind, then the two comparisons of issue 46."""
    in_memory, stock, stock_kinds = floors_found
    print(f"\nSignoff's keys after the {runs} runs, by kind (MEMORY USAGE, per run):")
    print(f"  {'kind':58} {'keys/run':>8} {'bytes/run':>10}")
    for kind, (keys, size) in sorted(kinds.items(), key=lambda item: -item[1][1]):
        print(f"  {kind:58} {keys / runs:8.2f} {size / runs:10.0f}")
    stock_runs = runs + 20
    print(f"the stock AsyncRedisSaver's keys after {stock_runs} runs, by kind (per run):")
    for kind, (keys, size) in sorted(stock_kinds.items(), key=lambda item: -item[1][1]):
        print(f"  {kind:58} {keys / stock_runs:8.2f} {size / stock_runs:10.0f}")
    print(
        f"bytes per run: Signoff, all its records {per_run / 1e3:.2f} kB; the stock saver alone "
        f"{stock / 1e3:.2f} kB (used_memory growth, its indexes in): {per_run / stock:.2f}x"
    )
    ours = sum(size for kind, (_, size) in kinds.items() if kind.startswith("checkpoints:"))
    floor = sum(in_memory.values())
    parts = ", ".join(f"{part} {size / runs:.0f}" for part, size in in_memory.items())
    print(
        f"checkpoints per run: Signoff {ours / runs / 1e3:.2f} kB (its checkpoint keys); InMemorySaver "
        f"serialized {floor / runs / 1e3:.2f} kB ({parts} B): {ours / floor:.2f}x"
    )


async def bench(url: str, runs: int, concurrency: int) -> None:
    store = Store.from_url(url, "bench")
    await store.layout.ensure_groups()
    stop = asyncio.Event()
    async with AsyncRedisCheckpointer.from_url(url) as saver:
        worker = RunnerWorker(
            store,
            {"demo": Runner(graph := build_demo_agent(saver), "demo")},
            consumer="bench-runner",
            concurrency=concurrency,
            done_ttl_s=2,  # as the runner sets it: the retention (2 s here, the clock is not moved for TTLs)
        )
        tasks = [asyncio.create_task(worker.serve(stop)), asyncio.create_task(take_events(store, stop))]
        janitor = Janitor(store, saver, retention_s=60, audit_retention_s=60, clock=lambda: time.time() + 120)

        async def purge() -> float:
            began = time.monotonic()
            while (await janitor.sweep()).threads:
                pass
            return time.monotonic() - began

        # Warm up (scripts loaded, indexes and pools grown), purge, then measure from there.
        await runs_of(store, min(50, runs))
        await purge()
        await asyncio.sleep(2.5)  # the command-done markers' TTL (the retention) passes too
        baseline = await settled(store)

        started = time.monotonic()
        decided = await runs_of(store, runs)
        took = time.monotonic() - started
        after = await settled(store)
        approvals = sum([await key_bytes(store, f"{store.keys.approval(a)}*") for a in decided])
        approvals += sum(
            [await key_bytes(store, store.keys.command_done(t, f"resume-{a}")) for a, t in decided.items()]
        )
        checkpoints = await key_bytes(store, "checkpoint*")
        every_kind = await kinds_of(store.redis)
        kinds = {kind: await key_bytes(store, f"checkpoints:{{*}}:{kind}*") for kind in ("c", "b", "w", "r")}
        state = await state_bytes(saver, graph, list(decided.values()))
        streams = sum(
            [
                int(await store.redis.memory_usage(k, samples=0) or 0)
                for p in store.keys.partitions
                for k in (p.commands, p.events, p.audit)
            ]
        )
        purged_in = await purge()
        await asyncio.sleep(2.5)
        left = await settled(store)
        # A second cycle as large: what it leaves is what every cycle leaves (the first also
        # grows what Redis keeps at its peak's size, once).
        await runs_of(store, runs)
        await purge()
        await asyncio.sleep(2.5)
        again = await settled(store)
        stop.set()
        await asyncio.gather(*tasks)
        leftover = [k async for k in store.redis.scan_iter("*")]
        records = {}
        for index in await store.redis.execute_command("FT._LIST"):
            info = await store.redis.execute_command("FT.INFO", index)
            records[index] = (info["num_docs"], info["num_records"])

    per_run = (after - baseline) / runs
    print(f"runs: {runs} (each: one approval, one decision, the tool, the answer) in {took:.1f} s")
    print(f"used_memory baseline      {baseline / 1e6:9.2f} MB")
    print(f"after the runs            {after / 1e6:9.2f} MB   ({per_run / 1e3:.1f} kB per run)")
    print(f"  approval records        {approvals / runs / 1e3:9.2f} kB per approval")
    print(f"  checkpoints             {checkpoints / runs / 1e3:9.2f} kB per run")
    for kind, what in KINDS.items():
        print(f"    {what:38} {kinds[kind] / runs / 1e3:6.2f} kB per run")
    print(
        f"  the run's own state (its serialized messages and values) {state / 1e3:.2f} kB: "
        f"growth per run {per_run / state:.2f}x, checkpoints {checkpoints / runs / state:.2f}x"
    )
    print(f"  streams (commands, events, audit) {streams / runs / 1e3:.2f} kB per run")
    print(
        f"retention passed, purged  {left / 1e6:9.2f} MB   ({(left - baseline) / 1e3:+.1f} kB from the baseline)"
    )
    print(
        f"a second {runs} runs, purged {again / 1e6:9.2f} MB   ({(again - left) / 1e3:+.1f} kB from the first purge, "
        f"{(again - left) / left * 100:+.2f}%)"
    )
    print(f"  purge took {purged_in:.1f} s; keys left: {len(leftover)} ({', '.join(sorted(leftover))})")
    for index, (docs, kept) in records.items():
        print(f"  search index {index}: {docs} documents, {kept} index records kept")
    await store.close()
    print_floors(runs, per_run, every_kind, await floors(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    configure_logging(level="WARNING")
    with redis_server.running(None, appendonly=False) as url:
        asyncio.run(bench(url, args.runs, args.concurrency))


if __name__ == "__main__":
    main()
