"""`/signoff`: help, `pending`, `trust`, `passkey`, or a task for the channel's (or a named) graph."""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp

from bot.chatops import HELP, ChatOps
from bot.payloads import SlashCommand
from bot.service import DecisionService
from bot.views.text import escape
from core.logs import get_logger
from core.producer import start_run

log = get_logger("chatops")


def register(app: AsyncApp, service: DecisionService, chat: ChatOps) -> None:
    service = chat.service

    async def on_command(ack, context) -> None:
        command: SlashCommand = context["payload"]
        text = command.text.strip()
        user, channel = command.user_id, command.channel_id
        if text in ("", "help"):
            await ack(HELP)
            return
        if not await chat.first_delivery(f"command:{command.trigger_id}"):
            await ack("This command was received already; it was not run again.")
            return
        if text == "pending":
            await ack()
            service.later(chat.pending_list(user, channel), "pending_list")
            return
        if text == "passkey":  # a private one-time link to add (list, remove) one's passkeys
            await ack()
            service.later(_enrol_link(service, user, channel), "passkey_link")
            return
        if text == "trust":
            await ack()
            service.later(chat.trust_list(user, channel), "trust_list")
            return
        graph, task = chat.default, text
        if text.startswith("use "):
            _, graph, task = (text.split(maxsplit=2) + ["", ""])[:3]
        if not task.strip():
            await ack("What should the agent do? `/signoff use <graph> <task>`")
            return
        refusal = await chat.start_refusal(user, channel, graph)
        if refusal:
            await ack(refusal)
            return
        assert graph is not None  # start_refusal refuses when there is no graph
        thread_id = await start_run(chat.store, task, channel, graph, requester=user)
        await ack(f"Started *{escape(graph)}*: approvals and the answer will be in its thread.")
        log.info("run_requested", thread_id=thread_id, graph=graph, slack_user=user, channel=channel)

    app.command("/signoff")(on_command)


async def _enrol_link(service: DecisionService, user: str, channel: str) -> None:
    """`/signoff passkey`'s answer, only `user` sees it: their one-time link to the passkey page."""
    await service.slack.ephemeral(channel, user, await service.links.enrol(user))
