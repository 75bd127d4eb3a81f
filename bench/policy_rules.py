"""A click's cost against the size of the policy: 3 rules, then 3,000, same clicks, one run.

    .venv/bin/python bench/policy_rules.py [--approvals 100] [--rate 50] [--rules 3 3000] [REDIS_URL]

For each policy size, a `signoff bot` and a `signoff runner` (processes, as the Procfile
runs them) start with a policy of that many rules, the refund tool matched by the last
one (a glob: the worst place); `--approvals` demo runs pause for approval, and every card
is approved at `--rate` clicks a second (open loop), by a different person each (so each
click also builds that person's gate). Prints click -> ack p50 / p99 per size and the
ratio of the largest to the smallest. Not a test: no thresholds. (On main before issue 23
a click cost about 0.7 s with 1,000 rules and 5.7 s with 3,000: every click walked them.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.click_ack import SECRET, cards_of, clicks_at, percentile, signoff_env, wait_ready, wind_up  # noqa: E402
from core.producer import start_run  # noqa: E402
from core.store import Store  # noqa: E402
from signoff_demo import redis_server  # noqa: E402
from slack_standin import SlackStandin  # noqa: E402

CHANNELS = [f"C0RULES{n}" for n in range(10)]


def policy_text(rules: int) -> str:
    """`rules` rules: one per other tool, each with its own approver; the refund last, anyone."""
    text = '[defaults]\napprovers = ["U0NOBODY"]\n'
    text += "".join(f'[[rules]]\ntools = ["tool_{n}"]\napprovers = ["U0X{n}"]\n' for n in range(rules - 1))
    return text + '[[rules]]\ntools = ["issue_*"]\napprovers = []\n'


async def round_of(redis_url: str, rules: int, approvals: int, rate: float, workdir: Path) -> list[float]:
    prefix = f"rules{os.getpid()}{int(time.time() * 1000) % 100000}"
    store = Store.from_url(redis_url, prefix)
    standin = SlackStandin(SECRET)
    await standin.start()
    port = redis_server.free_port()
    path = workdir / f"policy-{rules}.toml"
    path.write_text(policy_text(rules))
    env = {**signoff_env(standin, redis_url, prefix, port), "SIGNOFF_POLICY": str(path)}
    servers = [
        subprocess.Popen([sys.executable, "-m", "signoff", command], env=env) for command in ("bot", "runner")
    ]
    try:
        await wait_ready(port)
        threads = [
            await start_run(
                store, f"Refund order {n} for 5000", CHANNELS[n % len(CHANNELS)], "demo", requester="U0RILEY"
            )
            for n in range(approvals)
        ]
        cards = await cards_of(standin, store, threads)
        await asyncio.sleep(2)
        [acks] = await clicks_at(standin, [f"http://127.0.0.1:{port}/slack/events"], cards, rate)
        return acks
    finally:
        await wind_up(servers, standin, store, prefix)


async def main(redis_url: str, sizes: list[int], approvals: int, rate: float) -> None:
    print(
        f"{approvals} approvals per policy size, clicked at {rate:.0f}/s (open loop), each by another person"
    )
    print(f"{'rules':>8}{'p50 ms':>10}{'p99 ms':>10}")
    found: dict[int, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as workdir:
        for rules in sizes:
            acks = await round_of(redis_url, rules, approvals, rate, Path(workdir))
            found[rules] = (percentile(acks, 0.5), percentile(acks, 0.99))
            print(f"{rules:>8}{found[rules][0] * 1e3:>10.2f}{found[rules][1] * 1e3:>10.2f}", flush=True)
    small, large = found[min(sizes)], found[max(sizes)]
    print(
        f"{max(sizes)} rules / {min(sizes)} rules: p50 {large[0] / small[0]:.2f}x, p99 {large[1] / small[1]:.2f}x"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("redis_url", nargs="?")
    parser.add_argument("--approvals", type=int, default=100)
    parser.add_argument("--rate", type=float, default=50.0, help="clicks a second")
    parser.add_argument("--rules", type=int, nargs="+", default=[3, 3000])
    args = parser.parse_args()
    with redis_server.running(args.redis_url) as url:
        asyncio.run(main(url, sorted(args.rules), args.approvals, args.rate))
