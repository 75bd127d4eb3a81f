"""Click-to-ack latency: Signoff's layouts against a bare Bolt app, same signed clicks, one run.

    .venv/bin/python bench/click_ack.py [--approvals 100] [--rate 100] [--rounds 3] [REDIS_URL]

Layouts measured, each against the bare app in the same round:

* `bot + runner`: `signoff bot` and `signoff runner` as two processes (the Procfile);
* `serve`: `signoff serve` (the bot, with the runner as its child process).

Each round starts `--approvals` real runs of the demo agent (a refund that
needs approval), waits for their cards, then clicks Approve on every card at
`--rate` clicks a second, open loop (a click every 1/rate s, whether or not
earlier ones were answered), while the agents resume, run their tools and
post their answers: the load a click meets in production. The bare app (its
listener only acks, `process_before_response=True`) gets the same signed
payloads at the same rate, at the same time (each app's clicks interleaved with
the other's, so both meet the agents' load; `--bare-first` clicks the bare app
first, on a quiet machine, as the first measurements did). The clicks are sent and timed by
`bench/clicker.py`, a process of its own, as Slack's sender is: the stand-in's
loop also serves the app's Web API calls (which a bare app does not make), and
a clock in that loop counted their cost into the app's acks. Prints p50 / p99
per layout and the ratios, and each app's CPU per click. Not a test: no thresholds.

`--hostile N` loads a policy whose `when` reads a call's list item by item
(`args.items.all(t, t >= 0)`: cel-python takes ~70 µs an item), and starts N
runs whose calls carry 4,900 items while the clicks are sent: each card's terms
take ~0.35 s of evaluation (in the bot's condition process), which an ack must
never wait for.

`--features` runs the same clicks with the work other issues added when a card is made: a
preview hook on the refund (`bench/refund_preview.py`), a policy that redacts its order id and
asks for a passkey on another tool (`step_up`; the refund's rule asks none, so one tap still
approves), and secret detection on every argument (always on). None of it may reach the ack.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.producer import start_run  # noqa: E402
from core.store import Store  # noqa: E402
from signoff_demo import redis_server  # noqa: E402
from slack_standin import Message, SlackStandin  # noqa: E402

SECRET = "bench-secret"
CHANNELS = [f"C0BENCH{n}" for n in range(10)]
LAYOUTS = {"bot + runner": [["bot"], ["runner"]], "serve": [["serve"]]}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def wait_ready(port: int, path: str = "readyz", timeout: float = 90) -> None:
    """Until GET /path answers 200 (or, for the bare app, anything at all)."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(f"http://127.0.0.1:{port}/{path}") as reply:
                    if reply.status == 200 or path != "readyz":
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"nothing ready on {port}")


async def clicks_at(
    standin: SlackStandin, urls: list[str], cards: list[Message], rate: float
) -> list[list[float]]:
    """Approve every card in each app of `urls`, `rate` clicks a second to each, open loop; the
    apps' clicks interleaved evenly, each app first in turn (each app's n-th click at n / rate s,
    offset by ((k + n) % apps) / (rate * apps) for the k-th app), so every app meets the same load
    (the app clicked just after Signoff meets its after-ack work). Sent by `bench/clicker.py` in
    a process of its own (as Slack's sender is not slowed by the app's Web API calls, which the
    stand-in serves in this one). The ack latencies, per app."""
    requests = [
        (
            n / rate + (k + n) % len(urls) / (rate * len(urls)),
            url,
            *standin.click_request(f"U{n:05d}", card, "approve:0"),
        )
        for n, card in enumerate(cards)
        for k, url in enumerate(urls)
    ]
    clicker = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "bench" / "clicker.py"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    sent, _ = await clicker.communicate(json.dumps(requests).encode())
    if clicker.returncode != 0:
        raise RuntimeError(f"the clicker failed ({clicker.returncode})")
    acks: list[float] = json.loads(sent)
    return [acks[k :: len(urls)] for k in range(len(urls))]


