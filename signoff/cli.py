"""The `signoff` command: the process edge, where settings are read and checked once.

Anything that stops a process from starting (settings that make no sense, a
port in use, no graph to run, Redis without its modules) is said in one line
per problem on stderr, with exit code 2: never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import re
import signal
import sys
import time
import traceback
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any

from core import connections
from core.config import Settings, SettingsError, StartupError
from core.graphs import GraphLoadError
from core.health import Health
from core.logs import configure_logging, redact
from signoff import try_graph

Service = Callable[[Settings, asyncio.Event, Health], Coroutine[Any, Any, None]]


def cmd_redis(args: argparse.Namespace, settings: Settings) -> int:
    from signoff_demo import redis_server  # development tooling: only `signoff redis` and the demo load it

    if settings.redis_url:
        connections.check_server(settings.redis_url)
        shown = connections.hidden(settings.redis_url)
        print(f"REDIS_URL is set: using {shown} (ReJSON and search present); starting nothing.")
        return 0
    appendonly = args.appendonly == "yes"
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    # before the server starts: a Ctrl-C as soon as REDIS_URL is printed still stops it cleanly
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    server: redis_server.LocalRedis | redis_server.LocalCluster
    if args.cluster:
        data_dir = args.data_dir or Path(".signoff/redis-cluster")
        server = redis_server.start_cluster(
            args.cluster, port=args.port, data_dir=data_dir, appendonly=appendonly
        )
        what = f"a Redis Cluster of {args.cluster} masters (redis-server 8 with ReJSON + search)"
        processes = [node.process for node in server.nodes]
    else:
        data_dir = args.data_dir or Path(".signoff/redis")
        server = redis_server.start(port=args.port, data_dir=data_dir, appendonly=appendonly)
        what = "redis-server 8 with ReJSON + search"
        processes = [server.process]
    print(f"REDIS_URL={server.url}", flush=True)
    print(f"{what}, data in {server.data_dir} (appendonly {args.appendonly}). Ctrl-C stops it.", flush=True)
    try:
        while not stopping and all(p.poll() is None for p in processes):
            time.sleep(0.2)
    finally:
        server.stop()
    if not stopping:
        code = next(p.returncode for p in processes if p.returncode is not None)
        print(f"redis-server exited on its own (code {code}); see the redis.log files in {server.data_dir}")
        return 1
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from signoff_demo import redis_server

    if args.walkthrough:
        from signoff_demo import walkthrough

        with redis_server.running(settings.redis_url) as url:
            return walkthrough.main(url)
    if settings.slack_bot_token and settings.slack_app_token:
        # A real workspace over Socket Mode: the same bot and demo agent.
        with redis_server.running(settings.redis_url) as url:
            os.environ["REDIS_URL"] = url
            os.environ.setdefault("SIGNOFF_GRAPH", "signoff_demo.agent:build_demo_agent")
            print("Signoff demo: connected to your Slack workspace over Socket Mode (Ctrl-C stops it).")
            return cmd_serve(args, Settings.from_env())
    from signoff_demo import page

    asyncio.run(page.serve(args.port, agent_server=args.agent_server))
    return 0


def serve_until_signalled(settings: Settings, *services: Service) -> int:
    """Run the given services until SIGINT / SIGTERM; they share one readiness (`Health`)."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        health = Health()
        tasks = [asyncio.create_task(service(settings, stop, health)) for service in services]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        stop.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    return 0


def cmd_bot(args: argparse.Namespace, settings: Settings) -> int:
    from bot.app import run_bot

    return serve_until_signalled(settings, run_bot)


