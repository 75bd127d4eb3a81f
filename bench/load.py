"""Signoff under load: pending approvals clicked at a steady rate over two bots and two runners,
on one Redis and on a Redis Cluster.

    .venv/bin/python bench/load.py [--approvals 1000] [--channels 100] [--rate 300] [--small]
                                   [--layouts node,cluster]
                                   [--node-url redis://…] [--cluster-url redis+cluster://…]

(`--small`: the Live cards issue's smaller scenario, 100 runs over 4 channels at 50 clicks a second.)

For each layout (`node`: a local redis-server; `cluster`: a local three-master
Redis Cluster; both with RedisJSON + RediSearch, or the server a URL names) it
starts the Slack stand-in (Slack's rate limits on), two `signoff bot` and two
`signoff runner` processes and the bare Bolt app of bench/bare_bolt.py. It
starts `--approvals` runs of bench/load_graph.py's agent, whose one tool
(`deploy`) needs approval and writes every execution to a ledger, spread over
`--channels` channels (Slack takes about one post a second per channel), waits
until every card is posted, then clicks Approve on every card at `--rate`
clicks a second, open loop (a click every 1/rate s, answered or not),
alternating between the two bots. The bare app gets the same signed payloads
at the same rate just before, in the same run (as bench/click_ack.py does). It
then waits until every run has finished and no command is left for the
runners, then until every card is final, every answer is posted and nothing
was posted or edited for `--grace` s (`--final-timeout`), then until every
root's status line says Finished (`--status-timeout`), and counts:

* click -> ack latency p50 / p99, Signoff's and the bare app's, and the ratio;
  clicks acked within Slack's 3 s;
* decision -> tool start p50 / p99: the decision's time in the audit (the bot's
  clock when it recorded the click, before the ack) to the time the tool
  wrote when it began (the runner's clock; one host, one clock);
* executions per approved action (must be exactly 1 for every one);
* Redis memory per pending approval: `used_memory` summed over every master,
  with every approval pending, minus the same before the runs, divided by the
  approvals (everything a pending run holds: checkpoints and their search
  index entries, the run and approval records, stream entries, Slack state);
* what went wrong meanwhile: 429s the stand-in answered, dead letters, warning
  and error lines in the processes' logs, ephemeral messages people were sent;
* and, to read the latencies by: the p50 of each tenth of the clicks (a queue
  building up, or not), the CPU each process spent per click and per approval
  on this host (the stand-in and the clicks included), cards still showing
  Approve at the end;
* the cards people look at (bench/load_cards.py, from what the stand-in recorded):
  click -> card changed p50 / p99 (a click's send time to the card's first edit after it) and
  which source made that edit (the click's response_url or chat.update); seconds from the last
  click until every card was final (its decision shown, no buttons; by its last edit); each
  card's post since its run started p50 / p99, and per channel the last card's time since the
  channel's first run started against the floor Slack's one post a second per channel allows
  (bench/README.md gives the formula); chat.postMessage calls Slack accepted per run; when
  every root's status line said Finished.

It prints two Markdown tables for bench/README.md and the raw figures. Not a test: no
thresholds. The exit code is 1 only when something broke (a card missing, an
approval whose tool did not run exactly once). Every process and Redis it
started is stopped on the way out (Ctrl-C and SIGTERM included). With a URL it
starts no Redis, removes its own keys (its SIGNOFF_PREFIX) and its threads'
checkpoints and nothing else (the checkpoint search indexes, which any Signoff
on that Redis shares, stay); its memory figures then include whatever else that
Redis did meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import load_cards  # noqa: E402
from bench.click_ack import cards_of, percentile  # noqa: E402
from bench.load_deploy import (  # noqa: E402
    EVERY_S,
    Deployment,
    cleanup_keys,
    every_few_seconds,
    redis_for,
    shown_url,
    used_memory,
)
from bench.load_graph import read_ledger  # noqa: E402
from core.keys import RUNNERS_GROUP  # noqa: E402
from core.producer import start_run  # noqa: E402
from core.records import RunState  # noqa: E402
from core.store import Store  # noqa: E402
from slack_standin import Message, SlackStandin  # noqa: E402
from slack_standin.models import ACK_LIMIT_S  # noqa: E402

GRAPH_NAME = "load"


@dataclass
class Click:
    """One signed click as Slack saw it: how late it went, and its answer."""

    lag: float  # how late the sender sent it (this process's own delay)
    status: int
    seconds: float
    sent_at: float  # time.monotonic() when it was sent (the stand-in's Interaction.sent_at)


async def send_clicks(
    standin: SlackStandin, payloads: list[dict[str, Any]], rate: float, url_of: Callable[[int], str]
) -> list[Click]:
    """Every payload, one every 1/rate s whether or not earlier ones were answered (open loop)."""
    loop = asyncio.get_running_loop()
    first = loop.time() + 0.2

    async def one(n: int, payload: dict[str, Any]) -> Click:
        due = first + n / rate
        await asyncio.sleep(max(0.0, due - loop.time()))
        lag, sent = loop.time() - due, time.monotonic()
        try:
            interaction = await standin.send(payload, bot_url=url_of(n))
        except aiohttp.ClientError:
            return Click(lag, 0, float("nan"), sent)
        return Click(lag, interaction.status, interaction.seconds, interaction.sent_at or sent)

    tasks = [asyncio.create_task(one(n, p)) for n, p in enumerate(payloads)]

    def answered() -> str:
        return f"{sum(t.done() for t in tasks)}/{len(tasks)} answered"

    async with every_few_seconds("clicks", answered):
        return list(await asyncio.gather(*tasks))


def ack_figures(clicks: list[Click]) -> dict[str, Any]:
    acked = [c.seconds for c in clicks if c.status == 200]
    return {
        "p50_ms": percentile(acked, 0.5) * 1e3 if acked else float("nan"),
        "p99_ms": percentile(acked, 0.99) * 1e3 if acked else float("nan"),
        "max_ms": max(acked, default=float("nan")) * 1e3,
        "within_3s": sum(s <= ACK_LIMIT_S for s in acked),
        "not_200": dict(collections.Counter(c.status for c in clicks if c.status != 200)),
        "sender_lag_p99_ms": percentile([c.lag for c in clicks], 0.99) * 1e3,
        "clicks": len(clicks),
        # p50 of each tenth of the clicks, in the order sent: did a queue build up, or not
        "p50_ms_by_tenth": [
            round(percentile(tenth, 0.5) * 1e3, 1)
            for n in range(10)
            if (
                tenth := [
                    c.seconds
                    for c in clicks[n * len(clicks) // 10 : (n + 1) * len(clicks) // 10]
                    if c.status == 200
                ]
            )
        ],
    }


async def runner_backlog(store: Store) -> int:
    """Commands the runners have not finished with: delivered and unacknowledged, or not read yet."""
    total = 0
    for partition in store.keys.partitions:
        for group in await store.redis.xinfo_groups(partition.commands):
            if group["name"] == RUNNERS_GROUP:
                total += int(group["pending"]) + int(group.get("lag") or 0)
    return total


async def states(store: Store, threads: list[str]) -> collections.Counter[str]:
    found: collections.Counter[str] = collections.Counter()
    for start in range(0, len(threads), 100):
        chunk = await asyncio.gather(*(store.runs.state(t) for t in threads[start : start + 100]))
        found.update(s.value if s else "none" for s in chunk)
    return found


async def until_drained(
    store: Store, deployment: Deployment, threads: list[str], timeout: float
) -> collections.Counter[str]:
    """Until every run finished (or failed) and no command waits for a runner, or `timeout`."""
    ours = set(threads)
    seen: dict[str, Any] = {"states": collections.Counter(), "backlog": -1}

    def status() -> str:
        ran = len({e["thread_id"] for e in read_ledger(deployment.ledger)} & ours)
        return f"tools run for {ran}/{len(threads)}, runs {dict(seen['states'])}, runner backlog {seen['backlog']}"

    deadline = time.monotonic() + timeout
    last_read = 0.0
    async with every_few_seconds("resuming", status):
        while time.monotonic() < deadline:
            # The backlog is a few calls; the states a call per run, read each 5 s until the
            # backlog is empty (not to add a load of our own to the runners' Redis meanwhile).
            seen["backlog"] = await runner_backlog(store)
            if seen["backlog"] == 0 or time.monotonic() - last_read > EVERY_S:
                seen["states"] = await states(store, threads)
                last_read = time.monotonic()
            ended = seen["states"][RunState.FINISHED.value] + seen["states"][RunState.FAILED.value]
            if ended == len(threads) and seen["backlog"] == 0:
                break
            await asyncio.sleep(0.5)
    return seen["states"]


async def counted(
    store: Store, deployment: Deployment, threads: list[str], cards: list[Message]
) -> dict[str, Any]:
    """Once the work drained: executions per approval, decision -> tool start, and what else
    Slack, Redis and the people saw."""
    ours = set(threads)
    figures: dict[str, Any] = {}
    decided: dict[str, float] = {}
    for entry in await store.audit.entries():
        if entry["thread_id"] in ours and entry["decision"].get("type") == "approve":
            decided[entry["thread_id"]] = min(entry["at"], decided.get(entry["thread_id"], entry["at"]))
    executions: dict[str, list[float]] = collections.defaultdict(list)
    for execution in read_ledger(deployment.ledger):
        executions[execution["thread_id"]].append(execution["at"])
    per_approval = collections.Counter(len(executions.get(t, [])) for t in threads)
    figures["approved_in_audit"] = len(decided)
    figures["executions_per_approval"] = dict(sorted(per_approval.items()))
    figures["executions_min"] = min(per_approval)
    figures["executions_max"] = max(per_approval)
    figures["approvals_not_exactly_once"] = sum(n for k, n in per_approval.items() if k != 1)
    figures["executions_of_other_threads"] = sum(len(v) for t, v in executions.items() if t not in ours)
    gaps = [min(executions[t]) - at for t, at in decided.items() if executions.get(t)]
    figures["decision_to_tool_p50_ms"] = percentile(gaps, 0.5) * 1e3 if gaps else float("nan")
    figures["decision_to_tool_p99_ms"] = percentile(gaps, 0.99) * 1e3 if gaps else float("nan")
    figures["decision_to_tool_min_ms"] = min(gaps, default=float("nan")) * 1e3
    figures["decision_to_tool_max_ms"] = max(gaps, default=float("nan")) * 1e3
    starts = [min(v) for t, v in executions.items() if t in ours]
    if len(starts) > 1:  # how fast the two runners got through the approved work
        figures["tool_starts_per_s"] = (len(starts) - 1) / (max(starts) - min(starts) or float("nan"))

    figures["answers_posted"] = sum(m.kind == "answer" for m in deployment.standin.messages)
    # Card refreshes go out at chat.update's workspace rate: many cards still show Approve.
    figures["cards_still_showing_approve"] = sum(
        any(e.get("action_id") == "approve:0" for b in card.blocks for e in b.get("elements", []))
        for card in cards
    )
    figures["slack_429s"] = dict(
        collections.Counter(c.method for c in deployment.standin.calls if c.status == 429)
    )
    # what people were told privately: refusals, "still recording" (the ack budget spent)
    figures["ephemerals"] = dict(
        collections.Counter(
            str(c.args.get("text", ""))[:80]
            for c in deployment.standin.calls
            if c.method == "chat.postEphemeral" and c.status == 200
        )
    )
    figures["dead_letters"] = await store.queue.length(lambda p: p.dead_letters)
    figures["exited"] = deployment.exited()
    return figures


async def one_layout(
    name: str, url: str, redis_pids: list[int], given: bool, args: argparse.Namespace
) -> dict[str, Any]:
    prefix = f"load{os.getpid()}{int(time.time() * 1000) % 100000}"
    workdir = Path(tempfile.mkdtemp(prefix=f"signoff-load-{name}-"))
    deployment = Deployment(url, workdir, prefix, redis_pids=redis_pids)
    store = Store.from_url(url, prefix)
    threads: list[str] = []
    run_started: list[float] = []  # time.monotonic() as each run was started
    figures: dict[str, Any] = {
        "layout": name,
        "approvals": args.approvals,
        "rate": args.rate,
        "channels": min(args.channels, args.approvals),
        "status_timeout": args.status_timeout,
    }
    started = time.monotonic()
    try:
        print(
            f"[{name}] starting the stand-in, 2 bots, 2 runners and the bare app on {shown_url(url)}",
            flush=True,
        )
        await deployment.start()
        await asyncio.sleep(1)  # the runners' first reads, the bots' group directory
        figures["memory_before"] = await asyncio.to_thread(used_memory, url)

        channels = [f"C0LOAD{n:04d}" for n in range(min(args.channels, args.approvals))]
        print(f"[{name}] starting {args.approvals} runs over {len(channels)} channels", flush=True)
        asked = time.monotonic()
        for n in range(args.approvals):
            run_started.append(time.monotonic())
            threads.append(
                await start_run(
                    store,
                    f"Deploy build {n:05d}",
                    channels[n % len(channels)],
                    GRAPH_NAME,
                    requester="U0RILEY",
                )
            )
        ours = set(threads)

        def posted() -> str:
            cards = sum(
                m.kind == "approval" and (m.metadata or {}).get("event_payload", {}).get("thread_id") in ours
                for m in deployment.standin.messages
            )
            return f"{cards}/{args.approvals} cards posted"

        async with every_few_seconds("cards", posted):
            try:
                cards = await cards_of(deployment.standin, store, threads, timeout=args.card_timeout)
            except RuntimeError as exc:
                figures["broken"] = f"cards missing: {exc}"
                print(f"[{name}] {figures['broken']}", flush=True)
                return figures
        figures["cards_s"] = time.monotonic() - asked
        await asyncio.sleep(2)  # the last status lines settle, as a person takes a moment
        figures["memory_pending"] = await asyncio.to_thread(used_memory, url)
        figures["memory_per_pending_bytes"] = (
            figures["memory_pending"] - figures["memory_before"]
        ) / args.approvals
        print(
            f"[{name}] all {args.approvals} cards posted in {figures['cards_s']:.0f} s; clicking", flush=True
        )

        payloads = [
            deployment.standin.block_action_payload(f"U{n:05d}", card, "approve:0")
            for n, card in enumerate(cards)
        ]
        figures["load_average_before_clicks"] = os.getloadavg()  # other work on this host shows here
        cpu, at = deployment.cpu_seconds(), time.monotonic()
        bare = await send_clicks(deployment.standin, payloads, args.rate, lambda n: deployment.bare_url)
        cpu_bare, bare_at = deployment.cpu_seconds(), time.monotonic()
        watch = load_cards.FinalWatch(cards)  # when each card is first seen final, from now on
        watch.start()
        signoff = await send_clicks(deployment.standin, payloads, args.rate, deployment.bot_url)
        cpu_signoff, clicked_at = deployment.cpu_seconds(), time.monotonic()
        # CPU each process spent while the clicks came (first sent to last answered), per click:
        # what a click costs, who else wanted the cores meanwhile, and how many cores were busy
        figures["cpu_ms_per_click_bare_phase"] = _per_click(cpu, cpu_bare, len(bare))
        figures["cpu_ms_per_click_signoff_phase"] = _per_click(cpu_bare, cpu_signoff, len(signoff))
        figures["click_phase_s"] = {"bare": bare_at - at, "signoff": clicked_at - bare_at}
        figures["cores_busy"] = {
            "bare phase": (sum(cpu_bare.values()) - sum(cpu.values())) / (bare_at - at),
            "signoff phase": (sum(cpu_signoff.values()) - sum(cpu_bare.values())) / (clicked_at - bare_at),
            "of": os.cpu_count(),
        }
        figures["bare"] = ack_figures(bare)
        figures["signoff"] = ack_figures(signoff)
        figures["ack_ratio_p50"] = figures["signoff"]["p50_ms"] / figures["bare"]["p50_ms"]
        figures["ack_ratio_p99"] = figures["signoff"]["p99_ms"] / figures["bare"]["p99_ms"]

        ended = await until_drained(store, deployment, threads, args.drain_timeout)
        figures["drain_s"] = time.monotonic() - clicked_at
        # the runners' (and everyone's) CPU per approval while the approved work drained
        figures["cpu_ms_per_approval_drain_phase"] = _per_click(
            cpu_signoff, deployment.cpu_seconds(), args.approvals
        )

        standin = deployment.standin
        figures.update(await load_cards.settle(standin, watch, ours, args))
        figures["slack_settled_s"] = time.monotonic() - clicked_at
        await asyncio.sleep(args.grace)  # a late second execution would land here
        figures["runs"] = dict(ended)
        figures["memory_after"] = await asyncio.to_thread(used_memory, url)
        figures["memory_per_finished_run_bytes"] = (
            figures["memory_after"] - figures["memory_before"]
        ) / args.approvals

        figures.update(await counted(store, deployment, threads, cards))
        figures.update(
            load_cards.click_figures(
                cards,
                [c.sent_at for c in signoff],
                [c.seconds if c.status == 200 else float("nan") for c in signoff],
            )
        )
        figures.update(load_cards.final_figures(standin, cards, watch, max(c.sent_at for c in signoff)))
        figures.update(load_cards.root_figures(standin, ours, max(c.sent_at for c in signoff)))
        runs_in = [channels[n % len(channels)] for n in range(args.approvals)]
        figures.update(load_cards.posting_figures(standin, cards, run_started, runs_in))
        figures.update(load_cards.posts_per_run(standin, threads))
        if figures["approvals_not_exactly_once"]:
            figures["broken"] = (
                f"{figures['approvals_not_exactly_once']} approvals did not run their tool exactly once"
            )
        return figures
    except Exception as exc:  # a process that would not start, Redis refusing: say so, try the next layout
        figures["broken"] = f"{type(exc).__name__}: {exc}"
        print(f"[{name}] broke: {figures['broken']}", flush=True)
        return figures
    finally:
        figures["seconds"] = time.monotonic() - started
        with contextlib.suppress(Exception):
            figures["seconds_to_exit_on_sigterm"] = await deployment.stop()
        figures["log_lines"] = {k: dict(v) for k, v in deployment.log_lines().items() if v}
        try:
            if given:
                await cleanup_keys(url, prefix, threads)
        finally:
            await store.close()
            if args.keep:
                print(f"[{name}] logs kept in {workdir}", flush=True)
            else:
                shutil.rmtree(workdir, ignore_errors=True)


def _per_click(before: dict[str, float], after: dict[str, float], clicks: int) -> dict[str, float]:
    return {name: round((after[name] - before[name]) * 1e3 / clicks, 2) for name in after}


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| layout | ack p50 / p99 | bare Bolt p50 / p99 | ratio p50 / p99 | acked < 3 s "
        "| decision → tool start p50 / p99 | executions per approval | Redis per pending approval |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "signoff" not in r:
            broken = str(r.get("broken", "did not finish")).replace("|", "\\|")
            lines.append(f"| {r['layout']} | {broken} | | | | | | |")
            continue
        s, b = r["signoff"], r["bare"]
        once = (
            f"exactly 1 for all {r['approvals']:,}"
            if r["approvals_not_exactly_once"] == 0
            else f"{r['executions_min']}–{r['executions_max']} ({r['approvals_not_exactly_once']} not 1)"
        )
        lines.append(
            f"| {r['layout']} | {s['p50_ms']:.2f} / {s['p99_ms']:.2f} ms | {b['p50_ms']:.2f} / {b['p99_ms']:.2f} ms "
            f"| {r['ack_ratio_p50']:.2f}x / {r['ack_ratio_p99']:.2f}x | {s['within_3s']:,} of {s['clicks']:,} "
            f"| {r['decision_to_tool_p50_ms']:,.0f} / {r['decision_to_tool_p99_ms']:,.0f} ms | {once} "
            f"| {r['memory_per_pending_bytes'] / 1000:.1f} kB |"
        )
    return "\n".join(lines)


def cards_table(results: list[dict[str, Any]]) -> str:
    """The live-card figures (bench/load_cards.py), a row per layout that got that far."""
    lines = [
        "| layout | runs, channels, clicks/s | click → card changed p50 / p99 | of which after the ack "
        "| first changed by "
        "| every card final after the last click (by its last edit) | card posted since its run started p50 / p99 "
        "| channel's last card ÷ floor p50 / p99 (floor) | posts per run p50 / max "
        "| every root's status Finished after the last click |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "click_to_change_p50_ms" not in r:
            continue
        by = r["click_to_change_by"]
        changed = ", ".join(f"{n:,} {source}" for source, n in by.items()) or "none"
        if r["clicked_cards_never_changed"]:
            changed += f", {r['clicked_cards_never_changed']:,} never"
        final = (
            f"{r['every_card_final_s']:.1f} s (decision shown {r['every_card_seen_final_s']:.1f} s)"
            if r["cards_not_final"] == 0
            else f"{r['cards_not_final']:,} of {r['approvals']:,} not final"
        )
        roots = (
            f"{r['every_root_finished_s']:.1f} s"
            if r["roots_showing_finished"] == r["approvals"]
            else f"{r['roots_showing_finished']:,} of {r['approvals']:,} when the bench stopped waiting"
        )
        floors = "/".join(f"{f:.0f}" for f in r["channel_floor_s"])
        lines.append(
            f"| {r['layout']} | {r['approvals']:,}, {r['channels']}, {r['rate']:.0f} "
            f"| {r['click_to_change_p50_ms']:,.0f} / {r['click_to_change_p99_ms']:,.0f} ms "
            f"| {r['ack_to_change_p50_ms']:,.0f} / {r['ack_to_change_p99_ms']:,.0f} ms | {changed} "
            f"| {final} | {r['card_posted_p50_s']:.1f} / {r['card_posted_p99_s']:.1f} s "
            f"| {r['channel_ratio_p50']:.2f}x / {r['channel_ratio_p99']:.2f}x ({floors} s) "
            f"| {r['posts_per_run_p50']} / {r['posts_per_run_max']} | {roots} |"
        )
    return "\n".join(lines)


async def in_loop(
    name: str, url: str, redis_pids: list[int], given: bool, args: argparse.Namespace
) -> dict[str, Any]:
    """One layout, where SIGTERM cancels it as asyncio.run does on Ctrl-C: its cleanup runs."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await one_layout(name, url, redis_pids, given, args)


