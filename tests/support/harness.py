"""The whole loop in one test: stand-in Slack, the real bot over HTTP, a real runner.

`Harness` holds the parts; `scene` starts a bot and a runner in it. The bot and runner run
in the test's event loop unless a test starts them as processes; each test gets its own key
prefix, so tests never see each other's records on the shared Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from agent_runner.checkpointer import AsyncRedisCheckpointer, CheckpointKeys
from agent_runner.remote import RemoteRunner
from agent_runner.runner import runners_for
from agent_runner.worker import RunnerWorker
from bot.app import run_bot
from bot.slack.state import SlackState
from core import connections
from core.agent_server import agent_server
from core.config import Settings
from core.keys import BOTS_GROUP, RUNNERS_GROUP, Partition
from core.outages import is_outage
from core.producer import start_run
from core.protocol import ActionReview, PendingRequest, RequestKind
from core.reconciler import Reconciler
from core.records import Approval, Run, approval_for
from core.store import Store, default_partitions, each_partition
from signoff_demo.redis_server import free_port
from slack_standin import Message, SlackStandin
from tests.support.paths import LANGGRAPH_JSON, ROOT
from tests.support.records import task_words

SECRET = "standin-signing-secret"
CHANNEL = "C0APPROVALS"
DEMO = "tests.support.graphs:build_demo_agent"  # refunds over 1,000 pause
GRAPHS = {
    "demo": DEMO,
    "shipped_demo": "signoff_demo.agent:build_demo_agent",  # every refund pauses: its policy decides
    "per_call": "tests.support.graphs:build_per_call_agent",
    "question": "tests.support.graphs:build_question_graph",
    "mcp": "tests.support.graphs:build_mcp_agent",  # an MCP server's tools, which ask people
    "hostile": "tests.support.hostile_mcp:build",  # an MCP server that asks whatever a test sets
    "ledger": "tests.support.graphs:build_ledger_agent",
    "keyed": "tests.support.graphs:build_keyed_agent",  # a call carrying an API key
    "secret": "tests.support.secret_graph:build_secret_agent",  # secrets of every kind, and a repeat
    "memory": "tests.support.graphs:build_memory_agent",
    "flaky": "tests.support.graphs:build_flaky_agent",
    "slow": "tests.support.graphs:build_slow_agent",
    "thinking": "tests.support.graphs:build_thinking_agent",
    "batch": "tests.support.graphs:build_batch_agent",
    "spelled": "tests.support.graphs:build_spelled_refund_agent",  # the amount as the request spells it
    "editor": "tests.support.graphs:build_editor_agent",  # a subagent edits a file it wrote itself
    "disk": "tests.support.graphs:build_disk_agent",  # deepagents' files in a folder on disk
    "text_editor": "tests.support.graphs:build_text_editor_agent",  # Anthropic's, on disk
}
APPROVE_BUTTON = "approve:0"  # the first action's Approve on a card
ASK_EMAIL = 'Email finance@acme.com "numbers"'  # what a requester asks the demo agent
ASK_BATCH = "Delete /reports/old.pdf and email team@acme.com that the old report is gone"  # two calls


async def eventually(check: Callable[[], Any], timeout: float = 20, what: str = "condition") -> Any:
    """Poll `check` (sync or async) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
            if asyncio.iscoroutine(result):
                result = await result
        except Exception as exc:
            if not is_outage(exc):
                raise
            result = None  # a test's own Redis (or cluster) may be restarting: look again
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


