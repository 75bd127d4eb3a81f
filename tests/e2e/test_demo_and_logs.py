"""`signoff demo` runs the walkthrough; logs are structured with bound context."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.paths import SIGNOFF


def test_demo_walks_through_every_scenario(layout_url):
    """On one server and with REDIS_URL naming the cluster (the same command, nothing else set)."""
    result = subprocess.run(
        [*SIGNOFF, "demo", "--walkthrough"],
        env={**os.environ, "REDIS_URL": layout_url},
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = result.stdout

    assert result.returncode == 0, result.stderr
    assert "┌ The agent wants to run send_email" in out
    assert "[Approve] [Reject]" in out
    assert "Refunded 500 on order 1234" in out
    assert "the reviewer said: Over the monthly limit; ask Dana first." in out
    assert "✗ refused before reaching LangGraph: write_file: 'accept' is not a decision" in out
    assert "Updated file /plans/launch-v2.md" in out
    assert "┌ 2 actions need review" in out
    assert "Refunded 2500 on order 77" in out
    assert "Traceback" not in result.stderr


def test_json_logs_carry_the_bound_thread_and_interrupt(tmp_path):
    program = """
import structlog
from core.logs import configure_logging, get_logger
configure_logging()
with structlog.contextvars.bound_contextvars(thread_id="t-1"):
    get_logger("runner").bind(interrupt_id="i-1").info("paused", tool="write_file")
"""
    result = subprocess.run(
        [sys.executable, "-c", program],
        env={**os.environ, "LOG_FORMAT": "json"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    line = json.loads(result.stderr.strip())

    assert line["event"] == "paused"
    assert line["thread_id"] == "t-1"
    assert line["interrupt_id"] == "i-1"
    assert line["component"] == "runner"
    assert line["level"] == "info"
