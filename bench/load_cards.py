"""bench/load.py's card figures, read from what the Slack stand-in recorded.

* click -> card changed: from the time Slack sent a click (`Interaction.sent_at`) to the first
  edit of that card after it (`Message.changes`), and what made that edit: the click's
  `response_url` or chat.update;
* every card final: a card is final when its header says the decision and it shows no Approve or
  Reject button; `FinalWatch` polls the cards for when each was first seen final, and a final
  card's last edit says when it last changed;
* cards posted against the channel-rate floor: each card's post since its run started, and per
  channel its last card against the least time Slack's one post a second per channel allows;
* posts per run: the chat.postMessage calls Slack accepted, grouped by run (the Signoff message
  metadata's `thread_id`), with the chat.update and response_url edits of its messages.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import time
from collections.abc import Callable
from typing import Any

from bench.click_ack import percentile
from bench.load_deploy import every_few_seconds
from slack_standin import Message, SlackStandin
from slack_standin.webapi import RATES

# What a decided card's header begins with (bot.views.card_words.state_title), and the buttons a card
# shows while it waits (action ids `approve:<i>`, `reject:<i>`; load.py clicks `approve:0`).
DECIDED = (
    "Approved",
    "Edited and approved",
    "Rejected",
    "Responded",
    "Decided",
    "Expired",
    "Withdrawn",
    "Answered",
)
BUTTONS = ("approve", "reject")
# Slack's pace for chat.postMessage in one channel, as the stand-in enforces it: one a second,
# after a burst of four.
POST_RATE, POST_BURST = RATES["chat.postMessage"]
# The posts a run started with `start_run` needs before its card shows: Signoff's root (which
# carries the run's status) and the card.
POSTS_BEFORE_CARD = 2


def header(card: Message) -> str:
    return next(
        (str(b.get("text", {}).get("text", "")) for b in card.blocks if b.get("type") == "header"), ""
    )


def has_buttons(card: Message) -> bool:
    """An Approve or Reject button anywhere on the card (an actions block, or a section's accessory)."""
    for block in card.blocks:
        for element in [*block.get("elements", []), block.get("accessory") or {}]:
            if str(element.get("action_id", "")).split(":")[0] in BUTTONS:
                return True
    return False


def is_final(card: Message) -> bool:
    """The card says its decision and has no button left to click."""
    return header(card).startswith(DECIDED) and not has_buttons(card)


class FinalWatch:
    """When each card was first seen final, polled every `every` s from `start()` to `stop()`."""

    def __init__(self, cards: list[Message], every: float = 0.25):
        self.cards = cards
        self.every = every
        self.first_final: dict[int, float] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._poll())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.look()

    def look(self) -> None:
        now = time.monotonic()
        for n, card in enumerate(self.cards):
            if n not in self.first_final and is_final(card):
                self.first_final[n] = now

    async def _poll(self) -> None:
        while True:
            self.look()
            await asyncio.sleep(self.every)

    def final_now(self) -> int:
        return sum(is_final(card) for card in self.cards)

    def last_change(self) -> float:
        return max((card.changes[-1][0] for card in self.cards if card.changes), default=0.0)

    async def until_settled(
        self, timeout: float, quiet: float, also: Callable[[], bool], last: Callable[[], float]
    ) -> bool:
        """Until every card is final, `also()` holds and nothing changed for `quiet` s: no card
        edit, and `last()` (the last post or edit Slack took) that long ago (True); or until
        `timeout` s passed (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (
                self.final_now() == len(self.cards)
                and also()
                and time.monotonic() - max(self.last_change(), last()) >= quiet
            ):
                return True
            await asyncio.sleep(self.every)
        return False


def last_post(standin: SlackStandin) -> float:
    """When Slack last accepted a chat.postMessage (0 if never)."""
    return next(
        (c.at for c in reversed(standin.calls) if c.method == "chat.postMessage" and c.status == 200), 0.0
    )


FINISHED = "✅ Finished"  # the status line of a finished run (bot.slack.io.STATUS)


def roots(standin: SlackStandin, threads: set[str]) -> list[Message]:
    """The runs' roots Signoff posted: each carries its run's status line (chat.update keeps it)."""
    return [m for m in standin.messages if m.kind == "run" and _thread_of(m.metadata) in threads]


def root_figures(standin: SlackStandin, threads: set[str], last_click_at: float) -> dict[str, Any]:
    """How far the status lane got: roots whose status line says the run finished, and when the last
    of them last changed, from the last click."""
    shown = roots(standin, threads)
    done = [m for m in shown if FINISHED in m.text]
    return {
        "roots": len(shown),
        "roots_showing_finished": len(done),
        "every_root_finished_s": max(m.changes[-1][0] for m in done) - last_click_at
        if done and len(done) == len(threads) and all(m.changes for m in done)
        else float("nan"),
        "root_edits_by": dict(collections.Counter(source for m in shown for _, source in m.changes)),
    }


def answers(standin: SlackStandin, threads: set[str]) -> int:
    """The runs in `threads` whose answer is posted."""
    return len({_thread_of(m.metadata) for m in standin.messages if m.kind == "answer"} & threads)


async def settle(
    standin: SlackStandin, watch: FinalWatch, threads: set[str], args: argparse.Namespace
) -> dict[str, Any]:
    """Once the runs drained: until every card is final, every answer is posted (then Slack holds
    each run's every post) and nothing was posted and no card edited for `args.grace` s, at most
    `args.final_timeout` s; then until every root's status line says Finished (the status lane,
    at chat.update's workspace pace), at most `args.status_timeout` s more."""
    cards = watch.cards

    def final() -> str:
        told = answers(standin, threads)
        return f"{watch.final_now()}/{len(cards)} cards final, {told}/{len(threads)} answers posted"

    async with every_few_seconds("slack", final):
        settled = await watch.until_settled(
            args.final_timeout,
            args.grace,
            lambda: answers(standin, threads) == len(threads),
            lambda: last_post(standin),
        )
    await watch.stop()
    found: dict[str, Any] = {}
    if not settled:
        found["slack_not_settled"] = final()
        print(f"    {args.final_timeout:.0f} s after the drain: {final()}", flush=True)

    def finished() -> int:
        return sum(FINISHED in m.text for m in roots(standin, threads))

    async with every_few_seconds("roots", lambda: f"{finished()}/{len(threads)} show Finished"):
        deadline = time.monotonic() + args.status_timeout
        while finished() < len(threads) and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
    return found


def _ms(samples: list[float], q: float) -> float:
    return percentile(samples, q) * 1e3 if samples else float("nan")


def click_figures(cards: list[Message], sent_at: list[float], acked: list[float]) -> dict[str, Any]:
    """Click -> card changed: card `n` was clicked (by Signoff's click) at `sent_at[n]` and the
    click acked `acked[n]` s later (nan: not acked); ack -> card changed is what follows the ack."""
    waits: list[float] = []
    after_ack: list[float] = []
    by_source: dict[str, list[float]] = collections.defaultdict(list)
    never = 0
    changed_before = 0  # cards edited between their post and their click (not by the click)
    edits_after: collections.Counter[str] = collections.Counter()
    for card, sent, ack in zip(cards, sent_at, acked, strict=True):
        after = [(at, source) for at, source in card.changes if at >= sent]
        changed_before += len(after) < len(card.changes)
        edits_after.update(source for _, source in after)
        if not after:
            never += 1
            continue
        at, source = after[0]
        waits.append(at - sent)
        if ack == ack:  # (not nan)
            after_ack.append(at - sent - ack)
        by_source[source].append(at - sent)
    return {
        "click_to_change_p50_ms": _ms(waits, 0.5),
        "click_to_change_p99_ms": _ms(waits, 0.99),
        "click_to_change_max_ms": max(waits, default=float("nan")) * 1e3,
        "ack_to_change_p50_ms": _ms(after_ack, 0.5),
        "ack_to_change_p99_ms": _ms(after_ack, 0.99),
        "click_to_change_by": {s: len(v) for s, v in sorted(by_source.items())},
        "click_to_change_p50_ms_by": {s: round(_ms(v, 0.5), 1) for s, v in sorted(by_source.items())},
        "click_to_change_p99_ms_by": {s: round(_ms(v, 0.99), 1) for s, v in sorted(by_source.items())},
        "clicked_cards_never_changed": never,
        "cards_changed_before_their_click": changed_before,
        "card_edits_after_clicks_by": dict(sorted(edits_after.items())),
    }


def final_figures(
    standin: SlackStandin, cards: list[Message], watch: FinalWatch, last_click_at: float
) -> dict[str, Any]:
    """Every card final, counted from the last click's send time (and the last answer posted)."""
    final = [n for n, card in enumerate(cards) if is_final(card)]
    # when each final card last changed (it has not changed since, up to the end of the run)
    settled = [cards[n].changes[-1][0] for n in final if cards[n].changes]
    seen = [watch.first_final[n] for n in final if n in watch.first_final]
    when, told = posted_at(standin), answered(standin)
    return {
        "cards_final": len(final),
        "cards_not_final": len(cards) - len(final),
        "cards_with_buttons_at_end": sum(has_buttons(card) for card in cards),
        "every_card_final_s": (max(settled) - last_click_at) if len(final) == len(cards) else float("nan"),
        "every_card_seen_final_s": (max(seen) - last_click_at) if len(seen) == len(cards) else float("nan"),
        "last_answer_posted_s": max(when.get(m, float("nan")) for m in told) - last_click_at
        if told
        else float("nan"),
        "last_final_card_changes": len(cards[max(final, key=lambda n: cards[n].changes[-1][0])].changes)
        if settled
        else 0,
    }


def answered(standin: SlackStandin) -> set[tuple[str, str]]:
    return {(m.channel, m.ts) for m in standin.messages if m.kind == "answer"}


def posted_at(standin: SlackStandin) -> dict[tuple[str, str], float]:
    """(channel, ts) -> when Slack accepted the chat.postMessage that posted it."""
    return {
        (str(c.reply["channel"]), str(c.reply["ts"])): c.at
        for c in standin.calls
        if c.method == "chat.postMessage" and c.status == 200 and c.reply.get("ok")
    }


def floor_s(cards: int) -> float:
    """The least time, from the first of them, to post `cards` runs' roots and cards in one channel
    at Slack's pace: (cards x POSTS_BEFORE_CARD - POST_BURST) / POST_RATE, not below 0."""
    return max(0.0, (cards * POSTS_BEFORE_CARD - POST_BURST) / POST_RATE)


def posting_figures(
    standin: SlackStandin, cards: list[Message], started: list[float], runs_in: list[str]
) -> dict[str, Any]:
    """Card `n` is run `n`'s, started at `started[n]` (monotonic) in channel `runs_in[n]`."""
    when = posted_at(standin)
    since_start = [when[(c.channel, c.ts)] - started[n] for n, c in enumerate(cards)]
    accepted = [
        (str(c.reply["channel"]), c.at)
        for c in standin.calls
        if c.method == "chat.postMessage" and c.status == 200 and c.reply.get("ok")
    ]
    channels: dict[str, dict[str, Any]] = {}
    for channel in sorted(set(runs_in)):
        ours = [n for n, c in enumerate(runs_in) if c == channel]
        first = min(started[n] for n in ours)
        last = max(when[(cards[n].channel, cards[n].ts)] for n in ours)
        floor = floor_s(len(ours))
        channels[channel] = {
            "cards": len(ours),
            "last_card_s": last - first,
            "floor_s": floor,
            "ratio": (last - first) / floor if floor else float("nan"),
            # what the channel actually carried up to its last card (roots, cards, any copies)
            "posts_until_last_card": sum(ch == channel and first <= at <= last for ch, at in accepted),
        }
    ratios = [c["ratio"] for c in channels.values()]
    worst = max(channels, key=lambda k: channels[k]["ratio"])
    return {
        "card_posted_p50_s": percentile(since_start, 0.5),
        "card_posted_p99_s": percentile(since_start, 0.99),
        "card_posted_max_s": max(since_start),
        "channel_floor_s": sorted({c["floor_s"] for c in channels.values()}),
        "channel_last_card_p50_s": percentile([c["last_card_s"] for c in channels.values()], 0.5),
        "channel_last_card_max_s": max(c["last_card_s"] for c in channels.values()),
        "channel_ratio_p50": percentile(ratios, 0.5),
        "channel_ratio_p99": percentile(ratios, 0.99),
        "channel_posts_until_last_card": sorted({c["posts_until_last_card"] for c in channels.values()}),
        "worst_channel": {"channel": worst, **channels[worst]},
    }


def _thread_of(metadata: Any) -> str | None:
    payload = (metadata or {}).get("event_payload") if isinstance(metadata, dict) else None
    return payload.get("thread_id") if isinstance(payload, dict) else None


def posts_per_run(standin: SlackStandin, threads: list[str]) -> dict[str, Any]:
    """What each run cost in Slack calls that Slack accepted: posts, and edits of its messages."""
    ours = set(threads)
    posts: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    for call in standin.calls:
        if call.method == "chat.postMessage" and call.status == 200 and call.reply.get("ok"):
            thread = _thread_of(call.args.get("metadata"))
            if thread in ours:
                posts[thread] += 1
                kinds[str(call.args["metadata"].get("event_type", "")).removeprefix("signoff_")] += 1
    # edits: a message's thread from its metadata (the response_url ids say which message)
    thread_at = {(m.channel, m.ts): _thread_of(m.metadata) for m in [*standin.messages, *standin.deleted]}
    edits: dict[str, collections.Counter[str]] = {"chat.update": collections.Counter()}
    edits["response_url"] = collections.Counter()
    for call in standin.calls:
        if call.status != 200:
            continue
        if call.method == "chat.update" and call.reply.get("ok"):
            thread = thread_at.get((str(call.args.get("channel")), str(call.args.get("ts"))))
        elif call.method == "response_url":
            issued = standin.response_urls.get(str(call.reply.get("id")))
            thread = thread_at.get((issued.channel, issued.message_ts or "")) if issued else None
        else:
            continue
        if thread in ours:
            edits[call.method][thread] += 1
    counts = [posts.get(t, 0) for t in threads]
    return {
        "posts_per_run_p50": percentile(counts, 0.5),
        "posts_per_run_max": max(counts),
        "posts_per_run_min": min(counts),
        "posts_by_kind": dict(sorted(kinds.items())),
        "edits_per_run": {
            method: {
                "p50": percentile([c.get(t, 0) for t in threads], 0.5),
                "max": max(c.get(t, 0) for t in threads),
                "mean": round(sum(c.values()) / len(threads), 2),
            }
            for method, c in edits.items()
        },
        "response_url_answers": dict(
            collections.Counter(
                f"{c.status} {c.reply.get('answer')}" for c in standin.calls if c.method == "response_url"
            )
        ),
    }