class Harness:
    """One test's world: Slack (the stand-in), Redis, and Signoff's parts (a test helper, not a
    `core.loops.Loop`). `mode` is how Slack reaches the bot:
    "http" (signed POSTs to /slack/events) or "socket" (Socket Mode envelopes over a WebSocket)."""

    def __init__(
        self,
        redis_url: str,
        env: dict[str, str] | None = None,
        groups: dict[str, list[str]] | None = None,
        mode: str = "http",
    ):
        self.redis_url = redis_url
        self.prefix = f"t{uuid.uuid4().hex[:10]}"
        self.port = free_port()
        self.mode = mode
        self.env = env or {}
        self.standin = SlackStandin(
            SECRET, bot_url=f"http://127.0.0.1:{self.port}/slack/events", groups=groups
        )
        # The test's own view of Redis retries a dropped connection: some tests restart Redis.
        self.store = Store(
            connections.async_client(
                redis_url, retry=Retry(ExponentialBackoff(cap=1), 5), retry_on_error=[RedisConnectionError]
            ),
            self.prefix,
            int(self.env.get("SIGNOFF_PARTITIONS") or default_partitions(redis_url)),
        )
        self.slack_state = SlackState(self.store.redis, self.store.keys)
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[Any]] = []
        self.processes: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def settings(self, **overrides: Any) -> Settings:
        env = {
            "REDIS_URL": self.redis_url,
            "SIGNOFF_PREFIX": self.prefix,
            "SLACK_BOT_TOKEN": self.standin.token,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": self.standin.base_url,
            "PORT": str(self.port),
            "SIGNOFF_CHANNEL": CHANNEL,
            "SIGNOFF_GRAPHS_FILE": str(LANGGRAPH_JSON),
            # one tap approves: the dialogs confirming a destructive tool's Approve have tests of
            # their own (test_confirmations), which name the tools
            "SIGNOFF_DESTRUCTIVE_TOOLS": "none",
            # where a browser reaches the bot's passkey pages (a host name: a passkey is for a domain)
            "SIGNOFF_PUBLIC_URL": self.public_url,
            **self.socket_env,
            **self.env,
            **{k: str(v) for k, v in overrides.items()},
        }
        return Settings.from_env(env)

    @property
    def public_url(self) -> str:
        return f"http://localhost:{self.port}"

    @property
    def socket_env(self) -> dict[str, str]:
        return {"SLACK_APP_TOKEN": self.standin.app_token} if self.mode == "socket" else {}

    def process_env(self, **overrides: Any) -> dict[str, str]:
        settings = self.settings()
        env = {
            **os.environ,
            "REDIS_URL": self.redis_url,
            "SIGNOFF_PREFIX": self.prefix,
            "SLACK_BOT_TOKEN": self.standin.token,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": self.standin.base_url,
            "PORT": str(settings.port),
            "LOG_FORMAT": "json",
            "PYTHONPATH": str(ROOT),
            "SIGNOFF_DESTRUCTIVE_TOOLS": "none",  # (as in `settings`)
            "SIGNOFF_PUBLIC_URL": self.public_url,
            **self.socket_env,
            **self.env,
        }
        env.update({k: str(v) for k, v in overrides.items()})
        return env

    async def __aenter__(self) -> Harness:
        await self.standin.start()
        await self.store.layout.ensure_groups()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop.set()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 15)
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(10)
                if process.poll() is None:
                    process.kill()
        await self.standin.stop()
        await self.store.close()
        for log in self.logs:
            if exc[0] is not None:
                print(f"--- {log.name}\n{log.read_text(errors='replace')[-6000:]}")
            log.unlink(missing_ok=True)

    # the parts -------------------------------------------------------------

    def checkpointer(self) -> Any:
        """The runner's saver (not yet entered), with the checkpoint keys of the harness's settings
        (SIGNOFF_CHECKPOINT_KEY, SIGNOFF_CHECKPOINT_OLD_KEYS in `env`), as `signoff runner` builds it."""
        return AsyncRedisCheckpointer.from_url(
            self.redis_url, keys=CheckpointKeys.from_settings(self.settings())
        )

    async def stop_parts(self) -> None:
        """Stop the bot and runners started in the test's loop (to start them again, changed)."""
        self.stop.set()
        await asyncio.gather(*self.tasks)
        self.tasks.clear()
        self.stop = asyncio.Event()

    async def start_bot(self) -> None:
        self.tasks.append(asyncio.create_task(run_bot(self.settings(), self.stop)))
        await self.wait_healthy(self.port)

    async def wait_healthy(self, port: int, timeout: float = 20) -> None:
        async def healthy() -> bool:
            answers = await probe(port, "healthz") == 200
            return answers and (self.mode != "socket" or self.standin.socket_connected)

        await eventually(healthy, timeout=timeout, what=f"bot on port {port}")

    async def start_runner(self, *names: str, **options: Any) -> None:
        saver_cm = self.checkpointer()
        saver = await saver_cm.__aenter__()
        # as `signoff runner` wires them: the policy's redact, the preview hooks (SIGNOFF_PREVIEWS)
        runners = runners_for({name: GRAPHS[name] for name in names or ("demo",)}, saver, self.settings())
        redact = self.settings().policy.redactions
        worker = RunnerWorker(
            self.store,
            runners,
            consumer=f"runner-{uuid.uuid4().hex[:6]}",
            checkpoints=saver,
            redact=redact,
            **options,
        )

        async def serve() -> None:
            try:
                await worker.serve(self.stop)
            finally:
                await saver_cm.__aexit__(None, None, None)

        self.tasks.append(asyncio.create_task(serve()))

    async def start_remote_runner(self, *local: str, **options: Any) -> RunnerWorker:
        """A runner for the Agent Server of SIGNOFF_AGENT_SERVER_URL, and for the `local` graphs."""
        server = agent_server(self.settings())
        assert server is not None, "set SIGNOFF_AGENT_SERVER_URL in the harness's env"
        redact = self.settings().policy.redactions
        remote = RemoteRunner(self.store, server, Reconciler(self.store, server, redact=redact))
        saver_cm = self.checkpointer()
        saver = await saver_cm.__aenter__()
        runners = runners_for({name: GRAPHS[name] for name in local}, saver, self.settings())
        worker = RunnerWorker(
            self.store,
            runners,
            consumer=f"runner-{uuid.uuid4().hex[:6]}",
            remote=remote,
            checkpoints=saver,
            redact=redact,
            **options,
        )

        async def serve() -> None:
            try:
                await worker.serve(self.stop)
            finally:
                await saver_cm.__aexit__(None, None, None)
                await server.close()

        self.tasks.append(asyncio.create_task(serve()))
        self.runner_worker = worker
        return worker

    def spawn(self, command: str, **env: Any) -> subprocess.Popen[bytes]:
        """`signoff <command>` as its own process; its logs go to a file (printed if the test fails)."""
        log = Path(tempfile.mkstemp(prefix=f"signoff-{command}-", suffix=".log")[1])
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "signoff", command],
                cwd=ROOT,
                env=self.process_env(**env),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.processes.append(process)
        self.logs.append(log)
        return process

    # what a person does and sees -------------------------------------------

    async def ask(
        self, text: str, graph: str = "demo", requester: str = "U0REQUESTER", channel: str = CHANNEL
    ) -> str:
        return await start_run(self.store, text, channel, graph, requester=requester)

    async def card(self, thread_id: str, number: int = 1, timeout: float = 20) -> Message:
        """The `number`-th approval card of the run (waits for it)."""

        async def found() -> Message | None:
            # In the run's thread, or wherever the policy routed it: the card's metadata names the run.
            cards = [
                m
                for m in self.standin.messages
                if m.kind == "approval"
                and (m.metadata or {}).get("event_payload", {}).get("thread_id") == thread_id
            ]
            return cards[number - 1] if len(cards) >= number else None

        return await eventually(found, timeout=timeout, what=f"card {number} of {thread_id}")

    async def thread_texts(self, thread_id: str) -> list[str]:
        run = await self.store.runs.get(thread_id)
        return (
            [m.text for m in self.standin.thread(run.channel, run.thread_ts)] if run and run.thread_ts else []
        )

    async def messages(self, thread_id: str, kind: str) -> list[Message]:
        """The run's messages of one kind (approval, answer, status…) in its Slack thread."""
        run = await self.store.runs.get(thread_id)
        if run is None or run.thread_ts is None:
            return []
        return [m for m in self.standin.thread(run.channel, run.thread_ts) if m.kind == kind]

    async def says(self, thread_id: str, text: str) -> bool:
        """Whether some message in the run's thread contains `text`."""
        return any(text in t for t in await self.thread_texts(thread_id))

    async def answer(self, thread_id: str, contains: str = "", timeout: float = 20) -> str:
        """The run's final answer in its Slack thread (waits for it)."""

        async def found() -> str | None:
            run = await self.store.runs.get(thread_id)
            if run is None or run.thread_ts is None:
                return None
            hits = [
                m.text
                for m in self.standin.thread(run.channel, run.thread_ts)
                if m.kind in ("answer", "error") and contains in m.text
            ]
            return "\n".join(hits) if hits else None

        return await eventually(found, timeout=timeout, what=f"answer of {thread_id} containing {contains!r}")

    async def open_modal(self, user: str, card: Message, action_id: str) -> dict[str, Any]:
        before = {v["id"] for v in self.standin.open_views(user)}
        interaction = await self.standin.click(user, card, action_id)
        assert interaction.acked
        return await eventually(
            lambda: next((v for v in self.standin.open_views(user) if v["id"] not in before), None),
            what="modal",
        )

    async def confirm(self, user: str, card: Message, action_id: str) -> Any:
        """`user` taps a button Signoff confirms in a dialog (Approve all, Approve & trust, a
        destructive Approve, Withdraw my request), then the dialog's submit; its interaction."""
        dialog = await self.open_modal(user, card, action_id)
        assert dialog["callback_id"].startswith("sure:"), dialog["callback_id"]
        return await self.standin.submit(user, dialog, {})

    async def plan(self, thread_id: str) -> dict[str, Any]:
        """The plan block of the run's status message (its root, or its status reply), as it is now."""
        run = await self.store.runs.get(thread_id)
        ts = await self.slack_state.status_line(thread_id)
        message = self.standin.message(run.channel, ts) if run and ts else None
        plans = [b for b in message.blocks if b["type"] == "plan"] if message else []
        return plans[0] if plans else {}

    async def task_shows(self, thread_id: str, status: str, said: str) -> list[dict[str, Any]]:
        """Waits for a task of the run's plan with `status` that says `said`; the plan's tasks."""

        async def found() -> list[dict[str, Any]] | None:
            tasks = (await self.plan(thread_id)).get("tasks", [])
            return tasks if any(t["status"] == status and said in task_words(t) for t in tasks) else None

        return await eventually(found, what=f"a {status} task saying {said!r}")

    def fresh(self, card: Message) -> Message:
        return self.standin.message(card.channel, card.ts)

    async def card_shows(self, card: Message, text: str) -> Message:
        return await eventually(
            lambda: text in card_text(self.fresh(card)) and self.fresh(card), what=f"card showing {text!r}"
        )


