"""The `signoff` command as a newcomer runs it: a process of its own, in a shell without
Signoff's settings, read line by line as it prints."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

SIGNOFF_SCRIPT = str(Path(sys.executable).parent / "signoff")


def newcomer_env(**extra: str) -> dict[str, str]:
    """A shell without any of Signoff's settings (as on a new machine), plus `extra`."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SIGNOFF_", "SLACK_", "REDIS_URL", "PORT"))
    }
    return {**env, "LOG_FORMAT": "json", **extra}


def launch(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [SIGNOFF_SCRIPT, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def stop(process: subprocess.Popen[str], signum: int = signal.SIGINT, timeout: float = 30) -> tuple[int, str]:
    if process.poll() is None:
        process.send_signal(signum)
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
    return process.returncode, out


def line_with(process: subprocess.Popen[str], text: str, timeout: float) -> str:
    """What the process printed up to the first line holding `text` (read as it comes)."""
    deadline, seen = time.monotonic() + timeout, []
    while time.monotonic() < deadline and process.stdout is not None:
        if not select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
            break  # nothing more within the time
        line = process.stdout.readline()
        if not line:
            break  # it exited
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"no line with {text!r}: {''.join(seen)[-2000:]}")


def run(
    args: list[str], cwd: Path, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SIGNOFF_SCRIPT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