async def cards_of(
    standin: SlackStandin, store: Store, threads: list[str], timeout: float = 180
) -> list[Message]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = {}
        for message in standin.messages:
            if message.kind == "approval":
                found[(message.metadata or {}).get("event_payload", {}).get("thread_id")] = message
        if all(t in found for t in threads):
            return [found[t] for t in threads]
        await asyncio.sleep(0.2)
    raise RuntimeError(f"only {len(found)} of {len(threads)} cards arrived")


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) the process used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def clicked(
    standin: SlackStandin, apps: dict[str, int], cards: list[Message], rate: float, profile: Path | None
) -> list[tuple[list[float], float]]:
    """Each app's (`apps`: its URL -> its process id) ack latencies, and the CPU seconds its
    process spent per click from the first click to a second after the last (the work the
    clicks started after their ack included), the apps clicked together (`clicks_at`). With
    `profile`, py-spy samples the first app's process meanwhile (a raw file of stacks)."""
    spy = None
    if profile is not None:
        seconds = str(int(len(cards) / rate + 2))
        spy = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("py-spy")),  # (the one the bench extra installed)
                "record",
                "--pid",
                str(next(iter(apps.values()))),
                "-d",
                seconds,
                "-r",
                "200",
                "-f",
                "raw",
                "-o",
                str(profile),
            ],
            stdout=subprocess.DEVNULL,
        )
    began = [cpu_of(pid) for pid in apps.values()]
    acks = await clicks_at(standin, list(apps), cards, rate)
    await asyncio.sleep(1)
    spent = [(cpu_of(pid) - b) / len(cards) for pid, b in zip(apps.values(), began, strict=True)]
    if spy is not None:
        spy.wait(60)
    return list(zip(acks, spent, strict=True))


HOSTILE_POLICY = """
[[rules]]
name = "Tags"
tools = ["tag_items"]
when = 'args.items.all(t, t >= 0)'
"""


def hostile_files(workdir: Path) -> dict[str, str]:
    """The environment of `--hostile`: its policy, and a langgraph.json with the demo agent and
    the tagging agent (tests/support/graphs.py)."""
    (workdir / "signoff.toml").write_text(HOSTILE_POLICY)
    graphs = {
        "graphs": {
            "demo": str(ROOT / "signoff_demo" / "agent.py") + ":build_demo_agent",
            "tagging": str(ROOT / "tests" / "support" / "graphs.py") + ":build_tagging_agent",
        }
    }
    (workdir / "langgraph.json").write_text(json.dumps(graphs))
    return {
        "SIGNOFF_POLICY": str(workdir / "signoff.toml"),
        "SIGNOFF_GRAPHS_FILE": str(workdir / "langgraph.json"),
    }


FEATURES_POLICY = """
[[rules]]
name = "Refunds"
tools = ["issue_refund"]
redact = ["args.order_id"]

[[rules]]
name = "Email"
tools = ["send_email"]
step_up = "passkey"
"""


def features_files(workdir: Path) -> dict[str, str]:
    """The environment of `--features`: its policy and the refund's preview hook."""
    (workdir / "signoff.toml").write_text(FEATURES_POLICY)
    hook = str(ROOT / "bench" / "refund_preview.py") + ":refund"
    return {
        "SIGNOFF_POLICY": str(workdir / "signoff.toml"),
        "SIGNOFF_PREVIEWS": json.dumps({"issue_refund": hook}),
    }


async def hostile_runs(store: Store, count: int, over_s: float) -> None:
    """`count` runs whose calls a `when` reads item by item, started evenly over `over_s`."""
    for n in range(count):
        await start_run(store, "Tag 4900 items", CHANNELS[n % len(CHANNELS)], "tagging", requester="U0RILEY")
        await asyncio.sleep(over_s / max(1, count))


