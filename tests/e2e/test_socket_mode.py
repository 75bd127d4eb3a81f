"""Socket Mode, exercised: the bot dials the stand-in, acks envelopes by id, reconnects when told."""

from __future__ import annotations

from tests.harness import CHANNEL, Loop, eventually

ALICE = "U0ALICE"


async def test_socket_mode_acks_by_envelope_and_reconnects_on_disconnect(redis_url):
    async with Loop(redis_url, mode="socket") as loop:
        await loop.start_bot()
        await loop.start_runner("demo")
        assert loop.standin.connections_opened == 1
        thread_id = await loop.ask("Refund order 21 for 2100")
        card = await loop.card(thread_id)

        await loop.standin.disconnect("refresh_requested")
        await eventually(
            lambda: loop.standin.connections_opened == 2 and loop.standin.socket_connected,
            what="the bot dialling in again",
        )
        click = await loop.standin.click(ALICE, card, "approve:0")

        assert click.acked
        assert "Refunded 2100 on order 21" in await loop.answer(thread_id)
        command = await loop.standin.slash(ALICE, CHANNEL, "help")
        assert command.acked and "Signoff" in command.said
