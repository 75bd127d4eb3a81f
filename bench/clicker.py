"""Slack's side of a click bench, in a process of its own: signed requests sent open loop.

    .venv/bin/python bench/clicker.py < requests.json

Reads `[[at, url, body, headers], ...]` on standard input, POSTs each request `at` seconds
from the start (whether or not earlier ones were answered: open loop), and prints each one's
ack latency (seconds, in order) as a JSON list. `click_ack.py` runs it so that the clock of each
click runs in a loop that does nothing else: the stand-in's own loop also serves the app's Web
API calls, which a bare app does not make, and would count their cost into the app's acks.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import aiohttp


async def main(requests: list[tuple[float, str, str, dict[str, str]]]) -> list[float]:
    async with aiohttp.ClientSession() as session:

        async def one(at: float, url: str, body: str, headers: dict[str, str]) -> float:
            await asyncio.sleep(at)
            started = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"a click to {url} answered {response.status}")
            return time.perf_counter() - started

        return list(await asyncio.gather(*(one(*request) for request in requests)))


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.load(sys.stdin)))))
