"""The stand-in's face: one page that plays Slack for one workspace (no build step).

The page (`static/`: index.html, page.js, page.css) renders what the bot sent
(Block Kit: header, section mrkdwn, context, actions with primary / danger
buttons and confirm dialogs, overflow menus, divider, inputs; modals with
inline errors, buttons inside them, pushed views and Back; ephemerals; the Home tab) and turns clicks into the same
signed requests Slack sends, through the /ui endpoints here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import zlib
from pathlib import Path
from typing import Any

from aiohttp import web

from slack_standin.models import Message
from slack_standin.people import People, _escape
from slack_standin.streaming import markdown_html

STATIC = Path(__file__).resolve().parent / "static"


CHANNELS = {"C0APPROVALS": "approvals", "C0FINANCE": "finance"}


class Page(People):
    """/ (the page), /static/*, and /ui/* (what the page shows and what people do on it).

    As Slack shows it: a channel's messages oldest first with the composer below, each
    thread folded under "N replies", and each person's notifications (who Slack would
    buzz, `notifications_for`). The page hears of changes from /ui/events (server push).
    """

    page_channel = "C0APPROVALS"
    closing = False
    prompts: dict[tuple[str, str], list[dict[str, str]]]  # (the streaming methods': `Streaming`)
    tab_prompts: dict[str, list[dict[str, str]]]

    def shown_prompts(self, dm: str) -> list[dict[str, str]]:  # (`Streaming`'s, which comes first)
        raise NotImplementedError

    @property
    def statuses(self) -> dict[tuple[str, str], str]:  # (`Streaming`'s, which comes first)
        raise NotImplementedError

    async def _page(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html")

    def _shown(self, message: Message) -> dict[str, Any]:
        return {
            "ts": message.ts,
            "channel": message.channel,
            "user": message.user,
            "text": message.text,
            "blocks": message.blocks,
            "thread_ts": message.thread_ts,
            "kind": message.kind,
            "broadcast": message.broadcast,
            # a streamed message: its Markdown drawn (raw HTML in it shown as text)
            "html": markdown_html(message.markdown) if message.markdown is not None else None,
            "streaming": message.streaming,
        }

    def version(self) -> tuple[int, ...]:
        """Changes whenever anything the page shows does."""
        return (
            len(self.messages),
            sum(m.updates for m in self.messages),
            len(self.deleted),
            len(self.ephemerals),
            sum(e.get("updates", 0) for e in self.ephemerals),  # replaced through a response_url
            len(self.views),
            sum(bool(v["open"]) for v in self.views.values()),
            zlib.crc32("".join(str(v.get("hash")) for v in self.views.values()).encode()),  # an update
            sum(len(str(v)) for v in self.home.values()),
            zlib.crc32(repr((self.statuses, self.prompts, self.tab_prompts)).encode()),  # statuses, prompts
        )

    async def _ui_events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: one `change` per change, so the page never polls."""
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        seen: tuple[int, ...] = ()
        try:
            while not self.closing:
                now = self.version()
                if now != seen:
                    seen = now
                    await response.write(f"event: change\ndata: {sum(now)}\n\n".encode())
                await asyncio.sleep(0.03)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response

    def _notification(self, message: Message) -> dict[str, Any]:
        root = message.thread_ts or message.ts
        return {
            **self._shown(message),
            "channel_name": CHANNELS.get(message.channel, "direct message"),
            "root": root,
        }

    async def _ui_state(self, request: web.Request) -> web.Response:
        user = request.query.get("user", "")
        channel = request.query.get("channel") or self.page_channel
        roots = [m for m in self.messages if m.channel == channel and (not m.thread_ts or m.broadcast)]
        threads: dict[str, list[dict[str, Any]]] = {}
        for message in self.messages:
            if message.channel == channel and message.thread_ts:
                threads.setdefault(message.thread_ts, []).append(self._shown(message))
        return web.json_response(
            {
                "messages": [self._shown(m) for m in roots],
                "threads": threads,
                "ephemerals": [
                    {**e, "user": "U0SIGNOFF", "blocks": e.get("blocks") or [], "ephemeral": True}
                    for e in self.ephemerals
                    if e["user"] == user and e["channel"] == channel
                ],
                "views": [{k: v for k, v in view.items() if k != "user"} for view in self.open_views(user)],
                "home": self.home.get(user),
                "channels": CHANNELS,
                "notifications": [self._notification(m) for m in self.notifications_for(user)][-20:],
                # the Messages tab: each thread's status; the suggested prompts, at the top of the tab
                # (the agent view) or in each thread (an install with the assistant view)
                "experience": self.experience,
                "statuses": {ts: said for (c, ts), said in self.statuses.items() if c == channel},
                "prompts": {ts: offered for (c, ts), offered in self.prompts.items() if c == channel},
                "tab_prompts": self.shown_prompts(channel) if channel.startswith("D") else [],
            }
        )

    async def _ephemeral_click(self, user: str, body: dict[str, Any]) -> web.Response:
        """A click on an ephemeral message only `user` sees (a `/signoff trust` list's Revoke)."""
        shown = [e for e in self.ephemerals if e["user"] == user and e.get("ts") == body.get("ts")]
        try:
            if shown:
                return web.json_response(
                    {"ok": (await self.click_ephemeral(user, shown[0], body["action_id"])).acked}
                )
        except LookupError:
            pass
        return web.json_response({"ok": False, "error": "no_such_element"})

    async def _ui_say(self, user: str, body: dict[str, Any]) -> None:
        """What a person writes in the composer or a thread: a command, a mention, or a message."""
        text = str(body.get("text", "")).strip()
        thread_ts = body.get("thread_ts")
        channel = body.get("channel") or self.page_channel
        if text.startswith("/signoff"):  # the slash command, as Slack's composer sends it
            await self.slash(user, channel, text.removeprefix("/signoff").strip())
        elif text.startswith("@signoff"):
            await self.mention(user, channel, _escape(text.removeprefix("@signoff").strip()), thread_ts)
        else:
            kind = "im" if channel.startswith("D") else "channel"  # the app's DM: the Messages tab
            await self.say(user, channel, _escape(text), thread_ts, channel_type=kind)

    async def _ui_action(self, request: web.Request) -> web.Response:
        what = request.match_info["what"]
        body = await request.json()
        user = body.get("user", "")
        if what == "say":
            await self._ui_say(user, body)
            return web.json_response({"ok": True})
        if what == "messages-tab":  # the Messages tab opened: the agent view's app_home_opened, or
            if self.experience == "agent":  # (the assistant view) a new chat, unless the last is unused
                await self.open_messages_tab(user)
                return web.json_response({"ok": True})
            dm = self.dm_channel(user)
            roots = [m for m in self.messages if m.channel == dm and not m.thread_ts]
            unused = bool(roots) and roots[-1].quiet and not self.thread(dm, roots[-1].ts)[1:]
            if not unused:
                await self.open_agent_thread(user)
            return web.json_response({"ok": True})
        if what == "click" and body.get("view_id"):
            view = self.views.get(str(body["view_id"]))
            if view is None:
                return web.json_response({"ok": False, "error": "view_not_found"})
            shown = body.get("view")
            if isinstance(shown, dict):  # what this person's screen shows: maybe older than the view now
                view = {**view, "blocks": shown.get("blocks", []), "hash": shown.get("hash")}
            try:
                interaction = await self.click_in_view(user, view, body["action_id"], body.get("selected"))
            except LookupError:
                return web.json_response({"ok": False, "error": "no_such_element"})
            return web.json_response({"ok": interaction.acked})
        if what == "click" and body.get("ephemeral"):
            return await self._ephemeral_click(user, body)
        if what == "click":
            message = self.message(body.get("channel", ""), body.get("ts", ""))
            if message is None:
                return web.json_response({"ok": False, "error": "message_not_found"})
            shown = body.get("blocks")
            if isinstance(shown, list):  # what this person's screen shows: maybe older than the card now
                message = dataclasses.replace(message, blocks=shown)
            try:
                interaction = await self.click(user, message, body["action_id"], body.get("selected"))
            except LookupError:
                return web.json_response({"ok": False, "error": "no_such_element"})
            return web.json_response({"ok": interaction.acked})
        if what == "submit":
            view = self.views.get(body.get("view_id", ""))
            if view is None or not view["open"]:
                return web.json_response({"ok": False, "error": "view_not_found"})
            interaction = await self.submit(user, view, body.get("values") or {})
            return web.json_response(
                interaction.json() if interaction.body.strip().startswith("{") else {"ok": False}
            )
        if what == "close":
            view = self.views.get(body.get("view_id", ""))
            if view is not None and view["open"]:
                self.close_view(user, view)
            return web.json_response({"ok": True})
        if what == "home":
            await self.open_home(user)
            return web.json_response({"ok": True})
        return web.json_response({"ok": False, "error": "unknown"}, status=404)