def signoff_env(standin: SlackStandin, redis_url: str, prefix: str, port: int) -> dict[str, str]:
    """The environment of a bench's Signoff processes: the stand-in, the round's key prefix, the
    demo agent, the bot on `port`."""
    return {
        **os.environ,
        "REDIS_URL": redis_url,
        "SIGNOFF_PREFIX": prefix,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_BOT_TOKEN": standin.token,
        "SLACK_API_URL": standin.base_url,
        "LOG_LEVEL": "WARNING",
        "SIGNOFF_GRAPH": "signoff_demo.agent:build_demo_agent",
        # One tap approves a refund here (a person would confirm it in a dialog first: a
        # different request, not what these benches click).
        "SIGNOFF_DESTRUCTIVE_TOOLS": "none",
        "SIGNOFF_GRAPHS_FILE": os.devnull,
        "PYTHONPATH": str(ROOT),
        "PORT": str(port),
    }


async def round_of(
    layout: str,
    redis_url: str,
    approvals: int,
    rate: float,
    profile: Path | None,
    bare_first: bool,
    hostile: int = 0,
    features: bool = False,
) -> tuple[list[float], list[float], float, float]:
    prefix = f"bench{os.getpid()}{int(time.time() * 1000) % 100000}"
    store = Store.from_url(redis_url, prefix)
    standin = SlackStandin(SECRET)
    await standin.start()
    bot_port, bare_port = redis_server.free_port(), redis_server.free_port()
    env = signoff_env(standin, redis_url, prefix, bot_port)
    if hostile:
        env.pop("SIGNOFF_GRAPH")
        env.update(hostile_files(Path(tempfile.mkdtemp(prefix="signoff-hostile-"))))
    if features:  # (a passkey page needs the bot's address: step_up is on a rule)
        env.update(features_files(Path(tempfile.mkdtemp(prefix="signoff-features-"))))
        env["SIGNOFF_PUBLIC_URL"] = f"http://localhost:{bot_port}"
    servers = [
        subprocess.Popen([sys.executable, "-m", "signoff", *args], env=env) for args in LAYOUTS[layout]
    ]
    servers.append(
        subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "bare_bolt.py")], env={**env, "PORT": str(bare_port)}
        )
    )
    try:
        await wait_ready(bot_port)
        await wait_ready(bare_port, "slack/events")
        threads = [
            await start_run(
                store, f"Refund order {n} for 5000", CHANNELS[n % len(CHANNELS)], "demo", requester="U0RILEY"
            )
            for n in range(approvals)
        ]
        cards = await cards_of(standin, store, threads)
        await asyncio.sleep(2)  # let the status lines and card posts settle, as a person would take a moment
        bot_url, bare_url = (f"http://127.0.0.1:{port}/slack/events" for port in (bot_port, bare_port))
        if bare_first:  # (the way of issue 28's first measurements: the bare app on a quiet machine)
            [(bare, bare_cpu)] = await clicked(standin, {bare_url: servers[-1].pid}, cards, rate, None)
            [(signoff, bot_cpu)] = await clicked(standin, {bot_url: servers[0].pid}, cards, rate, profile)
        else:
            apps = {bot_url: servers[0].pid, bare_url: servers[-1].pid}
            tagging = asyncio.create_task(hostile_runs(store, hostile, approvals / rate)) if hostile else None
            (signoff, bot_cpu), (bare, bare_cpu) = await clicked(standin, apps, cards, rate, profile)
            if tagging is not None:
                await tagging
        answered = sum(m.kind == "answer" for m in standin.messages)
        deadline = time.monotonic() + 120
        while answered < approvals and time.monotonic() < deadline:  # the work the clicks started
            await asyncio.sleep(0.5)
            answered = sum(m.kind == "answer" for m in standin.messages)
        print(f"  round ({layout}): {answered}/{approvals} answers posted", flush=True)
        return signoff, bare, bot_cpu, bare_cpu
    finally:
        await wind_up(servers, standin, store, prefix)