def cmd_runner(args: argparse.Namespace, settings: Settings) -> int:
    from agent_runner.worker import run_runner

    # A runner process of its own yields the CPU to what people wait on (acks, Redis) on a shared host:
    # it takes the niceness it is given (never a higher priority than it was started with).
    current = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, max(current, settings.runner_nice))
    return serve_until_signalled(settings, run_runner)


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    """Bot and runner on one machine. The runner is a child process of its own: an agent's
    work never shares the event loop (or the GIL) that answers Slack's clicks."""
    from bot.app import BOT_LOOPS, run_bot
    from signoff.serve import RUNNER_CHECK, supervise_runner

    bot = functools.partial(run_bot, loops=(*BOT_LOOPS, RUNNER_CHECK))
    return serve_until_signalled(settings, bot, supervise_runner)


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    """Queue a run whose Slack thread is a new message in the channel; a runner picks it up."""
    from core.graphs import default_graph, graph_specs
    from core.producer import start_run
    from core.store import LOCAL_REDIS, Store

    channel = args.channel or settings.channel
    if not channel:
        raise StartupError("say where the run talks: --channel C0123 (or set SIGNOFF_CHANNEL)")
    local = graph_specs(settings)
    graph = args.graph or default_graph(settings, local)
    specs = list(local)
    if graph not in specs:
        specs += [name for name in asyncio.run(_assistants(settings)) if name not in specs]
        graph = graph or next(iter(specs), None)
    if graph not in specs:
        where = "set SIGNOFF_GRAPH or SIGNOFF_AGENT_SERVER_URL"
        raise StartupError(f"no graph {graph!r}; graphs: {', '.join(specs) or f'none ({where})'}")
    connections.check_server(settings.redis_url or LOCAL_REDIS)

    async def queue() -> str:
        store = Store.from_settings(settings)
        try:
            await store.layout.check()
            return await start_run(store, args.task, channel, graph)
        finally:
            await store.close()

    print(asyncio.run(queue()))
    return 0


async def _assistants(settings: Settings) -> list[str]:
    """The Agent Server's assistants (none without SIGNOFF_AGENT_SERVER_URL)."""
    import httpx

    from core.agent_server import ServerAway, agent_server

    server = agent_server(settings)
    if server is None:
        return []
    try:
        return list(await server.refresh())
    except ServerAway as away:
        raise StartupError(f"SIGNOFF_AGENT_SERVER_URL={settings.agent_server_url}: {away}") from None
    except httpx.HTTPStatusError as exc:
        raise StartupError(
            f"SIGNOFF_AGENT_SERVER_URL={settings.agent_server_url} answered {exc.response.status_code}: "
            "check SIGNOFF_AGENT_SERVER_API_KEY"
        ) from None
    finally:
        await server.close()


def _with_store(
    settings: Settings, work: Callable[[Any], Coroutine[Any, Any, int]], check_layout: bool = True
) -> int:
    """Run an operator command against the configured Redis (REDIS_URL)."""
    from core.store import Store

    if not settings.redis_url:
        raise StartupError("set REDIS_URL to the Redis the bot and runner use")
    connections.check_server(settings.redis_url)

    async def main() -> int:
        store = Store.from_settings(settings)
        try:
            if check_layout:
                await store.layout.check(record=False)
                _warn_of_other_prefixes(settings.prefix, await store.layout.elsewhere())
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(main())


def _warn_of_other_prefixes(prefix: str, others: list[str]) -> None:
    """On stderr (an export on stdout stays clean): this prefix holds nothing, others do."""
    if not others:
        return
    named = ", ".join(repr(p) for p in others[:3]) + (
        f" and {len(others) - 3} more" if len(others) > 3 else ""
    )
    print(
        f"signoff: warning: prefix {prefix!r} holds no Signoff data on this Redis, but "
        f"{'prefix' if len(others) == 1 else 'prefixes'} {named} {'does' if len(others) == 1 else 'do'}: "
        f"set SIGNOFF_PREFIX={others[0]} to read {'it' if len(others) == 1 else 'one'}",
        file=sys.stderr,
    )


def cmd_pending(args: argparse.Namespace, settings: Settings) -> int:
    """What waits for a decision: where, for whom, how long."""
    from signoff.commands import pending

    return _with_store(settings, lambda store: pending.pending(store, settings.policy, sys.stdout))


