"""CPU per click: Signoff's bot against a floor that does the same visible work, one run.

    .venv/bin/python bench/click_cpu.py [--runs 100] [--channels 100] [--rate 100] [--profile DIR] [REDIS_URL]

Per layout (`signoff serve`; `signoff bot` + `signoff runner`): `--runs` real runs of the demo
agent (a refund that needs approval), spread over `--channels` channels (one each by default;
with fewer, Slack's one post a second a channel holds them back), wait for their cards; then
Approve is clicked on every card at `--rate` a second, open loop, by `bench/clicker.py` (a
process of its own), and the bench waits until everything a person sees after a click is
there, read from the stand-in's messages: every card replaced, every outcome line posted,
every status message saying the run finished, every answer streamed (or posted). CPU per
click is the bot's CPU (/proc/<pid>/stat, user + system) from just before the first click to
then, ÷ clicks: under `serve` the bot's process and its children but the runner (shown
apart), with bot + runner the bot's process (and its children).

Then the floor (`bench/floor_bolt.py`, a bare Bolt app in a process of its own) gets the same
clicks, on cards pre-posted in the stand-in as Signoff's were (a root message and a card in
its thread, in as many channels of its own), with the payloads Signoff sent in this run: its
decided card, outcome line, status message and answer. Its CPU is measured the same way.

Printed per layout: CPU ms a click for each, the ratio, seconds to done, and the Web API
calls (and 429s) per click by method for each. Not a test: no thresholds.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import copy
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.click_ack import (  # noqa: E402
    LAYOUTS,
    SECRET,
    cards_of,
    clicks_at,
    cpu_of,
    signoff_env,
    wait_ready,
    wind_up,
)
from core.producer import start_run  # noqa: E402
from core.store import Store  # noqa: E402
from signoff_demo import redis_server  # noqa: E402
from slack_standin import Message, SlackStandin  # noqa: E402


def family(pid: int) -> list[int]:
    """`pid` and every process under it (Linux /proc)."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, ValueError):
                continue
            children[parent].append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        here = todo.pop()
        found.append(here)
        todo += children.get(here, [])
    return found


def is_runner(pid: int) -> bool:
    try:
        return b"runner" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


def cpu_split(pid: int) -> tuple[float, float]:
    """CPU seconds so far of `pid`'s processes: (the bot's: it and its children but a runner,
    the runner's)."""
    bot = runner = 0.0
    for member in family(pid):
        try:
            spent = cpu_of(member)
        except OSError:
            continue
        if is_runner(member):
            runner += spent
        else:
            bot += spent
    return bot, runner


def in_thread(standin: SlackStandin, channel: str, thread_ts: str) -> list[Message]:
    return [m for m in standin.messages if m.channel == channel and m.thread_ts == thread_ts]


def threads_of(standin: SlackStandin) -> dict[tuple[str, str], list[Message]]:
    """Every thread's replies, by (channel, thread ts), in one pass over the messages."""
    threads: dict[tuple[str, str], list[Message]] = collections.defaultdict(list)
    for message in standin.messages:
        if message.thread_ts:
            threads[(message.channel, message.thread_ts)].append(message)
    return threads


def signoff_done(standin: SlackStandin, card: Message, replies: list[Message]) -> bool:
    """Everything a person sees after the click on `card`: the card replaced (no Approve left),
    the outcome line, the status saying the run finished, the answer (streamed and stopped)."""
    if not card.changes or '"approve:0"' in json.dumps(card.blocks):
        return False
    root = standin.message(card.channel, card.thread_ts or "")
    if root is None or "Finished" not in root.text:
        return False
    return any(m.kind == "outcome" for m in replies) and any(
        m.kind == "answer" and not m.streaming for m in replies
    )


def floor_done(payloads: dict[str, Any]) -> Any:
    """The same for the floor's card: replaced, outcome line, status message updated, answer."""

    def done(standin: SlackStandin, card: Message, replies: list[Message]) -> bool:
        if not card.changes:
            return False
        root = standin.message(card.channel, card.thread_ts or "")
        if root is None or not root.changes:
            return False
        answered = any(  # streamed and stopped, or posted as a message (Slack refused the stream)
            (m.markdown is not None and not m.streaming)
            or (m.markdown is None and m.text == payloads["answer"])
            for m in replies
        )
        return answered and any(m.text == payloads["outcome"] for m in replies)

    return done


async def until_done(standin: SlackStandin, check: Any, cards: list[Message], timeout: float = 600) -> None:
    """Until `check(standin, card, its thread's replies)` holds for every card (polled every 0.1 s)."""
    began = time.monotonic()
    left = list(cards)
    while left:
        threads = threads_of(standin)
        left = [c for c in left if not check(standin, c, threads.get((c.channel, c.thread_ts or ""), []))]
        if left and time.monotonic() - began > timeout:
            raise RuntimeError(f"{len(left)} of {len(cards)} clicks' work not done in {timeout:.0f} s")
        if left:
            await asyncio.sleep(0.1)