async def wind_up(
    servers: list[subprocess.Popen[bytes]], standin: SlackStandin, store: Store, prefix: str
) -> None:
    """Stop a round's processes and the stand-in, and delete the round's keys."""
    for server in servers:
        server.terminate()
    for server in servers:
        try:
            server.wait(40)
        except subprocess.TimeoutExpired:
            server.kill()
    await standin.stop()
    keys = [k async for k in store.redis.scan_iter(f"{prefix}:*")]
    for start in range(0, len(keys), 500):
        await store.redis.delete(*keys[start : start + 500])
    await store.close()


async def main(
    redis_url: str,
    approvals: int,
    rate: float,
    rounds: int,
    profile: Path | None,
    bare_first: bool,
    hostile: int = 0,
    features: bool = False,
) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    print(f"{approvals} approvals per round, clicked at {rate:.0f}/s (open loop), {rounds} rounds per layout")
    print(
        f"{'':16}{'p50 ms':>9}{'p99 ms':>9}{'bare p50':>10}{'bare p99':>10}{'p50 x':>8}{'p99 x':>8}"
        f"{'cpu ms':>8}{'bare cpu':>9}{'cpu x':>7}"
    )
    for layout in LAYOUTS:
        signoff: list[float] = []
        bare: list[float] = []
        cpu: list[tuple[float, float]] = []
        for n in range(rounds):
            spied = profile / f"{layout.replace(' ', '').replace('+', '-')}-{n}.txt" if profile else None
            ours, theirs, bot_cpu, bare_cpu = await round_of(
                layout, redis_url, approvals, rate, spied, bare_first, hostile, features
            )
            signoff += ours
            bare += theirs
            cpu.append((bot_cpu, bare_cpu))
        row = {
            "p50": percentile(signoff, 0.5),
            "p99": percentile(signoff, 0.99),
            "bare_p50": percentile(bare, 0.5),
            "bare_p99": percentile(bare, 0.99),
            "mean": statistics.mean(signoff),
            "cpu_ms": statistics.median(c[0] for c in cpu) * 1e3,
            "bare_cpu_ms": statistics.median(c[1] for c in cpu) * 1e3,
        }
        row["cpu_ratio"] = row["cpu_ms"] / row["bare_cpu_ms"]
        row["p50_ratio"] = row["p50"] / row["bare_p50"]
        row["p99_ratio"] = row["p99"] / row["bare_p99"]
        results[layout] = row
        print(
            f"{layout:16}{row['p50'] * 1e3:>9.2f}{row['p99'] * 1e3:>9.2f}{row['bare_p50'] * 1e3:>10.2f}"
            f"{row['bare_p99'] * 1e3:>10.2f}{row['p50_ratio']:>7.2f}x{row['p99_ratio']:>7.2f}x"
            f"{row['cpu_ms']:>8.2f}{row['bare_cpu_ms']:>9.2f}{row['cpu_ratio']:>6.2f}x",
            flush=True,
        )
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("redis_url", nargs="?")
    parser.add_argument("--approvals", type=int, default=100)
    parser.add_argument("--rate", type=float, default=100.0, help="clicks a second")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    parser.add_argument(
        "--profile",
        type=Path,
        help="a folder: py-spy samples the bot during each round's clicks (raw stacks)",
    )
    parser.add_argument(
        "--bare-first",
        action="store_true",
        help="click the bare app first, on a quiet machine, then Signoff (the first measurements' way)",
    )
    parser.add_argument(
        "--hostile",
        type=int,
        default=0,
        help="runs whose calls a policy `when` reads item by item (4,900 items), started during the clicks",
    )
    parser.add_argument(
        "--features",
        action="store_true",
        help="a preview hook, a policy with redact and step_up, secret detection (made with the card)",
    )
    args = parser.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    with redis_server.running(args.redis_url) as url:
        started = time.perf_counter()
        figures = asyncio.run(
            main(
                url,
                args.approvals,
                args.rate,
                args.rounds,
                args.profile,
                args.bare_first,
                args.hostile,
                args.features,
            )
        )
        if args.json:
            print(json.dumps(figures))
        print(f"(took {time.perf_counter() - started:.1f} s)")
