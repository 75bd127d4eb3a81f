"""Signoff under load: pending approvals clicked at a steady rate over two bots and two runners,
on one Redis and on a Redis Cluster.

    .venv/bin/python bench/load.py [--approvals 1000] [--rate 300] [--layouts node,cluster]
                                   [--node-url redis://…] [--cluster-url redis+cluster://…]

For each layout (`node`: a local redis-server; `cluster`: a local three-master
Redis Cluster; both with RedisJSON + RediSearch, or the server a URL names) it
starts the Slack stand-in (Slack's rate limits on), two `signoff bot` and two
`signoff runner` processes and the bare Bolt app of bench/bare_bolt.py. It
starts `--approvals` runs of bench/load_graph.py's agent, whose one tool
(`deploy`) needs approval and writes every execution to a ledger, spread over
`--channels` channels (Slack takes about one post a second per channel), waits
until every card is posted, then clicks Approve on every card at `--rate`
clicks a second, open loop (a click every 1/rate s, answered or not),
alternating between the two bots. The bare app gets the same signed payloads
at the same rate just before, in the same run (as bench/click_ack.py does). It
then waits until every run has finished and no command is left for the
runners, and counts:

* click -> ack latency p50 / p99, Signoff's and the bare app's, and the ratio;
  clicks acked within Slack's 3 s;
* decision -> tool start p50 / p99: the decision's time in the audit (the bot's
  clock when it recorded the click, before the ack) to the time the tool
  wrote when it began (the runner's clock; one host, one clock);
* executions per approved action (must be exactly 1 for every one);
* Redis memory per pending approval: `used_memory` summed over every master,
  with every approval pending, minus the same before the runs, divided by the
  approvals (everything a pending run holds: checkpoints and their search
  index entries, the run and approval records, stream entries, Slack state);
* what went wrong meanwhile: 429s the stand-in answered, dead letters, warning
  and error lines in the processes' logs, ephemeral messages people were sent;
* and, to read the latencies by: the p50 of each tenth of the clicks (a queue
  building up, or not), the CPU each process spent per click and per approval
  on this host (the stand-in and the clicks included), cards still showing
  Approve at the end (card refreshes wait their turn at chat.update's rate).

It prints a Markdown table for bench/README.md and the raw figures. Not a test: no
thresholds. The exit code is 1 only when something broke (a card missing, an
approval whose tool did not run exactly once). Every process and Redis it
started is stopped on the way out (Ctrl-C and SIGTERM included). With a URL it
starts no Redis, removes its own keys (its SIGNOFF_PREFIX) and its threads'
checkpoints and nothing else (the checkpoint search indexes, which any Signoff
on that Redis shares, stay); its memory figures then include whatever else that
Redis did meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.click_ack import cards_of, percentile, wait_ready  # noqa: E402
from bench.load_graph import LEDGER, read_ledger  # noqa: E402
from core import connections  # noqa: E402
from core.keys import RUNNERS_GROUP  # noqa: E402
from core.producer import start_run  # noqa: E402
from core.records import RunState  # noqa: E402
from core.store import Store  # noqa: E402
from signoff_demo import redis_server  # noqa: E402
from slack_standin import Message, SlackStandin  # noqa: E402
from slack_standin.models import ACK_LIMIT_S  # noqa: E402

SECRET = "load-secret"
GRAPH = "bench.load_graph:build_load_agent"
GRAPH_NAME = "load"
EVERY_S = 5.0  # a progress line this often


@dataclass
class Click:
    """One signed click as Slack saw it: how late it went, and its answer."""

    lag: float  # how late the sender sent it (this process's own delay)
    status: int
    seconds: float


@dataclass
class Deployment:
    """The stand-in, two bots, two runners and the bare app on one Redis; their logs in `workdir`."""

    url: str
    workdir: Path
    prefix: str
    standin: SlackStandin = field(default_factory=lambda: SlackStandin(SECRET))
    bot_ports: list[int] = field(default_factory=lambda: [redis_server.free_port() for _ in range(2)])
    runner_ports: list[int] = field(default_factory=lambda: [redis_server.free_port() for _ in range(2)])
    bare_port: int = field(default_factory=redis_server.free_port)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    redis_pids: list[int] = field(default_factory=list)  # the servers this bench started

    @property
    def ledger(self) -> Path:
        return self.workdir / "executions.jsonl"

    def bot_url(self, n: int) -> str:
        return f"http://127.0.0.1:{self.bot_ports[n % 2]}/slack/events"

    @property
    def bare_url(self) -> str:
        return f"http://127.0.0.1:{self.bare_port}/slack/events"

    def env(self, **extra: Any) -> dict[str, str]:
        return {
            **os.environ,
            "REDIS_URL": self.url,
            "SIGNOFF_PREFIX": self.prefix,
            "SLACK_BOT_TOKEN": self.standin.token,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": self.standin.base_url,
            "SIGNOFF_GRAPH": GRAPH,
            "SIGNOFF_GRAPHS_FILE": os.devnull,
            LEDGER: str(self.ledger),
            "LOG_FORMAT": "json",
            "LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
            **{k: str(v) for k, v in extra.items()},
        }

    def spawn(self, name: str, command: list[str], **extra: Any) -> None:
        with (self.workdir / f"{name}.log").open("ab") as log:
            self.processes[name] = subprocess.Popen(
                command, cwd=ROOT, env=self.env(**extra), stdout=log, stderr=subprocess.STDOUT
            )

    async def start(self) -> None:
        await self.standin.start()
        signoff = [sys.executable, "-m", "signoff"]
        for n in range(2):
            self.spawn(f"bot-{n}", [*signoff, "bot"], SIGNOFF_CONSUMER=f"bot-{n}", PORT=self.bot_ports[n])
            self.spawn(
                f"runner-{n}",
                [*signoff, "runner"],
                SIGNOFF_CONSUMER=f"runner-{n}",
                SIGNOFF_RUNNER_PORT=self.runner_ports[n],
            )
        self.spawn("bare", [sys.executable, str(ROOT / "bench" / "bare_bolt.py")], PORT=self.bare_port)
        ready = asyncio.gather(
            *(wait_ready(port) for port in (*self.bot_ports, *self.runner_ports)),
            wait_ready(self.bare_port, "slack/events"),
        )
        while not ready.done():  # a process that dies while starting says so at once
            await asyncio.wait([ready], timeout=0.5)
            if self.exited() and not ready.done():
                ready.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await ready
                name, code = next(iter(self.exited().items()))
                raise RuntimeError(f"{name} exited with code {code} while starting: {self.log_tail(name)}")
        await ready

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time (user + system) each process used so far, this one's included (Linux /proc)."""
        used = {name: _cpu_of(p.pid) for name, p in self.processes.items()}
        used.update({f"redis-{n}": _cpu_of(pid) for n, pid in enumerate(self.redis_pids)})
        used["bench (stand-in, clicks)"] = time.process_time()
        used["other processes on this host"] = _host_busy() - sum(used.values())
        return used

    def exited(self) -> dict[str, int]:
        """Processes that stopped on their own, and their exit codes."""
        return {name: p.returncode for name, p in self.processes.items() if p.poll() is not None}

    async def stop(self) -> dict[str, float]:
        """SIGTERM to every process (SIGKILL after 30 s); how long each took to exit."""
        asked = time.monotonic()
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()

        async def gone(process: subprocess.Popen[bytes]) -> float:
            try:
                await asyncio.to_thread(process.wait, 30)
            except subprocess.TimeoutExpired:
                process.kill()
                await asyncio.to_thread(process.wait)
            return round(time.monotonic() - asked, 1)

        waited = await asyncio.gather(*(gone(p) for p in self.processes.values()))
        await self.standin.stop()
        return dict(zip(self.processes, waited, strict=True))

    def log_lines(self) -> dict[str, collections.Counter[str]]:
        """Per Signoff process: its log lines (warnings and worse) by level and event; a traceback
        counts once, by its last line; other text as it is."""
        found: dict[str, collections.Counter[str]] = {}
        for name in self.processes:
            if name != "bare":
                found[name] = +_log_events(self.workdir / f"{name}.log")
        return found

    def log_tail(self, name: str) -> str:
        """The last line a process wrote (a traceback's: the exception)."""
        lines = (self.workdir / f"{name}.log").read_text(errors="replace").splitlines()
        return next((line.strip() for line in reversed(lines) if line.strip()), "no output")