def main(args: argparse.Namespace) -> int:
    urls = {"node": args.node_url, "cluster": args.cluster_url}
    layouts = [name.strip() for name in args.layouts.split(",") if name.strip()]
    unknown = [name for name in layouts if name not in urls]
    if unknown:
        raise SystemExit(f"--layouts takes node and/or cluster, not {', '.join(unknown)}")
    began = time.monotonic()
    print(
        f"{args.approvals} approvals over {min(args.channels, args.approvals)} channels, clicked at "
        f"{args.rate:.0f}/s (open loop) over two bots; "
        f"layouts: {', '.join(layouts)}",
        flush=True,
    )
    results = []
    try:
        for layout in layouts:
            # outside the event loop (starting Redis), a kill cleans up as Ctrl-C does
            signal.signal(signal.SIGTERM, signal.default_int_handler)
            with redis_for(layout, urls[layout]) as (url, pids):
                results.append(asyncio.run(in_loop(layout, url, pids, bool(urls[layout]), args)))
            print(f"[{layout}] done in {results[-1]['seconds']:.0f} s", flush=True)
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted: every process and Redis this bench started is stopped", flush=True)
        return 130
    print()
    print(table(results))
    print()
    print(cards_table(results))
    print()
    print("raw figures:")
    for result in results:
        print(json.dumps(result, indent=1, default=str))
    print(f"(took {time.monotonic() - began:.0f} s)")
    return 1 if any("broken" in r for r in results) else 0