def cmd_audit(args: argparse.Namespace, settings: Settings) -> int:
    """Who decided what, with the original and edited arguments (JSON lines or CSV); `verify`:
    check the audit's hash chains, live or of an export, and an export's signature."""
    from signoff.commands import audit, audit_verify

    try:
        if args.action == "verify":
            return _audit_verify(args, settings)
        if args.file:
            raise StartupError("a FILE is for `signoff audit verify FILE`; an export goes to --output FILE")
        if args.key:
            raise StartupError("--key checks a signature: `signoff audit verify FILE --key PUB`")
        if args.sign and not args.output:
            raise StartupError("--sign needs --output FILE: the signature goes beside it, in FILE.sig")
        key = audit_verify.private_key(args.sign) if args.sign else None
        audit.since_time(args.since, time.time())
    except ValueError as exc:
        raise StartupError(str(exc)) from None
    if not args.output:
        return _with_store(
            settings,
            lambda store: audit.audit(store, sys.stdout, args.since, args.tool, args.user, args.format),
        )
    try:
        out = open(args.output, "w", encoding="utf-8", newline="")  # closed below, once written
    except OSError as exc:
        raise StartupError(f"--output {args.output}: cannot write it ({exc.strerror})") from None
    with out:
        code = _with_store(
            settings, lambda store: audit.audit(store, out, args.since, args.tool, args.user, args.format)
        )
    if key is not None:
        print(f"Signed: {audit_verify.sign(args.output, key)}", file=sys.stderr)
    return code


def _audit_verify(args: argparse.Namespace, settings: Settings) -> int:
    from signoff.commands import audit_verify

    if args.file:
        return audit_verify.verify_file(args.file, args.key, sys.stdout)
    if args.key:
        raise StartupError("--key checks an export's signature: `signoff audit verify FILE --key PUB`")
    return _with_store(settings, lambda store: audit_verify.verify_live(store, sys.stdout))


def cmd_deadletters(args: argparse.Namespace, settings: Settings) -> int:
    """Entries no consumer could handle: list, show, replay (checked as a first delivery) or drop."""
    from signoff.commands import deadletters

    if args.action != "list" and not args.id:
        raise StartupError(f"deadletters {args.action} needs the entry id (see `signoff deadletters list`)")
    actions = {
        "list": lambda store: deadletters.deadletters_list(store, sys.stdout),
        "show": lambda store: deadletters.deadletters_show(
            store, args.id, sys.stdout, settings.policy.redactions
        ),
        "replay": lambda store: deadletters.deadletters_replay(store, args.id, sys.stdout),
        "drop": lambda store: deadletters.deadletters_drop(store, args.id, sys.stdout),
    }
    return _with_store(settings, actions[args.action])


def cmd_trust(args: argparse.Namespace, settings: Settings) -> int:
    """Trust grants: list the live ones, or revoke one (for the next call on)."""
    from signoff.commands import trust

    if args.action == "revoke":
        if not args.id or not re.fullmatch(r"[0-9a-f]{20}", args.id):
            raise StartupError("trust revoke needs a grant id, 20 hex digits (see `signoff trust list`)")
        return _with_store(settings, lambda store: trust.trust_revoke(store, args.id, args.by, sys.stdout))
    return _with_store(settings, lambda store: trust.trust_list(store, sys.stdout))


def cmd_passkeys(args: argparse.Namespace, settings: Settings) -> int:
    """A person's passkeys: list them, or remove one."""
    from signoff.commands import passkeys

    if args.action == "remove":
        if not args.id:
            raise StartupError(
                "passkeys remove needs USER and the passkey's id (see `signoff passkeys list USER`)"
            )
        return _with_store(
            settings, lambda store: passkeys.passkeys_remove(store, args.user, args.id, sys.stdout)
        )
    return _with_store(settings, lambda store: passkeys.passkeys_list(store, args.user, sys.stdout))


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    """Move the keys of the layout before partitions into the partitioned one (all stopped);
    `--rekey`: write the checkpoints again under SIGNOFF_CHECKPOINT_KEY."""
    from signoff.commands import migrate

    if args.rekey:
        from agent_runner.checkpointer import CheckpointKeys

        keys = CheckpointKeys.from_settings(settings)
        url = settings.redis_url
        return _with_store(settings, lambda store: migrate.rekey(store, url or "", keys, sys.stdout))
    return _with_store(
        settings, lambda store: migrate.migrate(store, sys.stdout, args.quiet), check_layout=False
    )