def _log_events(path: Path) -> collections.Counter[str]:
    counted: collections.Counter[str] = collections.Counter()
    traceback: list[str] = []
    for line in [*(path.read_text(errors="replace").splitlines() if path.exists() else []), "{}"]:
        try:
            entry = json.loads(line)
        except ValueError:
            if line.startswith("Traceback") or traceback:
                traceback.append(line.strip())
            elif line.strip():
                counted[f"text: {line.strip()[:120]}"] += 1
            continue
        if traceback:
            counted[f"traceback: {next((t for t in reversed(traceback) if t), '')[:160]}"] += 1
            traceback = []
        if isinstance(entry, dict) and entry:
            counted[f"{entry.get('level', '?')}: {entry.get('event', '?')}"] += 1
    return counted


def _cpu_of(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _host_busy() -> float:
    """CPU seconds every process on this host spent so far (/proc/stat: user, nice, system, irq,
    softirq; not idle, iowait or a hypervisor's steal)."""
    user, nice, system, _idle, _iowait, irq, softirq = (
        int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]
    )
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def used_memory(url: str) -> int:
    """INFO memory `used_memory`, summed over every server holding data (each master of a cluster)."""
    clients = connections.server_clients(url)
    try:
        return sum(int(client.info("memory")["used_memory"]) for client in clients)
    finally:
        for client in clients:
            client.close()


