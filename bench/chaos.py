"""Chaos: two bots and two runners under a fault mix for a few minutes; exactly once, counted.

    .venv/bin/python bench/chaos.py [--seconds 180] [--every 1.0] [--seed 7] [--cluster]

Starts its own Redis (AOF on; with `--cluster` a local Redis Cluster of three
masters), the Slack stand-in (rate limits on), two `signoff bot` and two
`signoff runner` processes on the demo agent, whose refund API answers
`--tool-seconds` after the refund went through (long tools). Every `--every`
seconds it asks for a refund; each card is approved by a few people at once,
on both bots (double clicks included). Meanwhile, at random, it: kills a
runner (-9) and starts it again, stops a runner with SIGTERM (a rolling
deploy: it finishes the tools it started) and starts it again once it exited,
kills a bot (-9) and starts it again, restarts Redis (every master of the
cluster: kill -9, then each again), takes Redis away for 3-20 s (kill -9 of the
server, or of one master of the cluster, back from its AOF: a tool that ends
meanwhile must not run again), pauses Redis for 2 s, makes Slack answer 500 or
429, and makes Slack slow to answer a card post. `--faults redis` keeps only
Redis's and Slack's faults (no process is killed: every approved tool must run
exactly once, not merely refund once). Then it stops the faults, waits for the
work to drain, and counts:

* executions per approved action: refunds the payment API made per approved
  run (the demo refund tool passes its idempotency key; must be exactly 1),
  and tool executions per approved run (at least 1: a crash between the tool
  and its checkpoint re-runs it, which is what the key is for);
* lost approvals: approved runs with no answer in their thread (must be 0);
* cards per approval (must be 1) and answers per run (must be 1);
* click -> ack latency p50 / p99 as Slack saw it, and clicks not acked in 3 s.

Not a test: it prints figures; bench/README.md quotes a run.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from core.outages import is_outage  # noqa: E402
from core.producer import start_run  # noqa: E402
from core.store import Store  # noqa: E402
from signoff_demo import payments as demo_payments  # noqa: E402
from signoff_demo import redis_server  # noqa: E402
from signoff_demo.redis_server import free_port  # noqa: E402

T = TypeVar("T")
from slack_standin import Message, SlackStandin  # noqa: E402

SECRET = "chaos-secret"
# Slack lets a bot post about once a second per channel, and a run posts four messages
# (root, status, card, answer): spread the runs over channels, as a team's agents would be.
CHANNELS = [f"C0CHAOS{n}" for n in range(8)]
APPROVERS = ["U0ALICE", "U0BOB", "U0CAROL"]


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class Cluster:
    """Redis, the stand-in and the four Signoff processes, each restartable."""

    def __init__(
        self, workdir: Path, on_cluster: bool = False, tool_seconds: float = 3.0, lease_ms: int = 3_000
    ):
        self.workdir = workdir
        self.tool_seconds = tool_seconds
        self.lease_ms = lease_ms
        self.redis: redis_server.LocalRedis | redis_server.LocalCluster
        if on_cluster:
            self.redis = redis_server.start_cluster(3, appendonly=True, data_dir=workdir / "redis-cluster")
        else:
            self.redis = redis_server.start(data_dir=workdir / "redis", appendonly=True)
        self.prefix = "chaos"
        self.payments = workdir / "payments.jsonl"
        self.bot_ports = [free_port(), free_port()]
        self.standin = SlackStandin(SECRET, bot_url=f"http://127.0.0.1:{self.bot_ports[0]}/slack/events")
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.store = Store.from_url(self.redis.url, self.prefix)

    def env(self, **extra: Any) -> dict[str, str]:
        return {
            **os.environ,
            "REDIS_URL": self.redis.url,
            "SIGNOFF_PREFIX": self.prefix,
            "SLACK_BOT_TOKEN": self.standin.token,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": self.standin.base_url,
            "SIGNOFF_GRAPH": "signoff_demo.agent:build_demo_agent",
            # One tap approves a refund here (a person would confirm it in a dialog first: a
            # different request, not what this bench clicks).
            "SIGNOFF_DESTRUCTIVE_TOOLS": "none",
            "SIGNOFF_GRAPHS_FILE": os.devnull,
            "SIGNOFF_CHANNEL": CHANNELS[0],
            "SIGNOFF_LEASE_MS": str(self.lease_ms),
            "SIGNOFF_DEMO_PAYMENTS": str(self.payments),
            "SIGNOFF_DEMO_PAYMENTS_LATENCY_S": str(self.tool_seconds),
            "SIGNOFF_STOP_GRACE": "30s",
            "LOG_FORMAT": "json",
            "LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
            **{k: str(v) for k, v in extra.items()},
        }

    def start(self, name: str) -> None:
        kind, _, number = name.partition("-")
        extra: dict[str, Any] = {"SIGNOFF_CONSUMER": name}
        if kind == "bot":
            extra["PORT"] = self.bot_ports[int(number)]
        log = (self.workdir / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", "signoff", kind],
            cwd=ROOT,
            env=self.env(**extra),
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def kill(self, name: str) -> None:
        process = self.processes[name]
        process.send_signal(signal.SIGKILL)
        process.wait(10)

    def terminate(self, name: str) -> None:
        """SIGTERM, as a rolling deploy does; returns once the process exited by itself."""
        process = self.processes[name]
        process.send_signal(signal.SIGTERM)
        process.wait(90)

    def restart_redis(self) -> None:
        if isinstance(self.redis, redis_server.LocalCluster):
            self.redis.restart(down_s=1.5)  # every master: kill -9, then each again
            return
        port, data_dir = self.redis.port, self.redis.data_dir
        self.redis.stop()
        time.sleep(1.5)
        self.redis = redis_server.start(port=port, data_dir=data_dir, appendonly=True)

    def redis_away(self, seconds: float, rng: random.Random) -> None:
        """kill -9 the server (a cluster: one master, at random), start it again from its AOF
        `seconds` later."""
        if isinstance(self.redis, redis_server.LocalCluster):
            self.redis.restart([rng.choice(self.redis.masters)], down_s=seconds)
            return
        port, data_dir = self.redis.port, self.redis.data_dir
        self.redis.process.kill()
        self.redis.process.wait(10)
        time.sleep(seconds)
        self.redis = redis_server.start(port=port, data_dir=data_dir, appendonly=True)

    def pause_redis(self, ms: int) -> None:
        servers = self.redis.masters if isinstance(self.redis, redis_server.LocalCluster) else [self.redis]
        for server in servers:
            with redis.Redis(host="127.0.0.1", port=server.port) as client:
                client.execute_command("CLIENT", "PAUSE", ms, "ALL")

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
        self.redis.stop()


PROCESS_FAULTS = ["kill runner", "stop runner (SIGTERM)", "kill bot"]
REDIS_FAULTS = [
    "restart redis",
    "redis away 3-20 s",
    "pause redis",
    "slack 500",
    "slack 429",
    "slow card post",
]


async def faults(
    cluster: Cluster, stop: asyncio.Event, rng: random.Random, log: list[str], kinds: list[str]
) -> None:
    while not stop.is_set():
        await asyncio.sleep(rng.uniform(6, 14))
        if stop.is_set():
            return
        fault = rng.choice(kinds)
        log.append(fault)
        if fault == "kill runner":
            name = rng.choice(["runner-0", "runner-1"])
            cluster.kill(name)
            await asyncio.sleep(rng.uniform(0.5, 3))
            cluster.start(name)
        elif fault == "stop runner (SIGTERM)":
            name = rng.choice(["runner-0", "runner-1"])
            await asyncio.to_thread(cluster.terminate, name)  # it finishes the tools it started
            cluster.start(name)
        elif fault == "kill bot":
            name = rng.choice(["bot-0", "bot-1"])
            cluster.kill(name)
            await asyncio.sleep(rng.uniform(0.5, 3))
            cluster.start(name)
        elif fault == "restart redis":
            await asyncio.to_thread(cluster.restart_redis)
        elif fault == "redis away 3-20 s":
            await asyncio.to_thread(cluster.redis_away, rng.uniform(3, 20), rng)
        elif fault == "pause redis":
            try:
                await asyncio.to_thread(cluster.pause_redis, 2000)
            except Exception as exc:  # Redis may be restarting
                log.append(f"(pause failed: {type(exc).__name__})")
        elif fault == "slack 500":
            cluster.standin.fail_next("chat.postMessage", 500, count=rng.randint(1, 4))
        elif fault == "slack 429":
            cluster.standin.fail_next(
                rng.choice(["chat.update", "chat.postMessage", "views.open"]),
                429,
                count=rng.randint(1, 5),
                retry_after=rng.randint(1, 4),
            )
        elif fault == "slow card post":
            cluster.standin.delay_next(
                "chat.postMessage", rng.uniform(2, 8), kind="approval", before=rng.random() < 0.5
            )


async def workload(
    cluster: Cluster, stop: asyncio.Event, rng: random.Random, every: float, runs: dict[str, dict[str, Any]]
) -> None:
    number = 0
    while not stop.is_set():
        number += 1
        order = f"{number:05d}"
        try:
            thread_id = await start_run(
                cluster.store,
                f"Refund order {order} for 5000",
                CHANNELS[number % len(CHANNELS)],
                "demo",
                requester="U0RILEY",
            )
            runs[thread_id] = {"order": order, "approved": False}
        except Exception:  # Redis down: this request is not made (a person would see an error)
            pass
        await asyncio.sleep(every)


async def approver(
    cluster: Cluster,
    stop: asyncio.Event,
    rng: random.Random,
    runs: dict[str, dict[str, Any]],
    acks: list[tuple[int, float]],
) -> None:
    clicked: set[str] = set()
    while not stop.is_set():
        for message in list(cluster.standin.messages):
            if message.kind != "approval" or message.ts in clicked or not message.blocks:
                continue
            thread_id = (message.metadata or {}).get("event_payload", {}).get("thread_id")
            if thread_id not in runs:
                continue
            clicked.add(message.ts)
            asyncio.create_task(click(cluster, rng, message, thread_id, runs, acks))
        await asyncio.sleep(0.2)


async def click(
    cluster: Cluster,
    rng: random.Random,
    card: Message,
    thread_id: str,
    runs: dict[str, dict[str, Any]],
    acks: list[tuple[int, float]],
) -> None:
    """A few people approve at once, some twice, on either bot; as people do, they click
    again when Slack showed them an error (no ack: the bot they reached was down)."""
    for _attempt in range(10):
        people = rng.sample(APPROVERS, rng.randint(1, 3))
        clicks = []
        for person in people:
            for _ in range(rng.choice([1, 1, 2])):  # some double clicks
                port = rng.choice(cluster.bot_ports)
                clicks.append(
                    cluster.standin.click(
                        person, card, "approve:0", bot_url=f"http://127.0.0.1:{port}/slack/events"
                    )
                )
        answered = [
            i
            for i in await asyncio.gather(*clicks, return_exceptions=True)
            if not isinstance(i, BaseException)
        ]
        acks.extend((i.status, i.seconds) for i in answered)
        if any(i.acked for i in answered):
            return
        await asyncio.sleep(3)


async def again(read: Callable[[], Awaitable[T]], tries: int = 60) -> T:
    """`read()`, done again when the bench's own client meets a connection the masters'
    restarts left torn (redis-py's cluster client: an outage, as `is_outage` says)."""
    for attempt in range(tries):
        try:
            return await read()
        except Exception as exc:
            if attempt == tries - 1 or not is_outage(exc):
                raise
            await asyncio.sleep(1.0)
    raise AssertionError("unreachable")


async def count(cluster: Cluster, runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    decided = set()
    for entry in await again(cluster.store.audit.entries):
        decided.add(entry["thread_id"])
    refunds = collections.Counter()
    executions = collections.Counter()
    for call in demo_payments.ledger(cluster.payments):
        executions[call["order_id"]] += 1
        refunds[call["order_id"]] += call["effect"] == "refunded"
    approved = [t for t in runs if t in decided]
    answers, cards = {}, {}
    for thread_id in runs:
        run = await again(functools.partial(cluster.store.runs.get, thread_id))
        thread = cluster.standin.thread(run.channel, run.thread_ts) if run and run.thread_ts else []
        answers[thread_id] = sum(m.kind == "answer" for m in thread)
        cards[thread_id] = sum(m.kind == "approval" for m in thread)
    return {
        "runs asked": len(runs),
        "approved": len(approved),
        "refunds per approved action": collections.Counter(refunds[runs[t]["order"]] for t in approved),
        "tool executions per approved action": collections.Counter(
            executions[runs[t]["order"]] for t in approved
        ),
        "lost approvals (approved, no answer)": sum(answers[t] == 0 for t in approved),
        "answers per approved run": collections.Counter(answers[t] for t in approved),
        "cards per run with a card": collections.Counter(c for c in cards.values() if c),
        "runs without a card": sum(cards[t] == 0 for t in runs),
    }


async def main(
    seconds: float,
    every: float,
    seed: int,
    drain: float,
    keep: bool,
    on_cluster: bool,
    tool_seconds: float,
    lease_ms: int = 3_000,
    only_redis: bool = False,
) -> None:
    rng = random.Random(seed)
    workdir = Path(tempfile.mkdtemp(prefix="signoff-chaos-"))
    kinds = REDIS_FAULTS if only_redis else PROCESS_FAULTS + REDIS_FAULTS
    try:
        cluster = Cluster(workdir, on_cluster, tool_seconds, lease_ms)
        await cluster.standin.start()
        for name in ("bot-0", "bot-1", "runner-0", "runner-1"):
            cluster.start(name)
        await asyncio.sleep(6)  # imports
        runs: dict[str, dict[str, Any]] = {}
        acks: list[tuple[int, float]] = []
        fault_log: list[str] = []
        stop, stop_faults = asyncio.Event(), asyncio.Event()
        tasks = [
            asyncio.create_task(workload(cluster, stop_faults, rng, every, runs)),
            asyncio.create_task(faults(cluster, stop_faults, rng, fault_log, kinds)),
            asyncio.create_task(approver(cluster, stop, rng, runs, acks)),
        ]
        started = time.monotonic()
        try:
            await asyncio.sleep(seconds)
            stop_faults.set()
            await tasks[1]  # (a fault under way ends first: Redis away for up to 20 s comes back)
            # Drain: every approved run answered, or the drain time is up.
            deadline = time.monotonic() + drain
            while time.monotonic() < deadline:
                figures = await count(cluster, runs)
                if (
                    figures["runs without a card"] == 0
                    and figures["lost approvals (approved, no answer)"] == 0
                    and figures["approved"] == len(runs)
                ):
                    break
                await asyncio.sleep(2)
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            figures = await count(cluster, runs)
        finally:
            cluster.stop()
            await cluster.standin.stop()
        latencies = [s for status, s in acks if status == 200]
        where = "a Redis Cluster of 3 masters" if on_cluster else "one Redis"
        print(
            f"chaos on {where}: {seconds:.0f} s of faults, {time.monotonic() - started:.0f} s in all, "
            f"seed {seed}, tools {tool_seconds:g} s, lease {lease_ms / 1000:g} s, "
            f"faults: {'Redis and Slack only' if only_redis else 'all'}"
        )
        print(f"faults: {dict(collections.Counter(f for f in fault_log if not f.startswith('(')))}")
        for key, value in figures.items():
            print(f"  {key}: {dict(value) if isinstance(value, collections.Counter) else value}")
        late = sum(status == 200 and s > 3 for status, s in acks)
        unanswered = sum(status != 200 for status, _ in acks)
        print(
            f"  clicks: {len(acks)}, acked later than 3 s: {late}, not answered (the bot reached was down "
            f"or starting): {unanswered}"
        )
        print(
            f"  click -> ack p50 {percentile(latencies, 0.5) * 1000:.0f} ms, "
            f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms, max {max(latencies, default=0) * 1000:.0f} ms"
        )
    finally:
        if keep:
            print(f"logs and Redis data kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--every", type=float, default=1.0, help="seconds between new runs")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--drain", type=float, default=180, help="seconds allowed to finish after the faults")
    parser.add_argument("--keep", action="store_true", help="keep the processes' logs and Redis data")
    parser.add_argument("--cluster", action="store_true", help="on a local Redis Cluster of three masters")
    parser.add_argument(
        "--tool-seconds", type=float, default=3.0, help="how long the refund API answers after refunding"
    )
    parser.add_argument("--lease-ms", type=int, default=3_000, help="SIGNOFF_LEASE_MS of every process")
    parser.add_argument(
        "--faults",
        choices=["all", "redis"],
        default="all",
        help="redis: only Redis's and Slack's faults (no process killed): every tool must run once",
    )
    args = parser.parse_args()
    asyncio.run(
        main(
            args.seconds,
            args.every,
            args.seed,
            args.drain,
            args.keep,
            args.cluster,
            args.tool_seconds,
            args.lease_ms,
            args.faults == "redis",
        )
    )
