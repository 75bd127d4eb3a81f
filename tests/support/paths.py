"""Where the repository and the tests' files are, and how a test starts `signoff` as a process."""

from __future__ import annotations

import sys
from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
ROOT = SUPPORT.parent.parent
LANGGRAPH_JSON = SUPPORT / "langgraph.json"  # the graphs of tests/support/graphs.py, by name
SKEWED_CLOCK = SUPPORT / "skewed_clock"  # first on PYTHONPATH: a process whose clock is off
AGENT_SERVER_PROJECT = SUPPORT / "agent_server"  # what `langgraph dev` serves in the tests
SIGNOFF = [sys.executable, "-m", "signoff"]