class Later:
    """A clock `ahead` seconds from now."""

    def __init__(self, ahead: float):
        self.ahead = ahead

    def __call__(self) -> float:
        return time.time() + self.ahead


async def signoff(harness: Harness, *args: str, **env: Any) -> subprocess.CompletedProcess[str]:
    """`signoff <args>` in a shell; the test's event loop (the Slack stand-in) keeps answering."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "signoff",
        *args,
        cwd=ROOT,
        env=harness.process_env(**env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return subprocess.CompletedProcess(args, process.returncode or 0, out.decode(), err.decode())


async def waiting_approvals(store: Store, count: int, channel: str = CHANNEL) -> list[Approval]:
    """`count` pending approvals in `channel`, one a run, written as a runner writes them (a
    hundred at a time), oldest first by their creation time (Redis's)."""
    made: list[Approval] = []
    for start in range(0, count, 100):
        batch = []
        for n in range(start, min(start + 100, count)):
            run = Run(thread_id=f"waiting-{n}-{uuid.uuid4().hex[:8]}", graph="demo", channel=channel)
            request = PendingRequest(
                interrupt_id=uuid.uuid4().hex,
                kind=RequestKind.BATCHED,
                actions=(ActionReview(name="issue_refund", args={"n": n}, allowed_decisions=("approve",)),),
            )
            batch.append(approval_for(request, run, "demo"))
        made += [a for a, _ in await asyncio.gather(*(store.approvals.create(a) for a in batch))]
    return sorted(made, key=lambda approval: approval.created_at)


async def consumed(store: Store, stream: str = "commands") -> bool:
    """Whether every entry of `stream` ("commands": the runners', "events": the bots') in every
    partition was read and acknowledged: nothing is waiting or in flight, so whatever a command
    (or event) does has been done. "Nothing else happened" is checked after this, never after a
    sleep."""
    group = RUNNERS_GROUP if stream == "commands" else BOTS_GROUP

    async def partition_done(partition: Partition) -> bool:
        key = getattr(partition, stream)
        info = await store.redis.xinfo_stream(key)
        groups = {g["name"]: g for g in await store.redis.xinfo_groups(key)}
        ours = groups.get(group)
        return (
            ours is not None
            and ours["pending"] == 0
            and ours["last-delivered-id"] == info["last-generated-id"]
        )

    return all(await each_partition(store.keys, partition_done))


async def with_a_vote(harness: Harness, card: Message) -> Approval | None:
    """The card's approval once an approval of it is counted (a quorum waits for more)."""
    approval = await harness.store.approvals.get(card.metadata["event_payload"]["approval_id"])
    return approval if approval and approval.votes else None


async def runners_idle(harness: Harness, thread_id: str) -> bool:
    """No runner has a command waiting or in flight, nor the thread's lock: whatever a runner
    would do again (a takeover, right or wrong) has started by now, and none can come."""
    return await consumed(harness.store) and not await harness.store.redis.exists(
        harness.store.keys.thread_lock(thread_id)
    )


async def probe(port: int, path: str) -> int | None:
    """The HTTP status of GET /<path> on a local port (None when nothing answers)."""
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/{path}", timeout=aiohttp.ClientTimeout(total=3)) as reply,
        ):
            return reply.status
    except (TimeoutError, aiohttp.ClientError):
        return None