def calls_by_method(standin: SlackStandin, since: int) -> dict[str, list[int]]:
    """Web API calls (and response_url uses) the stand-in received from index `since`: method ->
    [calls, 429s]."""
    counted: dict[str, list[int]] = {}
    for call in standin.calls[since:]:
        row = counted.setdefault(call.method, [0, 0])
        row[0] += 1
        row[1] += call.status == 429
    return dict(sorted(counted.items()))


def spy(pid: int, seconds: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling `pid` (and its children) for `seconds`, raw stacks into `out`."""
    py_spy = str(Path(sys.executable).with_name("py-spy"))
    args = [
        py_spy,
        "record",
        "--pid",
        str(pid),
        "-r",
        "1000",
        "-f",
        "raw",
        "-o",
        str(out),
        "-d",
        str(seconds),
    ]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def measured(
    standin: SlackStandin,
    url: str,
    pid: int,
    cards: list[Message],
    rate: float,
    check: Any,
    profile: Path | None = None,
) -> dict[str, Any]:
    """Click Approve on `cards` (the app at `url`, process `pid`), wait until `check` says every
    click's visible work is done: CPU ms a click (the bot's; the runner's apart), seconds, calls."""
    standin._buckets.clear()  # (each app meets Slack's limits with a full budget)
    since = len(standin.calls)
    watcher = spy(pid, int(len(cards) / rate) + 120, profile) if profile else None
    bot, runner = cpu_split(pid)
    began = time.monotonic()
    await clicks_at(standin, [url], cards, rate)
    await until_done(standin, check, cards)
    seconds = time.monotonic() - began
    bot_after, runner_after = cpu_split(pid)
    if watcher is not None:
        watcher.send_signal(signal.SIGINT)  # (py-spy writes what it has sampled so far)
        watcher.wait(60)
    return {
        "cpu_ms": (bot_after - bot) / len(cards) * 1e3,
        "runner_ms": (runner_after - runner) / len(cards) * 1e3,
        "seconds": seconds,
        "calls": calls_by_method(standin, since),
    }


async def quiet(standin: SlackStandin, still_s: float = 3.0, most_s: float = 60.0) -> dict[str, int]:
    """Until the stand-in received no call for `still_s` (at most `most_s`): the calls made
    after the visible work was done, by method (redraws nobody needed, say)."""
    since = len(standin.calls)
    deadline = time.monotonic() + most_s
    while time.monotonic() < deadline:
        seen = len(standin.calls)
        await asyncio.sleep(still_s)
        if len(standin.calls) == seen:
            break
    return {method: row[0] for method, row in calls_by_method(standin, since).items()}


def pre_post(standin: SlackStandin, pending: list[tuple[Message, Message]], channels: int) -> list[Message]:
    """The floor's runs: a root message and a card in its thread, as Signoff's were before the
    clicks (same text and blocks), in `channels` channels of the floor's own."""
    cards = []
    for n, (root, card) in enumerate(pending):
        channel = f"C0FLOOR{n % channels}"
        posted = Message(channel, standin._next_ts(), root.text, copy.deepcopy(root.blocks))
        standin.messages.append(posted)
        cards.append(
            Message(channel, standin._next_ts(), card.text, copy.deepcopy(card.blocks), thread_ts=posted.ts)
        )
        standin.messages.append(cards[-1])
    return cards


def payloads_of(standin: SlackStandin, card: Message) -> dict[str, Any]:
    """What Signoff sent after the click on `card`: its decided card, outcome line, status
    message and answer (the floor sends the same)."""
    root = standin.message(card.channel, card.thread_ts or "")
    assert root is not None
    replies = threads_of(standin)[(card.channel, card.thread_ts or "")]
    outcome = next(m for m in replies if m.kind == "outcome")
    answer = next(m for m in replies if m.kind == "answer")
    return {
        "card": {"text": card.text, "blocks": card.blocks},
        "outcome": outcome.text,
        "status": {"text": root.text, "blocks": root.blocks},
        "answer": answer.markdown if answer.markdown is not None else answer.text,
        "pieces": 600,
    }


async def round_of(
    layout: str, redis_url: str, runs: int, channels: int, rate: float, profile: Path | None
) -> dict[str, Any]:
    """One layout: Signoff's clicks measured, then the floor's with Signoff's payloads."""
    prefix = f"cpu{os.getpid()}{int(time.time() * 1000) % 100000}"
    store = Store.from_url(redis_url, prefix)
    standin = SlackStandin(SECRET)
    await standin.start()
    bot_port, floor_port = redis_server.free_port(), redis_server.free_port()
    env = signoff_env(standin, redis_url, prefix, bot_port)
    servers = [subprocess.Popen([sys.executable, "-m", "signoff", *a], env=env) for a in LAYOUTS[layout]]
    try:
        await wait_ready(bot_port)
        threads = [
            await start_run(
                store, f"Refund order {n} for 5000", f"C0CPU{n % channels}", "demo", requester="U0RILEY"
            )
            for n in range(runs)
        ]
        cards = await cards_of(standin, store, threads)
        await asyncio.sleep(2)  # the status lines and card posts settle
        pending = [
            (copy.deepcopy(standin.message(c.channel, c.thread_ts or "")), copy.deepcopy(c)) for c in cards
        ]
        bot_url = f"http://127.0.0.1:{bot_port}/slack/events"
        signoff = await measured(standin, bot_url, servers[0].pid, cards, rate, signoff_done, profile)
        signoff["after_done"] = await quiet(standin)
        print(f"  ({layout}, signoff) {json.dumps(signoff)}", flush=True)
        for server in servers:  # the floor then has the stand-in (and Slack's limits) to itself
            server.terminate()
            server.wait(40)
        payloads = payloads_of(standin, cards[0])
        payload_file = Path(tempfile.mkdtemp(prefix="signoff-floor-")) / "payloads.json"
        payload_file.write_text(json.dumps(payloads))
        floor_env = {**env, "PORT": str(floor_port), "FLOOR_PAYLOADS": str(payload_file)}
        servers.append(
            subprocess.Popen([sys.executable, str(ROOT / "bench" / "floor_bolt.py")], env=floor_env)
        )
        await wait_ready(floor_port, "slack/events")
        floor_cards = pre_post(standin, pending, channels)  # type: ignore[arg-type]
        floor_url = f"http://127.0.0.1:{floor_port}/slack/events"
        floor = await measured(standin, floor_url, servers[-1].pid, floor_cards, rate, floor_done(payloads))
        return {"signoff": signoff, "floor": floor, "payload_bytes": payload_bytes(payloads)}
    finally:
        await wind_up(servers, standin, store, prefix)


def payload_bytes(payloads: dict[str, Any]) -> dict[str, int]:
    """The size of each payload the floor sends (JSON bytes), as Signoff sent it."""
    return {k: len(json.dumps(v)) for k, v in payloads.items() if k != "pieces"}


def report(layout: str, runs: int, result: dict[str, Any]) -> None:
    ours, floor = result["signoff"], result["floor"]
    ratio = ours["cpu_ms"] / floor["cpu_ms"]
    print(
        f"{layout:14} signoff {ours['cpu_ms']:6.2f} ms/click (runner {ours['runner_ms']:6.2f}) "
        f"in {ours['seconds']:5.1f} s | floor {floor['cpu_ms']:5.2f} ms/click in {floor['seconds']:5.1f} s "
        f"| {ratio:.2f}x",
        flush=True,
    )
    methods = sorted(set(ours["calls"]) | set(floor["calls"]))
    print(f"  {'per click':24}{'signoff':>9}{'429s':>7}{'floor':>9}{'429s':>7}")
    for method in methods:
        a, b = ours["calls"].get(method, [0, 0]), floor["calls"].get(method, [0, 0])
        print(f"  {method:24}{a[0] / runs:>9.2f}{a[1] / runs:>7.2f}{b[0] / runs:>9.2f}{b[1] / runs:>7.2f}")
    print(f"  signoff's calls after its visible work was done: {ours['after_done']}")
    print(f"  payload bytes: {result['payload_bytes']}", flush=True)


async def main(
    redis_url: str, runs: int, channels: int, rate: float, layouts: list[str], profile: Path | None
) -> dict[str, Any]:
    print(
        f"{runs} runs over {channels} channels, clicked at {rate:.0f}/s; load: {os.getloadavg()}", flush=True
    )
    results = {}
    for layout in layouts:
        spied = profile / f"{layout.replace(' ', '').replace('+', '-')}-{channels}ch.txt" if profile else None
        results[layout] = await round_of(layout, redis_url, runs, channels, rate, spied)
        report(layout, runs, results[layout])
    print(f"load after: {os.getloadavg()}")
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("redis_url", nargs="?")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--channels", type=int, default=100, help="channels the runs are spread over")
    parser.add_argument("--rate", type=float, default=100.0, help="clicks a second")
    parser.add_argument("--layout", choices=list(LAYOUTS), action="append", help="(default: both)")
    parser.add_argument(
        "--profile", type=Path, help="a folder: py-spy samples the bot's process (raw stacks)"
    )
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    with redis_server.running(args.redis_url) as url:
        figures = asyncio.run(
            main(url, args.runs, args.channels, args.rate, args.layout or list(LAYOUTS), args.profile)
        )
        if args.json:
            print(json.dumps(figures))
