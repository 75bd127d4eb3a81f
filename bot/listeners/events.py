"""Slack's events: a mention, a DM or a reply in a run's thread (the agent is asked), the Home tab
opened, and the Messages tab opened (the agent view: its suggested prompts), or a thread started
there (an install with Slack's earlier assistant view: the same prompts, in the thread).

The events the manifest subscribes to are exactly the ones handled here, and
`assistant_thread_started` besides (`bot.slack.app_needs`; tests/unit/test_slack_manifest.py)."""

from __future__ import annotations

import re

from slack_bolt.async_app import AsyncApp

from bot.agent_threads import offer
from bot.chatops import ChatOps
from bot.payloads import AgentThreadStarted, EventCallback, HomeOpened, MessageEvent
from bot.service import DecisionService


def register(app: AsyncApp, service: DecisionService, chat: ChatOps) -> None:
    """Long: one small listener per event, each a few lines, registered where it is defined (Bolt's
    template): split up, the registration would hide which one answers what."""
    service = chat.service

    async def on_mention(context) -> None:
        payload: EventCallback = context["payload"]
        event = payload.event
        if not isinstance(event, MessageEvent) or event.bot_id or not event.user:
            return
        if not await chat.first_delivery(f"event:{payload.event_id}"):
            return
        text = strip_mention(event.text, context.get("bot_user_id"))
        root = event.thread_ts or event.ts
        service.later(chat.converse(event.user, event.channel, root, text), "converse")

    async def on_message(context) -> None:
        payload: EventCallback = context["payload"]
        event = payload.event
        bot_user = context.get("bot_user_id")
        if (
            not isinstance(event, MessageEvent)
            or event.subtype
            or event.bot_id
            or not event.user
            or event.user == bot_user
        ):
            return
        if bot_user and f"<@{bot_user}" in event.text:
            return  # the app_mention event carries it
        if event.channel_type == "im":
            root = event.thread_ts or event.ts
        elif event.thread_ts and await service.slack.state.thread_for(event.channel, event.thread_ts):
            root = event.thread_ts
        else:
            return
        if await chat.first_delivery(f"event:{payload.event_id}"):
            service.later(chat.converse(event.user, event.channel, root, event.text), "converse")

    app.event("app_mention")(on_mention)
    app.event("message")(on_message)

    async def on_started(context) -> None:  # (an install with the assistant view)
        payload: EventCallback = context["payload"]
        event = payload.event
        if not isinstance(event, AgentThreadStarted):
            return
        thread = event.assistant_thread

        async def offer_in_thread() -> None:
            await service.slack.state.saw_assistant_view()
            await offer(chat, thread.channel_id, thread.thread_ts)

        service.later(offer_in_thread(), "suggested_prompts")

    app.event("assistant_thread_started")(on_started)

    async def on_home(context) -> None:
        payload: EventCallback = context["payload"]
        event = payload.event
        if not isinstance(event, HomeOpened):
            return
        if event.tab == "home":
            service.later(chat.publish_home(event.user), "home")
        elif event.tab == "messages" and event.channel and event.channel.startswith("D"):

            async def offer_in_tab(dm: str) -> None:  # (an assistant-view install's come with its threads)
                if not await service.slack.state.assistant_view():
                    await offer(chat, dm)

            service.later(offer_in_tab(event.channel), "suggested_prompts")

    app.event("app_home_opened")(on_home)


def strip_mention(text: str, bot_user_id: str | None) -> str:
    pattern = rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>" if bot_user_id else r"^\s*<@[A-Z0-9]+(\|[^>]*)?>"
    return re.sub(pattern, "", text, count=1).strip()
