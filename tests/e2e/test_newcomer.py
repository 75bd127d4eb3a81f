"""What a newcomer types first: the README's commands, from a fresh clone's directory, default arguments.

Each runs as its own process with the project's `signoff` command, in a copy
of the repository's files (what a clone holds), so relative paths and
defaults are exercised as they are on a new machine. Settings that make no
sense, a port in use and a missing graph are refused in one line each.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from signoff_demo.redis_server import free_port
from tests.support.commands import launch, line_with, newcomer_env, run, stop
from tests.support.harness import CHANNEL, DEMO, ROOT, SECRET, Harness, eventually, probe, ready


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """The repository's files as a fresh clone has them (tracked files only, no .venv, no .signoff)."""
    target = tmp_path_factory.mktemp("clone")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in tracked.splitlines():
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def test_signoff_redis_starts_from_a_fresh_clone_with_its_defaults(clone):
    process = launch(["redis"], clone, newcomer_env())
    try:
        first = process.stdout.readline() if process.stdout else ""
        assert first.startswith("REDIS_URL=redis://127.0.0.1:"), first
        client = redis.Redis.from_url(first.strip().removeprefix("REDIS_URL="))
        assert client.ping()
        client.close()
        assert (clone / ".signoff" / "redis" / "redis.log").is_file()
    finally:
        code, out = stop(process)
    assert code == 0, out


def test_signoff_redis_cluster_starts_from_a_fresh_clone_with_its_defaults(clone):
    from core import connections

    process = launch(["redis", "--cluster", "3"], clone, newcomer_env())
    try:
        first = process.stdout.readline() if process.stdout else ""
        assert first.startswith("REDIS_URL=redis+cluster://127.0.0.1:"), first
        client = connections.sync_client(first.strip().removeprefix("REDIS_URL="))
        assert len(client.get_primaries()) == 3 and client.ping()
        client.close()
        assert (clone / ".signoff" / "redis-cluster" / "node-0" / "appendonlydir").is_dir()
    finally:
        code, out = stop(process)
    assert code == 0, out


def test_signoff_demo_walkthrough_plays_through(clone):
    done = run(["demo", "--walkthrough"], clone, newcomer_env(), timeout=180)
    assert done.returncode == 0, done.stderr
    assert "Refunded 500 on order 1234" in done.stdout


def test_signoff_demo_serves_its_page_on_the_port_asked_for(clone):
    port = free_port()
    process = launch(["demo", "--port", str(port)], clone, newcomer_env())
    try:

        async def page() -> bool:
            return await probe(port, "") == 200 and await probe(port, "static/page.js") == 200

        asyncio.run(eventually(page, timeout=60, what="the demo page"))
    finally:
        code, out = stop(process)
    assert code == 0, out


def test_make_demo_takes_a_port():
    shown = subprocess.run(["make", "-n", "demo", "PORT=3200"], cwd=ROOT, capture_output=True, text=True)
    assert "signoff demo --port 3200" in shown.stdout, shown.stdout + shown.stderr


@pytest.mark.parametrize(
    "args", [["pending"], ["audit", "--since", "7d", "--format", "csv"], ["deadletters", "list"]]
)
def test_the_operator_commands_say_what_to_set_on_a_fresh_machine(clone, args):
    done = run(args, clone, newcomer_env())
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "signoff: set REDIS_URL to the Redis the bot and runner use\n"


def test_signoff_doctor_on_a_fresh_machine_lists_what_is_missing_with_fixes(clone):
    done = run(["doctor"], clone, newcomer_env())
    assert done.returncode == 1 and done.stderr == ""
    assert "✗ Slack token: SLACK_BOT_TOKEN is not set" in done.stdout
    assert "✗ Redis: REDIS_URL is not set" in done.stdout and "fix: point REDIS_URL" in done.stdout
    assert "✗ graphs: no graphs" in done.stdout
    # no policy file at all: it works, but not as a team would guard its tools
    assert (
        "! policy: no policy file (SIGNOFF_POLICY, or signoff.toml here): anyone in the channel may "
        "decide; the requester may approve her own call; nothing expires\n"
        "    fix: write a signoff.toml (docs/policy.md) or set SIGNOFF_POLICY to one\n"
    ) in done.stdout