@contextlib.asynccontextmanager
async def every_few_seconds(label: str, status: Callable[[], str]) -> AsyncIterator[None]:
    """Print `label` and what `status()` says every EVERY_S seconds while the block runs."""
    started = time.monotonic()

    async def tick() -> None:
        while True:
            await asyncio.sleep(EVERY_S)
            print(f"    {label}: {status()} ({time.monotonic() - started:.0f} s)", flush=True)

    task = asyncio.create_task(tick())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def send_clicks(
    standin: SlackStandin, payloads: list[dict[str, Any]], rate: float, url_of: Callable[[int], str]
) -> list[Click]:
    """Every payload, one every 1/rate s whether or not earlier ones were answered (open loop)."""
    loop = asyncio.get_running_loop()
    first = loop.time() + 0.2

    async def one(n: int, payload: dict[str, Any]) -> Click:
        due = first + n / rate
        await asyncio.sleep(max(0.0, due - loop.time()))
        lag = loop.time() - due
        try:
            interaction = await standin.send(payload, bot_url=url_of(n))
        except aiohttp.ClientError:
            return Click(lag, 0, float("nan"))
        return Click(lag, interaction.status, interaction.seconds)

    tasks = [asyncio.create_task(one(n, p)) for n, p in enumerate(payloads)]

    def answered() -> str:
        return f"{sum(t.done() for t in tasks)}/{len(tasks)} answered"

    async with every_few_seconds("clicks", answered):
        return list(await asyncio.gather(*tasks))