def card_text(message: Message) -> str:
    """Everything a person reads on a card, flattened."""
    parts = [message.text]
    for block in message.blocks:
        for key in ("text",):
            if isinstance(block.get(key), dict):
                parts.append(block[key]["text"])
        for element in block.get("elements", []):
            if isinstance(element, dict) and "text" in element:
                parts.append(
                    element["text"]["text"] if isinstance(element["text"], dict) else element["text"]
                )
        if block.get("accessory", {}).get("text"):
            parts.append(block["accessory"]["text"]["text"])
        if block.get("type") == "rich_text":  # (a preview's lines, an edit's diff)
            parts += [rich_text(block)]
    return "\n".join(parts)


def rich_text(block: dict[str, Any]) -> str:
    """A rich_text block's text, as it reads (each part on its own lines)."""
    return "\n".join(
        "".join(str(e.get("text") or "") for e in part.get("elements") or []) for part in block["elements"]
    )


def buttons(message: Message, withdraw: bool = False) -> list[str]:
    """The card's decision buttons (and, with `withdraw`, the requester's Withdraw)."""
    return [
        e["action_id"]
        for b in message.blocks
        if b.get("type") == "actions"
        for e in b["elements"]
        if b.get("block_id") != "more" or (withdraw and e["action_id"] == "withdraw")
    ]


