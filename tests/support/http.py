"""Plain HTTP from a test, as a cron job or an attacker would send it."""

from __future__ import annotations

import aiohttp


async def post(url: str, body: bytes | str, headers: dict[str, str]) -> tuple[int, str]:
    """POST `body` with `headers`: the status and the answer's text."""
    async with aiohttp.ClientSession() as session, session.post(url, data=body, headers=headers) as response:
        return response.status, await response.text()