def cmd_doctor(args: argparse.Namespace, settings: Settings) -> int:
    """Check the Slack token and its scopes, the channels, Redis, the policy and the graphs."""
    from core.store import Store
    from signoff import doctor
    from signoff.slack_doctor import slack_checks

    async def main() -> int:
        from slack_sdk.web.async_client import AsyncWebClient

        slack = config = None
        if settings.slack_bot_token:
            slack = AsyncWebClient(token=settings.slack_bot_token, base_url=settings.slack_api_url)
        if settings.slack_config_token:  # (the app's manifest: apps.manifest.export)
            config = AsyncWebClient(token=settings.slack_config_token, base_url=settings.slack_api_url)
        store = Store.from_settings(settings) if settings.redis_url else None
        try:
            checks = await doctor.doctor(settings, store, await slack_checks(settings, slack, config))
            return doctor.report(checks, sys.stdout)
        finally:
            if store is not None:
                await store.close()

    return asyncio.run(main())


Commands = argparse._SubParsersAction  # what `add_subparsers` returns


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="signoff", description="Slack approvals for LangGraph agents.")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_redis(commands)
    _add_demo(commands)
    try_graph.add_parser(commands)
    _add_processes(commands)
    _add_run(commands)
    _add_operator_commands(commands)
    _add_passkeys_command(commands)
    commands.add_parser(
        "doctor", help="check the Slack token and scopes, channels, Redis, the policy and the graphs"
    ).set_defaults(func=cmd_doctor)
    return parser


def _add_redis(commands: Commands) -> None:
    redis_cmd = commands.add_parser("redis", help="run a local Redis (or Redis Cluster) with ReJSON + search")
    redis_cmd.add_argument(
        "--port", type=int, default=None, help="default: a free port (a cluster's nodes: from here up)"
    )
    redis_cmd.add_argument(
        "--data-dir", type=Path, default=None, help="default: .signoff/redis (.signoff/redis-cluster)"
    )
    redis_cmd.add_argument(
        "--cluster", type=int, default=0, metavar="N", help="a local Redis Cluster of N masters instead"
    )
    redis_cmd.add_argument("--appendonly", choices=["yes", "no"], default="yes")
    redis_cmd.set_defaults(func=cmd_redis)


def _add_demo(commands: Commands) -> None:
    demo_cmd = commands.add_parser(
        "demo", help="the whole loop in a local Slack you can click (or your workspace)"
    )
    demo_cmd.add_argument("--port", type=int, default=3000, help="the page's port (default 3000)")
    demo_cmd.add_argument(
        "--walkthrough",
        action="store_true",
        help="no page: play the scenarios in the terminal with a scripted reviewer",
    )
    demo_cmd.add_argument(
        "--agent-server",
        action="store_true",
        help="the demo agent on a local LangGraph Agent Server (`langgraph dev`), reached by langgraph-sdk",
    )
    demo_cmd.set_defaults(func=cmd_demo)


def _add_processes(commands: Commands) -> None:
    """The long-running processes: bot, runner, and both in one (serve)."""
    commands.add_parser(
        "bot", help="the Slack bot: HTTP on $PORT, or Socket Mode with SLACK_APP_TOKEN"
    ).set_defaults(func=cmd_bot)
    commands.add_parser("runner", help="run your graphs: start and resume commands from Redis").set_defaults(
        func=cmd_runner
    )
    commands.add_parser("serve", help="bot and runner on one machine, for small installs").set_defaults(
        func=cmd_serve
    )


def _add_run(commands: Commands) -> None:
    run_cmd = commands.add_parser("run", help="start a run whose Slack thread is a new message in a channel")
    run_cmd.add_argument("task")
    run_cmd.add_argument("--graph", default=None, help="a graph name (default: the default graph)")
    run_cmd.add_argument("--channel", default=None, help="default: $SIGNOFF_CHANNEL")
    run_cmd.set_defaults(func=cmd_run)


def _add_passkeys_command(commands: Commands) -> None:
    passkeys_cmd = commands.add_parser(
        "passkeys", help="a person's passkeys (step-up): list them, remove one"
    )
    passkeys_cmd.add_argument("action", choices=["list", "remove"])
    passkeys_cmd.add_argument("user", help="the person's Slack user id (U…)")
    passkeys_cmd.add_argument("id", nargs="?", default=None, help="the passkey's id (from `list`)")
    passkeys_cmd.set_defaults(func=cmd_passkeys)


