"""What encrypting checkpoints at rest costs (SIGNOFF_CHECKPOINT_KEY), in one run.

    .venv/bin/python bench/checkpoint_encryption.py [--threads 300] [--rounds 5] [REDIS_URL]

The project's saver (`AsyncRedisCheckpointer`) without a key, with one (AES-256-GCM through
LangGraph's `EncryptedSerializer`, the cipher `cryptography`'s AESGCM, as shipped), and with one
whose cipher is LangGraph's own pycryptodome one (`from_pycryptodome_aes(mode=AES.MODE_GCM)`,
which writes the same bytes: the choice `agent_runner/checkpointer/encryption.py` made), in turn,
`--rounds` times; the best round of each is kept (the host is shared). Two measurements:

* put / get: per thread, `aput` of a checkpoint whose values hold a conversation (20 messages,
  about 8 kB), `aput_writes` of two writes, then `aget_tuple` of it: wall-clock microseconds
  per call, and the CPU of this process plus the Redis server's (`INFO cpu`) per thread;
* a run: the graph of `bench/resume.py` (one gated tool) started, pausing, then approved, per
  thread: CPU of this process plus Redis's.

Printed with the ratios to plain. Starts its own Redis unless a URL is given (its keys are left
there: use a scratch one).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from Crypto.Cipher import AES  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer  # noqa: E402
from redis.asyncio import Redis  # noqa: E402

from agent_runner.checkpointer import AsyncRedisCheckpointer, CheckpointKeys  # noqa: E402
from bench.resume import APPROVE, agent, measured  # noqa: E402
from signoff_demo import redis_server  # noqa: E402

KINDS = ("plain", "encrypted", "pycryptodome")


def conversation() -> list[Any]:
    """20 messages, about 8 kB once serialized: a run some turns in."""
    said = "Please refund order 4411 for the damaged parcel; the customer wrote twice. " * 5
    return [
        (HumanMessage if n % 2 == 0 else AIMessage)(content=f"{n}: {said}", id=uuid.uuid4().hex)
        for n in range(20)
    ]


async def put_get(saver: AsyncRedisCheckpointer, threads: int, client: Redis) -> tuple[float, float]:
    """(wall-clock µs per call, CPU ms per thread) of put + put_writes + get_tuple."""
    messages = conversation()
    calls = 0

    async def work() -> None:
        nonlocal calls
        for _ in range(threads):
            config = {"configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}}
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"messages": messages, "task": "refund 4411"}
            versions = {channel: saver.get_next_version(None) for channel in checkpoint["channel_values"]}
            checkpoint["channel_versions"] = versions
            saved = await saver.aput(config, checkpoint, {"source": "loop", "step": 1}, versions)
            await saver.aput_writes(saved, [("messages", messages[-1:]), ("task", "done")], "task-1")
            found = await saver.aget_tuple(saved)
            assert found is not None and len(found.checkpoint["channel_values"]["messages"]) == 20
            calls += 3

    started = time.perf_counter()
    cpu = await measured(client, work)
    return (time.perf_counter() - started) * 1e6 / calls, cpu * 1000 / threads


async def a_run(saver: AsyncRedisCheckpointer, threads: int, client: Redis) -> float:
    """CPU ms per thread of a run that pauses and is approved."""
    graph = agent(saver)
    configs = [{"configurable": {"thread_id": uuid.uuid4().hex}} for _ in range(threads)]

    async def run() -> None:
        for config in configs:
            await graph.ainvoke({"messages": [("user", "email finance")]}, config)
            done = await graph.ainvoke(APPROVE, config)
            assert done["messages"][-1].content == "Sent."

    return await measured(client, run) * 1000 / threads


async def main(url: str, threads: int, rounds: int) -> None:
    client = Redis.from_url(url)
    key = os.urandom(32)
    langgraphs = CheckpointKeys(key)
    langgraphs._ciphers = [EncryptedSerializer.from_pycryptodome_aes(key=key, mode=AES.MODE_GCM).cipher]
    keys = {"plain": None, "encrypted": CheckpointKeys(key), "pycryptodome": langgraphs}
    best: dict[str, list[float]] = {kind: [float("inf")] * 3 for kind in KINDS}
    for _ in range(rounds):
        for kind in KINDS:
            async with AsyncRedisCheckpointer.from_url(url, keys=keys[kind]) as saver:
                wall, cpu = await put_get(saver, threads, client)
                run = await a_run(saver, threads // 3 or 1, client)
            best[kind] = [min(old, new) for old, new in zip(best[kind], (wall, cpu, run), strict=True)]
    await client.aclose()
    print(f"{threads} threads (runs: {threads // 3 or 1}), best of {rounds} rounds")
    print(f"{'':30} {'plain':>8} {'encrypted':>10} {'ratio':>6} {'pycryptodome':>13} {'ratio':>6}")
    rows = ("put/get, µs per call (wall)", "put/get, CPU ms per thread", "a run, CPU ms per thread")
    for n, name in enumerate(rows):
        plain, shipped, slow = (best[kind][n] for kind in KINDS)
        print(
            f"{name:30} {plain:8.2f} {shipped:10.2f} {shipped / plain:6.2f} {slow:13.2f} {slow / plain:6.2f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", nargs="?", help="a Redis (default: start one)")
    parser.add_argument("--threads", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    with redis_server.running(options.url, appendonly=False) as redis_url:
        asyncio.run(main(urlsplit(redis_url)._replace(path="/2").geturl(), options.threads, options.rounds))
