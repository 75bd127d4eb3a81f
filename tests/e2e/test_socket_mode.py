"""Socket Mode, exercised: the bot dials the stand-in, acks envelopes by id, reconnects when told."""

from __future__ import annotations

from tests.support.harness import CHANNEL, eventually, start_scene
from tests.support.people import ALICE


async def test_socket_mode_acks_by_envelope_and_reconnects_on_disconnect(redis_url):
    async with start_scene(redis_url, "demo", mode="socket") as scene:
        assert scene.standin.connections_opened == 1
        thread_id = await scene.ask("Refund order 21 for 2100")
        card = await scene.card(thread_id)

        await scene.standin.disconnect("refresh_requested")
        await eventually(
            lambda: scene.standin.connections_opened == 2 and scene.standin.socket_connected,
            what="the bot dialling in again",
        )
        click = await scene.standin.click(ALICE, card, "approve:0")

        assert click.acked
        assert "Refunded 2100 on order 21" in await scene.answer(thread_id)
        command = await scene.standin.slash(ALICE, CHANNEL, "help")
        assert command.acked and "Signoff" in command.said