def _add_operator_commands(commands: Commands) -> None:
    """`signoff.commands`: pending, audit, deadletters, trust, migrate."""
    commands.add_parser("pending", help="what waits for a decision: where, for whom, how long").set_defaults(
        func=cmd_pending
    )
    audit_cmd = commands.add_parser(
        "audit",
        help="who decided what, with original and edited arguments; `audit verify [FILE]`: check it",
        description="Export the audit (`signoff audit`), or check its hash chains and an export's "
        "signature (`signoff audit verify [FILE] [--key PUB]`: exit 0 when it verifies, 1 naming "
        "the first entry that does not).",
    )
    audit_cmd.add_argument("action", nargs="?", choices=["verify"], help="verify the live audit, or FILE")
    audit_cmd.add_argument("file", nargs="?", default=None, help="an export (JSON lines) to verify")
    audit_cmd.add_argument("--since", default=None, help="a duration back (7d, 12h) or a date (2026-11-01)")
    audit_cmd.add_argument("--tool", default=None)
    audit_cmd.add_argument("--user", default=None, help="a Slack user id (U…)")
    audit_cmd.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
    audit_cmd.add_argument("-o", "--output", default=None, help="write the export to this file, not stdout")
    audit_cmd.add_argument(
        "--sign",
        default=None,
        metavar="KEY",
        help="an Ed25519 private key (PEM): sign the export, in OUTPUT.sig",
    )
    audit_cmd.add_argument(
        "--key",
        default=None,
        metavar="PUB",
        help="verify FILE's signature (FILE.sig) with this public key (PEM)",
    )
    audit_cmd.set_defaults(func=cmd_audit)
    dead_cmd = commands.add_parser("deadletters", help="entries no consumer could handle")
    dead_cmd.add_argument("action", choices=["list", "show", "replay", "drop"])
    dead_cmd.add_argument("id", nargs="?", default=None, help="the dead letter's id (from `list`)")
    dead_cmd.set_defaults(func=cmd_deadletters)
    trust_cmd = commands.add_parser("trust", help="trust grants: list the live ones, revoke one")
    trust_cmd.add_argument("action", choices=["list", "revoke"])
    trust_cmd.add_argument("id", nargs="?", default=None, help="the grant's id (from `list`)")
    trust_cmd.add_argument("--by", default="operator", help="who revokes, for the audit (operator)")
    trust_cmd.set_defaults(func=cmd_trust)
    migrate_cmd = commands.add_parser(
        "migrate",
        help="move data from before partitioned keys into them (bots and runners stopped); "
        "--rekey: encrypt the checkpoints again under SIGNOFF_CHECKPOINT_KEY",
    )
    migrate_cmd.add_argument(
        "--quiet", type=float, default=10.0, help="seconds every old consumer must have been silent (10)"
    )
    migrate_cmd.add_argument(
        "--rekey",
        action="store_true",
        help="write every stored checkpoint again under SIGNOFF_CHECKPOINT_KEY (safe while running; "
        "see docs/security.md)",
    )
    migrate_cmd.set_defaults(func=cmd_migrate)


def main(argv: list[str] | None = None) -> int:
    sys.excepthook = _redacted_excepthook
    args = build_parser().parse_args(argv)
    if args.command in ("demo", "try"):
        os.environ.setdefault("LOG_LEVEL", "WARNING")
    try:
        settings = Settings.from_env()
        configure_logging(settings.log_format, settings.log_level)
        return int(args.func(args, settings))
    except SettingsError as exc:
        print("signoff: these settings make no sense, so nothing was started:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    except (connections.RedisSetupError, GraphLoadError, StartupError) as exc:
        print(f"signoff: {redact(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """`signoff audit | head`: the reader left before the output ended. Nothing more to say;
    stdout points at /dev/null so the flush at exit does not fail again (Python's advice), and
    the exit code is a shell's for a command a closed pipe stopped (128 + SIGPIPE)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 128 + signal.SIGPIPE


def _redacted_excepthook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    """An unexpected crash still prints its traceback, with URL credentials redacted."""
    sys.stderr.write(redact("".join(traceback.format_exception(kind, exc, tb))))