def ack_figures(clicks: list[Click]) -> dict[str, Any]:
    acked = [c.seconds for c in clicks if c.status == 200]
    return {
        "p50_ms": percentile(acked, 0.5) * 1e3 if acked else float("nan"),
        "p99_ms": percentile(acked, 0.99) * 1e3 if acked else float("nan"),
        "max_ms": max(acked, default=float("nan")) * 1e3,
        "within_3s": sum(s <= ACK_LIMIT_S for s in acked),
        "not_200": dict(collections.Counter(c.status for c in clicks if c.status != 200)),
        "sender_lag_p99_ms": percentile([c.lag for c in clicks], 0.99) * 1e3,
        "clicks": len(clicks),
        # p50 of each tenth of the clicks, in the order sent: did a queue build up, or not
        "p50_ms_by_tenth": [
            round(percentile(tenth, 0.5) * 1e3, 1)
            for n in range(10)
            if (
                tenth := [
                    c.seconds
                    for c in clicks[n * len(clicks) // 10 : (n + 1) * len(clicks) // 10]
                    if c.status == 200
                ]
            )
        ],
    }


async def runner_backlog(store: Store) -> int:
    """Commands the runners have not finished with: delivered and unacknowledged, or not read yet."""
    total = 0
    for partition in store.keys.partitions:
        for group in await store.redis.xinfo_groups(partition.commands):
            if group["name"] == RUNNERS_GROUP:
                total += int(group["pending"]) + int(group.get("lag") or 0)
    return total


async def states(store: Store, threads: list[str]) -> collections.Counter[str]:
    found: collections.Counter[str] = collections.Counter()
    for start in range(0, len(threads), 100):
        chunk = await asyncio.gather(*(store.run_state(t) for t in threads[start : start + 100]))
        found.update(s.value if s else "none" for s in chunk)
    return found


async def until_drained(
    store: Store, deployment: Deployment, threads: list[str], timeout: float
) -> collections.Counter[str]:
    """Until every run finished (or failed) and no command waits for a runner, or `timeout`."""
    ours = set(threads)
    seen: dict[str, Any] = {"states": collections.Counter(), "backlog": -1}

    def status() -> str:
        ran = len({e["thread_id"] for e in read_ledger(deployment.ledger)} & ours)
        return f"tools run for {ran}/{len(threads)}, runs {dict(seen['states'])}, runner backlog {seen['backlog']}"

    deadline = time.monotonic() + timeout
    last_read = 0.0
    async with every_few_seconds("resuming", status):
        while time.monotonic() < deadline:
            # The backlog is a few calls; the states a call per run, read each 5 s until the
            # backlog is empty (not to add a load of our own to the runners' Redis meanwhile).
            seen["backlog"] = await runner_backlog(store)
            if seen["backlog"] == 0 or time.monotonic() - last_read > EVERY_S:
                seen["states"] = await states(store, threads)
                last_read = time.monotonic()
            ended = seen["states"][RunState.FINISHED.value] + seen["states"][RunState.FAILED.value]
            if ended == len(threads) and seen["backlog"] == 0:
                break
            await asyncio.sleep(0.5)
    return seen["states"]


async def cleanup_keys(url: str, prefix: str, threads: list[str]) -> None:
    """On a Redis this bench did not start: its own keys (its prefix) and its threads' checkpoints."""
    from agent_runner.checkpointer import AsyncRedisCheckpointer

    async with AsyncRedisCheckpointer.from_url(url) as saver:
        for start in range(0, len(threads), 50):
            await asyncio.gather(*(saver.adelete_thread(t) for t in threads[start : start + 50]))
    for client in connections.server_clients(url):  # one key per DEL: a cluster node refuses cross-slot
        try:
            with client.pipeline(transaction=False) as pipe:
                for key in client.scan_iter(f"{prefix}:*", count=1000):
                    pipe.delete(key)
                pipe.execute()
        finally:
            client.close()


async def counted(
    store: Store, deployment: Deployment, threads: list[str], cards: list[Message]
) -> dict[str, Any]:
    """Once the work drained: executions per approval, decision -> tool start, and what else
    Slack, Redis and the people saw."""
    ours = set(threads)
    figures: dict[str, Any] = {}
    decided: dict[str, float] = {}
    for entry in await store.audit_entries():
        if entry["thread_id"] in ours and entry["decision"].get("type") == "approve":
            decided[entry["thread_id"]] = min(entry["at"], decided.get(entry["thread_id"], entry["at"]))
    executions: dict[str, list[float]] = collections.defaultdict(list)
    for execution in read_ledger(deployment.ledger):
        executions[execution["thread_id"]].append(execution["at"])
    per_approval = collections.Counter(len(executions.get(t, [])) for t in threads)
    figures["approved_in_audit"] = len(decided)
    figures["executions_per_approval"] = dict(sorted(per_approval.items()))
    figures["executions_min"] = min(per_approval)
    figures["executions_max"] = max(per_approval)
    figures["approvals_not_exactly_once"] = sum(n for k, n in per_approval.items() if k != 1)
    figures["executions_of_other_threads"] = sum(len(v) for t, v in executions.items() if t not in ours)
    gaps = [min(executions[t]) - at for t, at in decided.items() if executions.get(t)]
    figures["decision_to_tool_p50_ms"] = percentile(gaps, 0.5) * 1e3 if gaps else float("nan")
    figures["decision_to_tool_p99_ms"] = percentile(gaps, 0.99) * 1e3 if gaps else float("nan")
    figures["decision_to_tool_min_ms"] = min(gaps, default=float("nan")) * 1e3
    figures["decision_to_tool_max_ms"] = max(gaps, default=float("nan")) * 1e3
    starts = [min(v) for t, v in executions.items() if t in ours]
    if len(starts) > 1:  # how fast the two runners got through the approved work
        figures["tool_starts_per_s"] = (len(starts) - 1) / (max(starts) - min(starts) or float("nan"))

    figures["answers_posted"] = sum(m.kind == "answer" for m in deployment.standin.messages)
    # Card refreshes go out at chat.update's workspace rate: many cards still show Approve.
    figures["cards_still_showing_approve"] = sum(
        any(e.get("action_id") == "approve:0" for b in card.blocks for e in b.get("elements", []))
        for card in cards
    )
    figures["slack_429s"] = dict(
        collections.Counter(c.method for c in deployment.standin.calls if c.status == 429)
    )
    # what people were told privately: refusals, "still recording" (the ack budget spent)
    figures["ephemerals"] = dict(
        collections.Counter(
            str(c.args.get("text", ""))[:80]
            for c in deployment.standin.calls
            if c.method == "chat.postEphemeral" and c.status == 200
        )
    )
    figures["dead_letters"] = await store.stream_length(lambda p: p.dead_letters)
    figures["exited"] = deployment.exited()
    return figures


async def one_layout(
    name: str, url: str, redis_pids: list[int], given: bool, args: argparse.Namespace
) -> dict[str, Any]:
    prefix = f"load{os.getpid()}{int(time.time() * 1000) % 100000}"
    workdir = Path(tempfile.mkdtemp(prefix=f"signoff-load-{name}-"))
    deployment = Deployment(url, workdir, prefix, redis_pids=redis_pids)
    store = Store.from_url(url, prefix)
    threads: list[str] = []
    figures: dict[str, Any] = {"layout": name, "approvals": args.approvals, "rate": args.rate}
    started = time.monotonic()
    try:
        print(
            f"[{name}] starting the stand-in, 2 bots, 2 runners and the bare app on {_shown(url)}", flush=True
        )
        await deployment.start()
        await asyncio.sleep(1)  # the runners' first reads, the bots' group directory
        figures["memory_before"] = await asyncio.to_thread(used_memory, url)

        channels = [f"C0LOAD{n:04d}" for n in range(min(args.channels, args.approvals))]
        print(f"[{name}] starting {args.approvals} runs over {len(channels)} channels", flush=True)
        asked = time.monotonic()
        for n in range(args.approvals):
            threads.append(
                await start_run(
                    store,
                    f"Deploy build {n:05d}",
                    channels[n % len(channels)],
                    GRAPH_NAME,
                    requester="U0RILEY",
                )
            )
        ours = set(threads)

        def posted() -> str:
            cards = sum(
                m.kind == "approval" and (m.metadata or {}).get("event_payload", {}).get("thread_id") in ours
                for m in deployment.standin.messages
            )
            return f"{cards}/{args.approvals} cards posted"

        async with every_few_seconds("cards", posted):
            try:
                cards = await cards_of(deployment.standin, store, threads, timeout=args.card_timeout)
            except RuntimeError as exc:
                figures["broken"] = f"cards missing: {exc}"
                print(f"[{name}] {figures['broken']}", flush=True)
                return figures
        figures["cards_s"] = time.monotonic() - asked
        await asyncio.sleep(2)  # the last status lines settle, as a person takes a moment
        figures["memory_pending"] = await asyncio.to_thread(used_memory, url)
        figures["memory_per_pending_bytes"] = (
            figures["memory_pending"] - figures["memory_before"]
        ) / args.approvals
        print(
            f"[{name}] all {args.approvals} cards posted in {figures['cards_s']:.0f} s; clicking", flush=True
        )

        payloads = [
            deployment.standin.block_action_payload(f"U{n:05d}", card, "approve:0")
            for n, card in enumerate(cards)
        ]
        figures["load_average_before_clicks"] = os.getloadavg()  # other work on this host shows here
        cpu, at = deployment.cpu_seconds(), time.monotonic()
        bare = await send_clicks(deployment.standin, payloads, args.rate, lambda n: deployment.bare_url)
        cpu_bare, bare_at = deployment.cpu_seconds(), time.monotonic()
        signoff = await send_clicks(deployment.standin, payloads, args.rate, deployment.bot_url)
        cpu_signoff, clicked_at = deployment.cpu_seconds(), time.monotonic()
        # CPU each process spent while the clicks came (first sent to last answered), per click:
        # what a click costs, who else wanted the cores meanwhile, and how many cores were busy
        figures["cpu_ms_per_click_bare_phase"] = _per_click(cpu, cpu_bare, len(bare))
        figures["cpu_ms_per_click_signoff_phase"] = _per_click(cpu_bare, cpu_signoff, len(signoff))
        figures["click_phase_s"] = {"bare": bare_at - at, "signoff": clicked_at - bare_at}
        figures["cores_busy"] = {
            "bare phase": (sum(cpu_bare.values()) - sum(cpu.values())) / (bare_at - at),
            "signoff phase": (sum(cpu_signoff.values()) - sum(cpu_bare.values())) / (clicked_at - bare_at),
            "of": os.cpu_count(),
        }
        figures["bare"] = ack_figures(bare)
        figures["signoff"] = ack_figures(signoff)
        figures["ack_ratio_p50"] = figures["signoff"]["p50_ms"] / figures["bare"]["p50_ms"]
        figures["ack_ratio_p99"] = figures["signoff"]["p99_ms"] / figures["bare"]["p99_ms"]

        ended = await until_drained(store, deployment, threads, args.drain_timeout)
        figures["drain_s"] = time.monotonic() - clicked_at
        # the runners' (and everyone's) CPU per approval while the approved work drained
        figures["cpu_ms_per_approval_drain_phase"] = _per_click(
            cpu_signoff, deployment.cpu_seconds(), args.approvals
        )
        await asyncio.sleep(args.grace)  # a late second execution would land here
        figures["runs"] = dict(ended)
        figures["memory_after"] = await asyncio.to_thread(used_memory, url)
        figures["memory_per_finished_run_bytes"] = (
            figures["memory_after"] - figures["memory_before"]
        ) / args.approvals

        figures.update(await counted(store, deployment, threads, cards))
        if figures["approvals_not_exactly_once"]:
            figures["broken"] = (
                f"{figures['approvals_not_exactly_once']} approvals did not run their tool exactly once"
            )
        return figures
    except Exception as exc:  # a process that would not start, Redis refusing: say so, try the next layout
        figures["broken"] = f"{type(exc).__name__}: {exc}"
        print(f"[{name}] broke: {figures['broken']}", flush=True)
        return figures
    finally:
        figures["seconds"] = time.monotonic() - started
        with contextlib.suppress(Exception):
            figures["seconds_to_exit_on_sigterm"] = await deployment.stop()
        figures["log_lines"] = {k: dict(v) for k, v in deployment.log_lines().items() if v}
        try:
            if given:
                await cleanup_keys(url, prefix, threads)
        finally:
            await store.close()
            if args.keep:
                print(f"[{name}] logs kept in {workdir}", flush=True)
            else:
                shutil.rmtree(workdir, ignore_errors=True)


def _per_click(before: dict[str, float], after: dict[str, float], clicks: int) -> dict[str, float]:
    return {name: round((after[name] - before[name]) * 1e3 / clicks, 2) for name in after}


def _shown(url: str) -> str:
    from core.logs import redact

    return redact(url)


@contextlib.contextmanager
def redis_for(layout: str, url: str | None) -> Iterator[tuple[str, list[int]]]:
    """The URL to use and the pids of its servers: the URL given (checked, never started or
    stopped; no pids), else a local Redis of that layout, stopped (its data removed) on the way out."""
    if url:
        redis_server.check_server(url)
        yield url, []
        return
    server: redis_server.LocalRedis | redis_server.LocalCluster
    server = redis_server.start_cluster(3) if layout == "cluster" else redis_server.start()
    nodes = server.nodes if isinstance(server, redis_server.LocalCluster) else [server]
    try:
        yield server.url, [node.process.pid for node in nodes]
    finally:
        server.stop()


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| layout | ack p50 / p99 | bare Bolt p50 / p99 | ratio p50 / p99 | acked < 3 s "
        "| decision → tool start p50 / p99 | executions per approval | Redis per pending approval |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "signoff" not in r:
            broken = str(r.get("broken", "did not finish")).replace("|", "\\|")
            lines.append(f"| {r['layout']} | {broken} | | | | | | |")
            continue
        s, b = r["signoff"], r["bare"]
        once = (
            f"exactly 1 for all {r['approvals']:,}"
            if r["approvals_not_exactly_once"] == 0
            else f"{r['executions_min']}–{r['executions_max']} ({r['approvals_not_exactly_once']} not 1)"
        )
        lines.append(
            f"| {r['layout']} | {s['p50_ms']:.2f} / {s['p99_ms']:.2f} ms | {b['p50_ms']:.2f} / {b['p99_ms']:.2f} ms "
            f"| {r['ack_ratio_p50']:.2f}x / {r['ack_ratio_p99']:.2f}x | {s['within_3s']:,} of {s['clicks']:,} "
            f"| {r['decision_to_tool_p50_ms']:,.0f} / {r['decision_to_tool_p99_ms']:,.0f} ms | {once} "
            f"| {r['memory_per_pending_bytes'] / 1000:.1f} kB |"
        )
    return "\n".join(lines)


async def in_loop(
    name: str, url: str, redis_pids: list[int], given: bool, args: argparse.Namespace
) -> dict[str, Any]:
    """One layout, where SIGTERM cancels it as asyncio.run does on Ctrl-C: its cleanup runs."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await one_layout(name, url, redis_pids, given, args)


def main(args: argparse.Namespace) -> int:
    urls = {"node": args.node_url, "cluster": args.cluster_url}
    layouts = [name.strip() for name in args.layouts.split(",") if name.strip()]
    unknown = [name for name in layouts if name not in urls]
    if unknown:
        raise SystemExit(f"--layouts takes node and/or cluster, not {', '.join(unknown)}")
    began = time.monotonic()
    print(
        f"{args.approvals} approvals, clicked at {args.rate:.0f}/s (open loop) over two bots; "
        f"layouts: {', '.join(layouts)}",
        flush=True,
    )
    results = []
    try:
        for layout in layouts:
            # outside the event loop (starting Redis), a kill cleans up as Ctrl-C does
            signal.signal(signal.SIGTERM, signal.default_int_handler)
            with redis_for(layout, urls[layout]) as (url, pids):
                results.append(asyncio.run(in_loop(layout, url, pids, bool(urls[layout]), args)))
            print(f"[{layout}] done in {results[-1]['seconds']:.0f} s", flush=True)
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted: every process and Redis this bench started is stopped", flush=True)
        return 130
    print()
    print(table(results))
    print()
    print("raw figures:")
    for result in results:
        print(json.dumps(result, indent=1, default=str))
    print(f"(took {time.monotonic() - began:.0f} s)")
    return 1 if any("broken" in r for r in results) else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--approvals", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=300.0, help="clicks a second")
    parser.add_argument("--layouts", default="node,cluster", help="node and/or cluster, comma-separated")
    parser.add_argument("--node-url", help="a Redis to use for the node layout (none is started)")
    parser.add_argument(
        "--cluster-url", help="a redis+cluster:// URL for the cluster layout (none is started)"
    )
    parser.add_argument(
        "--channels", type=int, default=100, help="channels the runs post in (Slack: ~1 post/s per channel)"
    )
    parser.add_argument("--card-timeout", type=float, default=900, help="seconds allowed for every card")
    parser.add_argument(
        "--drain-timeout", type=float, default=600, help="seconds allowed to finish after the clicks"
    )
    parser.add_argument(
        "--grace", type=float, default=3, help="seconds waited for late executions once drained"
    )
    parser.add_argument("--keep", action="store_true", help="keep the processes' logs")
    sys.exit(main(parser.parse_args()))
