"""`signoff try module:attr [--policy FILE]`: your graph and your policy on the local Slack page.

The same page, bot, runner and Redis as `signoff demo`, with the demo's people (Riley asks;
Alice and Dana are in @finance, S0FINANCE; Bob is in @security, S0SECURITY), running the graph
you name, resolved from the current folder (`myagent:build` next to myagent.py), under the
policy file you name. Both are checked before anything starts, and refused in one line each
as the other commands refuse them; the first lines printed say which graph and which policy
file run, so nobody mistakes the demo's policy for theirs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from pathlib import Path

from agent_runner.graphs import load_target
from core import policy_file
from core.config import Settings, SettingsError


def add_parser(commands: argparse._SubParsersAction) -> None:
    try_cmd = commands.add_parser(
        "try",
        help="your graph and your policy in the local Slack page, run from your graph's folder",
        description="Serve the local Slack page (as `signoff demo` does) with your graph "
        "(module:attr, from the current folder) and your policy file.",
    )
    try_cmd.add_argument("graph", metavar="module:attr", help="your graph or its factory, e.g. myagent:build")
    try_cmd.add_argument(
        "--policy", type=Path, default=None, help="your policy file (default ./signoff.toml when it exists)"
    )
    try_cmd.add_argument("--port", type=int, default=3000, help="the page's port (default 3000)")
    try_cmd.set_defaults(func=cmd_try)


def chosen_policy(given: Path | None) -> Path | None:
    """The policy file `signoff try` runs: --policy, else ./signoff.toml, else none.
    SettingsError (one line per problem) when it is missing or does not read."""
    path = given or Path(policy_file.DEFAULT_FILE)
    if given is None and not path.is_file():
        return None
    if not path.is_file():
        raise SettingsError([f"--policy {given}: no such file"])
    env = {"SIGNOFF_POLICY": str(path), "SIGNOFF_APPROVERS": "", "SIGNOFF_REQUESTER_CANNOT_APPROVE": ""}
    Settings.from_env({**os.environ, **env})
    return path.resolve()


def cmd_try(args: argparse.Namespace, settings: Settings) -> int:
    policy = chosen_policy(args.policy)
    load_target(args.graph)  # GraphLoadError, in one line, before anything starts
    print(f"Signoff try: graph {args.graph} (from {Path.cwd()})", flush=True)
    if policy is None:
        print(
            "Policy: none (no --policy, no ./signoff.toml): anyone may approve, the requester too, "
            "and nothing expires",
            flush=True,
        )
    else:
        print(f"Policy: {policy}", flush=True)
    asyncio.run(_serve(args.port, args.graph, policy))
    return 0


async def _serve(port: int, graph: str, policy: Path | None) -> None:
    from signoff_demo import page, redis_server

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    with redis_server.running(os.environ.get("REDIS_URL")) as redis_url:
        async with page.running_demo(
            redis_url, page_port=port, prefix="signoff-try", policy=policy, graph=graph
        ) as demo:
            print(f"Open {demo.url} (Ctrl-C stops it).", flush=True)
            print(page.operator_settings(redis_url, "signoff-try"), flush=True)
            print(
                "As Riley, write to @signoff; switch to Alice or Dana (@finance, S0FINANCE) or "
                "Bob (@security, S0SECURITY) to decide.",
                flush=True,
            )
            await stop.wait()