# the runs, their channels and the click rate: the default, and the Live cards issue's smaller scenario
SCALE = {"approvals": 1000, "channels": 100, "rate": 300.0}
SMALL = {"approvals": 100, "channels": 4, "rate": 50.0}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--approvals", type=int, help=f"runs, each one approval (default {SCALE['approvals']})"
    )
    parser.add_argument("--rate", type=float, help=f"clicks a second (default {SCALE['rate']:.0f})")
    parser.add_argument(
        "--channels",
        type=int,
        help=f"channels the runs post in (Slack: ~1 post/s per channel; default {SCALE['channels']})",
    )
    parser.add_argument(
        "--small",
        action="store_true",
        help="the Live cards issue's smaller scenario: 100 runs over 4 channels clicked at 50/s "
        "(--approvals, --channels and --rate given as well win)",
    )
    parser.add_argument("--layouts", default="node,cluster", help="node and/or cluster, comma-separated")
    parser.add_argument("--node-url", help="a Redis to use for the node layout (none is started)")
    parser.add_argument(
        "--cluster-url", help="a redis+cluster:// URL for the cluster layout (none is started)"
    )
    parser.add_argument("--card-timeout", type=float, default=900, help="seconds allowed for every card")
    parser.add_argument(
        "--drain-timeout", type=float, default=600, help="seconds allowed to finish after the clicks"
    )
    parser.add_argument(
        "--final-timeout",
        type=float,
        default=300,
        help="seconds allowed, once drained, for every card to show its decision and no buttons",
    )
    parser.add_argument(
        "--status-timeout",
        type=float,
        default=300,
        help="seconds allowed, once the cards settled, for every root's status line to say Finished",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=3,
        help="seconds no card may change before the cards count as settled, and waited for late "
        "executions once drained",
    )
    parser.add_argument("--keep", action="store_true", help="keep the processes' logs")
    args = parser.parse_args(argv)
    for name, value in (SMALL if args.small else SCALE).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


if __name__ == "__main__":
    sys.exit(main(parse()))