def test_signoff_run_help_answers(clone):
    done = run(["run", "--help"], clone, newcomer_env())
    assert done.returncode == 0 and "--channel" in done.stdout


async def test_signoff_serve_with_the_standin_decides_and_stops_cleanly(clone, redis_url):
    async with Harness(redis_url) as scene:
        env = newcomer_env(
            **{
                k: str(v)
                for k, v in scene.process_env().items()
                if k.startswith(("SIGNOFF_", "SLACK_", "REDIS_URL", "PORT"))
            },
            SIGNOFF_GRAPH=DEMO,
        )
        process = launch(["serve"], clone, env)
        try:
            await eventually(lambda: ready(scene.port), timeout=60, what="serve ready (bot and its runner)")
            thread_id = await scene.ask("Refund order 3 for 3000")
            assert (
                await scene.standin.click("U0ALICE", await scene.card(thread_id, timeout=30), "approve:0")
            ).acked
            assert "Refunded 3000 on order 3" in await scene.answer(thread_id, timeout=30)
        finally:
            code, out = stop(process, signal.SIGTERM)
        assert code == 0, out[-3000:]
        # (no policy file in the clone: said in the log at start)
        warned = [json.loads(line) for line in out.splitlines() if '"policy_missing"' in line]
        assert [w["level"] for w in warned] == ["warning"] and "nothing expires" in warned[0]["problem"]


def test_an_unconfigured_runner_says_what_to_set(clone, redis_url):
    done = run(["runner"], clone, newcomer_env(REDIS_URL=redis_url))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "signoff: no graphs to run: set SIGNOFF_GRAPH=module:attr (a compiled graph or a factory), "
        "start the runner where your langgraph.json is (or set SIGNOFF_GRAPHS_FILE), "
        "or set SIGNOFF_AGENT_SERVER_URL"
    ]


def test_settings_that_make_no_sense_refuse_to_start_one_line_each(clone):
    env = newcomer_env(
        SIGNOFF_APPROVERS='{"*": "U0ALICE"}',
        PORT="http",
        SIGNOFF_CHANNEL="#approvals",
        SLACK_SIGNING_SECRET="s3cret-value",
        SIGNOFF_LEASE_MS="5",
    )
    done = run(["bot"], clone, env)

    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[0] == "signoff: these settings make no sense, so nothing was started:"
    assert sorted(line.strip() for line in lines[1:]) == sorted(
        [
            'SIGNOFF_APPROVERS=\'{"*": "U0ALICE"}\': "*" must be a list of ids of users (U…) or user groups (S…), '
            'e.g. {"*": ["U0ALICE", "S0FINANCE"]}',
            "PORT='http': Input should be a valid integer, unable to parse string as an integer",
            "SIGNOFF_CHANNEL='#approvals': a Slack channel id such as C0123ABCD (not a #name)",
            "SIGNOFF_LEASE_MS='5': Input should be greater than or equal to 500",
        ]
    )
    assert "s3cret-value" not in done.stderr


def test_a_bad_default_graph_is_one_line(clone):
    done = run(["bot"], clone, newcomer_env(SIGNOFF_GRAPH=DEMO, SIGNOFF_DEFAULT_GRAPH="nope"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "signoff: SIGNOFF_DEFAULT_GRAPH='nope' is not one of ['demo']"
    ]


def test_a_port_in_use_is_one_line(clone, redis_url):
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = newcomer_env(
            REDIS_URL=redis_url,
            PORT=str(port),
            SLACK_BOT_TOKEN="xoxb-x",
            SIGNOFF_CHANNEL=CHANNEL,
            SLACK_SIGNING_SECRET=SECRET,
            SLACK_API_URL="http://127.0.0.1:9/api/",
        )
        done = run(["bot"], clone, env, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"signoff: PORT={port} is in use by another process; set PORT to a free port"
    ]


def test_the_bot_never_loads_an_agent_runtime():
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import sys, bot.app\n"
                "print(sorted({m.split('.')[0] for m in sys.modules} & {'langgraph', 'langchain', 'langchain_core', "
                "'deepagents', 'langsmith'}))"
            ),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.stdout.strip() == "[]", shown.stderr