Waiter = Callable[[], Awaitable[Any]]


@contextlib.asynccontextmanager
async def start_scene(
    redis_url: str,
    *graphs: str,
    env: dict[str, str] | None = None,
    policy: Path | str | None = None,
    groups: dict[str, list[str]] | None = None,
    mode: str = "http",
) -> AsyncIterator[Harness]:
    """A bot and one runner serving `graphs` (in the test's event loop), on stand-in Slack:
    with `env`, the policy file `policy` (SIGNOFF_POLICY), the user groups `groups`, and Slack
    reaching the bot by `mode`."""
    if policy is not None:
        env = {**(env or {}), "SIGNOFF_POLICY": str(policy)}
    async with Harness(redis_url, env=env, groups=groups, mode=mode) as harness:
        await harness.start_bot()
        await harness.start_runner(*graphs)
        yield harness


def header(message: Message) -> str:
    """A card's header."""
    return next(b["text"]["text"] for b in message.blocks if b["type"] == "header")


async def ready(port: int) -> bool:
    return await probe(port, "readyz") == 200


async def bound_thread(harness: Harness, channel: str, root: str) -> str:
    """The run bound to the Slack thread at `root` in `channel` (waits for it)."""
    return await eventually(
        lambda: harness.slack_state.thread_for(channel, root), what="the run bound to the thread"
    )


async def resume_commands(harness: Harness) -> int:
    """How many resume commands the bots have sent the runners."""
    commands = await harness.store.queue.entries(lambda p: p.commands)
    return sum('"type":"resume"' in fields["command"] for _, fields in commands)
