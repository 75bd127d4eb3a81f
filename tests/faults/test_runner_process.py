"""The runner as a process of its own: `signoff serve` restarts its runner child when it dies,
and a runner process yields the CPU (`SIGNOFF_RUNNER_NICE`) to what people wait on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from signoff_demo.redis_server import free_port
from tests.support.files import lines
from tests.support.harness import ROOT, Harness, consumed, eventually, ready
from tests.support.people import ALICE

LEDGER_AGENT = "tests.support.graphs:build_ledger_agent"


def runner_children(pid: int) -> list[int]:
    """The `signoff runner` processes started by process `pid` (its children, from /proc)."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    found = []
    for child in children:
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except FileNotFoundError:
            continue  # exited meanwhile
        if command[-3:-1] == [b"signoff", b"runner"]:
            found.append(child)
    return found


def niceness(pid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, pid)


def niced(to: int) -> int:
    """The niceness a process started by this one has once it took niceness `to` (one started
    nicer than that keeps its own)."""
    return max(niceness(0), to)


async def readiness_report(port: int) -> tuple[int, dict]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/readyz", timeout=aiohttp.ClientTimeout(total=5)) as reply,
    ):
        return reply.status, await reply.json()


@pytest.mark.slow
async def test_serve_restarts_its_runner_when_it_dies_and_runs_go_on_once(redis_url, tmp_path):
    ledger = tmp_path / "ledger.txt"
    async with Harness(redis_url) as scene:
        serve = scene.spawn("serve", SIGNOFF_GRAPH=LEDGER_AGENT, SIGNOFF_TEST_LEDGER=ledger)
        await eventually(lambda: ready(scene.port), timeout=60, what="serve ready")
        (first,) = runner_children(serve.pid)
        # the runner child yields the CPU; the bot that acks clicks keeps the priority it was given
        assert (niceness(first), niceness(serve.pid)) == (niced(10), niceness(0))

        os.kill(first, signal.SIGKILL)

        status, report = await eventually(
            lambda: _not_ready(scene.port), timeout=30, what="/readyz saying the runner is down"
        )
        assert status == 503 and "runner process" in report["problems"], report
        await eventually(lambda: ready(scene.port), timeout=60, what="serve ready again")
        (second,) = runner_children(serve.pid)
        assert second != first and serve.poll() is None

        thread_id = await scene.ask("send the mail", graph="ledger")
        assert (await scene.standin.click(ALICE, await scene.card(thread_id, timeout=30), "approve:0")).acked
        assert "Sent." in await scene.answer(thread_id, timeout=30)
        await eventually(lambda: consumed(scene.store), what="the runner acknowledging every command")

        assert lines(ledger) == ["a@acme.com"]
        assert len(await scene.messages(thread_id, "answer")) == 1


async def _not_ready(port: int) -> tuple[int, dict] | None:
    try:
        status, report = await readiness_report(port)
    except (TimeoutError, aiohttp.ClientError):
        return None
    return (status, report) if status != 200 else None


@pytest.mark.slow
@pytest.mark.parametrize(("setting", "taken"), [(None, 10), ("3", 3)])
async def test_a_runner_process_takes_the_niceness_it_is_given(redis_url, monkeypatch, setting, taken):
    monkeypatch.delenv("SIGNOFF_RUNNER_NICE", raising=False)
    env = {"SIGNOFF_RUNNER_NICE": setting} if setting is not None else {}
    async with Harness(redis_url) as scene:
        port = free_port()
        runner = scene.spawn("runner", SIGNOFF_GRAPH=LEDGER_AGENT, SIGNOFF_RUNNER_PORT=port, **env)
        await eventually(lambda: ready(port), timeout=60, what="the runner ready")

        assert niceness(runner.pid) == niced(taken)


def test_a_runner_niceness_out_of_range_refuses_to_start_naming_the_variable(redis_url):
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")},
        "REDIS_URL": redis_url,
        "SIGNOFF_GRAPH": LEDGER_AGENT,
        "SIGNOFF_RUNNER_NICE": "20",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-m", "signoff", "runner"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,  # a runner that starts anyway serves until killed
    )

    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "signoff: these settings make no sense, so nothing was started:",
        "  SIGNOFF_RUNNER_NICE='20': Input should be less than or equal to 19",
    ]