def test_signoff_demo_with_an_agent_server_runs_the_agent_there(clone):
    """`signoff demo --agent-server`: the same page; the demo agent on a local `langgraph dev`."""
    port = free_port()
    process = launch(["demo", "--agent-server", "--port", str(port)], clone, newcomer_env())
    base = f"http://127.0.0.1:{port}"

    async def ui(session, what: str, body: dict) -> dict:
        async with session.post(f"{base}/ui/{what}", json=body) as reply:
            return await reply.json()

    async def state(session) -> dict:
        async with session.get(f"{base}/ui/state", params={"user": "U0ALICE"}) as reply:
            return await reply.json()

    async def scenario() -> str:
        import aiohttp

        # As a newcomer does: open the page when the terminal says where it is (the page answers
        # a moment before the bot behind it, and Slack's retry of a lost message comes a minute on).
        banner.append(await asyncio.to_thread(line_with, process, "Signoff demo: open", 120))
        async with aiohttp.ClientSession() as session:
            await ui(
                session, "say", {"user": "U0RILEY", "text": '@signoff Email ops@acme.com "from the server"'}
            )

            async def card() -> dict | None:
                shown = [m for t in (await state(session))["threads"].values() for m in t]
                return next((m for m in shown if "send_email" in json.dumps(m.get("blocks"))), None)

            found = await eventually(card, timeout=60, what="the card")
            clicked = {
                "user": "U0ALICE",
                "channel": found["channel"],
                "ts": found["ts"],
                "action_id": "approve:0",
            }
            assert (await ui(session, "click", clicked))["ok"]

            async def dialog() -> dict | None:  # send_email is destructive: confirmed in a dialog
                return next(
                    (
                        v
                        for v in (await state(session))["views"]
                        if v["callback_id"].startswith("sure:approve")
                    ),
                    None,
                )

            sure = await eventually(dialog, timeout=20, what="the dialog confirming Approve")
            await ui(session, "submit", {"user": "U0ALICE", "view_id": sure["id"], "values": {}})

            async def answer() -> str | None:
                texts = [m["text"] for t in (await state(session))["threads"].values() for m in t]
                return next((t for t in texts if "Email to ops@acme.com sent" in t), None)

            return await eventually(answer, timeout=60, what="the answer")

    banner: list[str] = []
    try:
        said = asyncio.run(scenario())
    finally:
        code, out = stop(process)
        out = "".join(banner) + out
        print(out[-8000:])  # what the demo said, when something above failed
    assert "from the server" in said
    assert code == 0, out
    assert "The agent runs on a local LangGraph Agent Server" in out


def test_the_demo_prints_its_operator_settings_and_a_wrong_prefix_is_warned_of(clone):
    """The demo keeps its keys under its own prefix: it says which, with a line to copy, and an
    operator command under another prefix names the one that holds data instead of saying
    "nothing" and exiting 0."""
    process = launch(["demo", "--port", str(free_port())], clone, newcomer_env())
    try:
        said = line_with(process, "Signoff demo: open", 60)
        assert process.stdout is not None  # (the next two lines, printed with it: read, not selected)
        said += process.stdout.readline() + process.stdout.readline()
        copied = said.splitlines()[-1].split()  # SIGNOFF_PREFIX=… REDIS_URL=… signoff trust list
        settings = dict(word.split("=", 1) for word in copied[:2])
        assert copied[2:] == ["signoff", "trust", "list"] and settings["SIGNOFF_PREFIX"] == "signoff-demo"
        assert f"REDIS_URL={settings['REDIS_URL']}, key prefix signoff-demo" in said

        right = run(["trust", "list"], clone, newcomer_env(**settings))
        wrong = run(["trust", "list"], clone, newcomer_env(REDIS_URL=settings["REDIS_URL"]))
    finally:
        code, out = stop(process)
    assert (right.returncode, right.stdout, right.stderr) == (0, "No trust grants are live.\n", "")
    assert wrong.returncode == 0 and wrong.stderr == (
        "signoff: warning: prefix 'signoff' holds no Signoff data on this Redis, but prefix "
        "'signoff-demo' does: set SIGNOFF_PREFIX=signoff-demo to read it\n"
    )
    assert code == 0, out
