"""Click-to-ack latency: Signoff's bot against a bare Bolt app, same signed payloads, one run.

    .venv/bin/python bench/click_ack.py [--clicks N] [--concurrency C] [REDIS_URL]

Both servers run as their own processes. Each Signoff click approves a fresh
pending approval, so every click takes the real path: verify the signature,
authorise, check the decision, record it with the Lua script (which also
queues the resume command), ack. The bare app's listener only acks; that is
the floor. Prints p50 / p99 for both and the ratio. Not a test: no thresholds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent_runner import redis_server  # noqa: E402
from agent_runner.protocol import ActionReview, PendingRequest, RequestKind  # noqa: E402
from agent_runner.records import Run, approval_for  # noqa: E402
from agent_runner.store import Store  # noqa: E402
from bot.cards import approval_card  # noqa: E402
from slack_standin import Message, SlackStandin  # noqa: E402

SECRET = "bench-secret"


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def wait_up(port: int) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(300):
            try:
                async with session.post(f"http://127.0.0.1:{port}/slack/events", data=b"") as _:
                    return
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


async def make_cards(store: Store, count: int) -> list[Message]:
    request = PendingRequest(
        interrupt_id="0" * 32,
        kind=RequestKind.BATCHED,
        actions=(
            ActionReview(
                name="send_email",
                args={"to": "finance@acme.com", "subject": "Q3", "body": "hello"},
                allowed_decisions=("approve", "reject"),
            ),
        ),
    )
    run = Run(thread_id="bench", graph="bench", channel="C0BENCH")
    await store.save_run(run)
    cards = []
    for n in range(count):
        approval = approval_for(request.model_copy(update={"interrupt_id": f"{n:032x}"}), run, "bench")
        await store.create_approval(approval)
        _, blocks = approval_card(approval)
        cards.append(
            Message(channel="C0BENCH", ts=f"1.{n:06d}", text="card", blocks=[b.to_dict() for b in blocks])
        )
    return cards


async def clicks(standin: SlackStandin, url: str, cards: list[Message], concurrency: int) -> list[float]:
    gate = asyncio.Semaphore(concurrency)

    async def one(n: int, card: Message) -> float:
        async with gate:
            interaction = await standin.click(f"U{n:05d}", card, "approve:0", bot_url=url)
            assert interaction.status == 200, interaction
            return interaction.seconds

    return list(await asyncio.gather(*(one(n, c) for n, c in enumerate(cards))))


async def main(redis_url: str, count: int, concurrency: int) -> None:
    prefix = f"bench{os.getpid()}"
    store = Store.from_url(redis_url, prefix)
    standin = SlackStandin(SECRET, rate_limits=False)
    await standin.start()
    bot_port, bare_port = redis_server.free_port(), redis_server.free_port()
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "SIGNOFF_PREFIX": prefix,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_BOT_TOKEN": standin.token,
        "SLACK_API_URL": standin.base_url,
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }
    # The approvals exist before the bot starts, and their announcements are dropped: the bot
    # would otherwise post 550 cards while it is being measured.
    cards = await make_cards(store, count + 50)
    await store.redis.xtrim(store.keys.events, maxlen=0)
    servers = [
        subprocess.Popen(
            [sys.executable, "-m", "agent_runner.cli", "bot"], env={**env, "PORT": str(bot_port)}
        ),
        subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "bare_bolt.py")], env={**env, "PORT": str(bare_port)}
        ),
    ]
    try:
        await wait_up(bot_port)
        await wait_up(bare_port)
        warm, cards = cards[:50], cards[50:]
        await clicks(standin, f"http://127.0.0.1:{bot_port}/slack/events", warm, concurrency)
        await clicks(standin, f"http://127.0.0.1:{bare_port}/slack/events", warm, concurrency)
        signoff: list[float] = []
        bare: list[float] = []
        for start in range(0, count, 50):  # interleave, so both see the same machine
            batch = cards[start : start + 50]
            signoff += await clicks(standin, f"http://127.0.0.1:{bot_port}/slack/events", batch, concurrency)
            bare += await clicks(standin, f"http://127.0.0.1:{bare_port}/slack/events", batch, concurrency)
        print(f"{count} clicks each, {concurrency} at a time, signed block_actions over loopback")
        print(f"{'':24}{'p50 ms':>10}{'p99 ms':>10}{'mean ms':>10}")
        for name, samples in (("signoff bot (approve)", signoff), ("bare Bolt (ack only)", bare)):
            print(
                f"{name:24}{percentile(samples, 0.5) * 1e3:>10.2f}{percentile(samples, 0.99) * 1e3:>10.2f}"
                f"{statistics.mean(samples) * 1e3:>10.2f}"
            )
        print(
            f"ratio signoff / bare: p50 {percentile(signoff, 0.5) / percentile(bare, 0.5):.2f}x, "
            f"p99 {percentile(signoff, 0.99) / percentile(bare, 0.99):.2f}x"
        )
    finally:
        for server in servers:
            server.terminate()
            server.wait(30)
        await standin.stop()
        keys = [k async for k in store.redis.scan_iter(f"{prefix}:*")]
        if keys:
            await store.redis.delete(*keys)
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("redis_url", nargs="?")
    parser.add_argument("--clicks", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    with redis_server.running(args.redis_url) as url:
        started = time.perf_counter()
        asyncio.run(main(url, args.clicks, args.concurrency))
        print(f"(took {time.perf_counter() - started:.1f} s)")
