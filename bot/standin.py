"""A local Slack: the one stand-in, for the tests and the demo.

It speaks the Web API to the bot (point `SLACK_API_URL` at `base_url`) and
sends signed interaction payloads to the bot's real `/slack/events` endpoint,
the way Slack does, with Slack's rules enforced:

* Block Kit limits: bad blocks get `invalid_blocks` / `msg_blocks_too_long`,
  bad views `invalid_arguments`; nothing is truncated for you.
* Rate limits: chat.postMessage about one a second per channel (short bursts
  pass), others per method; over the limit, HTTP 429 with Retry-After.
  `fail_next` injects 429s and 5xx on demand.
* Acks: an interaction not answered within 3 s counts as failed, as Slack
  shows the user an error; `trigger_id`s live 3 s and work once.
* Slowness: `delay_next` makes Slack take a call (the message exists) and
  answer it late, as when a process dies before it learns the message's ts.
* Message metadata is kept and returned by conversations.history / .replies
  with `include_all_metadata`, as Slack does; bots may delete their messages.

It records every call so tests can assert what a person would have seen.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiohttp import web
from slack_sdk.signature import SignatureVerifier

ACK_LIMIT_S = 3.0
TRIGGER_TTL_S = 3.0


@dataclass
class Call:
    method: str
    args: dict[str, Any]
    status: int
    reply: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


@dataclass
class Message:
    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]]
    thread_ts: str | None = None
    user: str = "U0SIGNOFF"
    updates: int = 0
    metadata: dict[str, Any] | None = None

    @property
    def kind(self) -> str | None:
        """The Signoff message kind from its metadata (approval, answer, error, run)."""
        event = (self.metadata or {}).get("event_type", "")
        return event.removeprefix("signoff_") if event.startswith("signoff_") else None


@dataclass
class Interaction:
    """What Slack saw of one click or submission: the bot's answer and its latency."""

    status: int
    body: str
    seconds: float

    @property
    def acked(self) -> bool:
        return self.status == 200 and self.seconds <= ACK_LIMIT_S

    def json(self) -> dict[str, Any]:
        return json.loads(self.body) if self.body.strip() else {}

    @property
    def said(self) -> str:
        """What Slack shows the person for a command's answer (JSON or plain text)."""
        try:
            return str(self.json().get("text", ""))
        except ValueError:
            return self.body


@dataclass
class Bucket:
    rate: float
    burst: float
    tokens: float = -1
    last: float = field(default_factory=time.monotonic)

    def take(self) -> float:
        """0 if allowed, else seconds to wait."""
        now = time.monotonic()
        if self.tokens < 0:
            self.tokens = self.burst
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


# method -> (per-second rate, burst); chat.postMessage is per channel
RATES = {"chat.postMessage": (1.0, 4), "chat.update": (1.0, 20), "chat.postEphemeral": (2.0, 30),
         "views.open": (2.0, 30), "views.update": (2.0, 30), "views.push": (2.0, 30)}


class SlackStandin:
    def __init__(self, signing_secret: str, bot_url: str | None = None, token: str = "xoxb-standin",
                 team_id: str = "T0STANDIN", groups: dict[str, list[str]] | None = None,
                 rate_limits: bool = True):
        self.signing_secret = signing_secret
        self.bot_url = bot_url
        self.token = token
        self.team_id = team_id
        self.groups = groups or {}
        self.rate_limits = rate_limits
        self.messages: list[Message] = []
        self.ephemerals: list[dict[str, Any]] = []
        self.views: dict[str, dict[str, Any]] = {}
        self.home: dict[str, dict[str, Any]] = {}
        self.calls: list[Call] = []
        self.interactions: list[Interaction] = []
        self._faults: dict[str, list[tuple[int, int]]] = {}
        self._delays: dict[str, list[tuple[float, str | None, bool]]] = {}
        self.deleted: list[Message] = []
        self._buckets: dict[tuple[str, str], Bucket] = {}
        self._triggers: dict[str, tuple[str, float]] = {}
        self._clock = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.base_url = ""
        self._session: aiohttp.ClientSession | None = None

    # lifecycle ----------------------------------------------------------

    def web_app(self, page: bool = False) -> web.Application:
        app = web.Application()
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/api/{method}", self._api)
        if page:
            app.router.add_get("/", self._page)
            app.router.add_get("/ui/state", self._ui_state)
            app.router.add_post("/ui/{what}", self._ui_action)
        return app

    async def start(self, port: int = 0, host: str = "127.0.0.1", page: bool = False) -> str:
        """Serve the Web API (and, with `page`, the clickable Slack page at /)."""
        self._runner = web.AppRunner(self.web_app(page), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://{host}:{bound}/api/"
        self._session = aiohttp.ClientSession()
        return self.base_url

    async def stop(self) -> None:
        if self._session:
            await self._session.close()
        if self._runner:
            await self._runner.cleanup()

    # the Web API ----------------------------------------------------------

    def fail_next(self, method: str, status: int = 500, count: int = 1, retry_after: int = 1) -> None:
        """The next `count` calls of `method` get HTTP `status` (429 carries Retry-After)."""
        self._faults.setdefault(method, []).extend([(status, retry_after)] * count)

    def delay_next(self, method: str, seconds: float, count: int = 1, kind: str | None = None,
                   before: bool = False) -> None:
        """The next `count` calls of `method` (of Signoff message `kind`, if given) are answered
        `seconds` late: taking effect at once, or only after the wait with `before`."""
        self._delays.setdefault(method, []).extend([(seconds, kind, before)] * count)

    def _delay_for(self, method: str, args: dict[str, Any]) -> tuple[float, bool]:
        queue = self._delays.get(method) or []
        metadata = args.get("metadata") if isinstance(args.get("metadata"), dict) else {}
        kind = str(metadata.get("event_type", "")).removeprefix("signoff_")
        for n, (seconds, wanted, before) in enumerate(queue):
            if wanted is None or wanted == kind:
                del queue[n]
                return seconds, before
        return 0.0, False

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args = await _arguments(request)
        if request.headers.get("Authorization") != f"Bearer {self.token}" and args.get("token") != self.token:
            return self._reply(method, args, {"ok": False, "error": "invalid_auth"})
        faults = self._faults.get(method)
        if faults:
            status, retry_after = faults.pop(0)
            self.calls.append(Call(method, args, status, {}))
            headers = {"Retry-After": str(retry_after)} if status == 429 else {}
            return web.json_response({"ok": False, "error": "ratelimited" if status == 429 else "fatal_error"},
                                     status=status, headers=headers)
        if self.rate_limits and method in RATES:
            scope = str(args.get("channel", "")) if method == "chat.postMessage" else ""
            rate, burst = RATES[method]
            wait = self._buckets.setdefault((method, scope), Bucket(rate, burst)).take()
            if wait:
                self.calls.append(Call(method, args, 429, {}))
                return web.json_response({"ok": False, "error": "ratelimited"}, status=429,
                                         headers={"Retry-After": str(max(1, round(wait)))})
        handler = getattr(self, "_" + method.replace(".", "_"), None)
        delay, before = self._delay_for(method, args)
        if before:
            await asyncio.sleep(delay)
        reply = handler(args) if handler else {"ok": False, "error": "unknown_method"}
        if delay and not before:
            await asyncio.sleep(delay)
        return self._reply(method, args, reply)

    def _reply(self, method: str, args: dict[str, Any], reply: dict[str, Any]) -> web.Response:
        self.calls.append(Call(method, args, 200, reply))
        return web.json_response(reply)

    def _next_ts(self) -> str:
        return f"{int(time.time())}.{next(self._clock):06d}"

    def _auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": "http://standin.local/", "team": "Stand-in", "user": "signoff",
                "team_id": self.team_id, "user_id": "U0SIGNOFF", "bot_id": "B0SIGNOFF"}

    def _chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        problem = _message_problem(args)
        if problem:
            return problem
        metadata = args.get("metadata")
        message = Message(channel=args["channel"], ts=self._next_ts(), text=args.get("text", ""),
                          blocks=args.get("blocks") or [], thread_ts=args.get("thread_ts"),
                          metadata=json.loads(metadata) if isinstance(metadata, str) else metadata)
        self.messages.append(message)
        return {"ok": True, "channel": message.channel, "ts": message.ts,
                "message": {"text": message.text, "ts": message.ts, "blocks": message.blocks}}

    def _chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        problem = _message_problem(args)
        if problem:
            return problem
        message = self.message(args.get("channel", ""), args.get("ts", ""))
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        message.text = args.get("text", message.text)
        message.blocks = args.get("blocks") or message.blocks
        message.updates += 1
        return {"ok": True, "channel": message.channel, "ts": message.ts, "text": message.text}

    def _chat_delete(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self.message(args.get("channel", ""), str(args.get("ts", "")))
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        if message.user != "U0SIGNOFF":
            return {"ok": False, "error": "cant_delete_message"}
        self.messages.remove(message)
        self.deleted.append(message)
        return {"ok": True, "channel": message.channel, "ts": message.ts}

    def _listed(self, message: Message, metadata: bool) -> dict[str, Any]:
        shown: dict[str, Any] = {"type": "message", "user": message.user, "text": message.text, "ts": message.ts,
                                 "blocks": message.blocks}
        if message.thread_ts:
            shown["thread_ts"] = message.thread_ts
        if metadata and message.metadata:
            shown["metadata"] = message.metadata
        return shown

    def _conversations_history(self, args: dict[str, Any]) -> dict[str, Any]:
        """Top-level messages, newest first (thread replies are not in a channel's history)."""
        channel = args.get("channel", "")
        oldest = float(args.get("oldest") or 0)
        metadata = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        found = [m for m in reversed(self.messages)
                 if m.channel == channel and not m.thread_ts and float(m.ts) >= oldest]
        return {"ok": True, "messages": [self._listed(m, metadata) for m in found], "has_more": False}

    def _conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        """A thread, root first."""
        channel, ts = args.get("channel", ""), str(args.get("ts", ""))
        if self.message(channel, ts) is None:
            return {"ok": False, "error": "thread_not_found"}
        metadata = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        return {"ok": True, "messages": [self._listed(m, metadata) for m in self.thread(channel, ts)],
                "has_more": False}

    def _chat_postEphemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        if not args.get("user") or not args.get("channel"):
            return {"ok": False, "error": "invalid_arguments"}
        self.ephemerals.append({k: args.get(k) for k in ("channel", "user", "text", "thread_ts")})
        return {"ok": True, "message_ts": self._next_ts()}

    def _views_open(self, args: dict[str, Any]) -> dict[str, Any]:
        trigger = self._triggers.pop(str(args.get("trigger_id")), None)
        if trigger is None:
            return {"ok": False, "error": "invalid_trigger_id"}
        user, issued = trigger
        if time.monotonic() - issued > TRIGGER_TTL_S:
            return {"ok": False, "error": "expired_trigger_id"}
        return self._store_view(args.get("view"), user)

    def _views_update(self, args: dict[str, Any]) -> dict[str, Any]:
        current = self.views.get(str(args.get("view_id")))
        if current is None:
            return {"ok": False, "error": "not_found"}
        return self._store_view(args.get("view"), current["user"], current["id"])

    def _views_push(self, args: dict[str, Any]) -> dict[str, Any]:
        return self._views_open(args)

    def _store_view(self, view: Any, user: str, view_id: str | None = None) -> dict[str, Any]:
        view = json.loads(view) if isinstance(view, str) else view
        errors = view_problems(view or {})
        if errors:
            return {"ok": False, "error": "invalid_arguments", "response_metadata": {"messages": errors}}
        stored = {**view, "id": view_id or f"V{uuid.uuid4().hex[:10].upper()}", "user": user, "open": True}
        self.views[stored["id"]] = stored
        return {"ok": True, "view": stored}

    def _usergroups_users_list(self, args: dict[str, Any]) -> dict[str, Any]:
        group = args.get("usergroup")
        if group not in self.groups:
            return {"ok": False, "error": "no_such_subteam"}
        return {"ok": True, "users": self.groups[group]}

    # what people see --------------------------------------------------------

    def message(self, channel: str, ts: str) -> Message | None:
        return next((m for m in self.messages if m.channel == channel and m.ts == ts), None)

    def thread(self, channel: str, thread_ts: str) -> list[Message]:
        return [m for m in self.messages if m.channel == channel and thread_ts in (m.ts, m.thread_ts)]

    def cards(self) -> list[Message]:
        return [m for m in self.messages if any(b.get("type") == "actions" or
                                                 str(b.get("block_id", "")).startswith("action:")
                                                 for b in m.blocks)]

    def open_views(self, user: str) -> list[dict[str, Any]]:
        return [v for v in self.views.values() if v["user"] == user and v["open"]]

    def ephemerals_for(self, user: str) -> list[str]:
        return [e["text"] for e in self.ephemerals if e["user"] == user]

    # people writing, and the Events API ---------------------------------------

    def _chat_getPermalink(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, ts = args.get("channel", ""), str(args.get("message_ts", ""))
        if self.message(channel, ts) is None:
            return {"ok": False, "error": "message_not_found"}
        return {"ok": True, "channel": channel,
                "permalink": f"http://standin.local/archives/{channel}/p{ts.replace('.', '')}"}

    def _views_publish(self, args: dict[str, Any]) -> dict[str, Any]:
        view = json.loads(args["view"]) if isinstance(args.get("view"), str) else args.get("view") or {}
        errors = block_problems(view.get("blocks") or [], limit=100)
        if view.get("type") != "home" or errors:
            return {"ok": False, "error": "invalid_arguments", "response_metadata": {"messages": errors}}
        self.home[str(args.get("user_id"))] = view
        return {"ok": True, "view": {**view, "id": f"VH{args.get('user_id')}"}}

    def write(self, user: str, channel: str, text: str, thread_ts: str | None = None) -> Message:
        """A person's message appears in the channel (no event is sent)."""
        message = Message(channel=channel, ts=self._next_ts(), text=text, blocks=[], thread_ts=thread_ts, user=user)
        self.messages.append(message)
        return message

    def message_event(self, message: Message, kind: str = "message", channel_type: str = "channel",
                      **extra: Any) -> dict[str, Any]:
        event = {"type": kind, "user": message.user, "text": message.text, "ts": message.ts,
                 "channel": message.channel, "channel_type": channel_type, "event_ts": message.ts,
                 "team": self.team_id, **extra}
        if message.thread_ts:
            event["thread_ts"] = message.thread_ts
        return {"token": "legacy-verification-token", "team_id": self.team_id, "api_app_id": "A0SIGNOFF",
                "event": event, "type": "event_callback", "event_id": f"Ev{uuid.uuid4().hex[:12].upper()}",
                "event_time": int(time.time()), "authorizations": [
                    {"team_id": self.team_id, "user_id": "U0SIGNOFF", "is_bot": True}]}

    async def mention(self, user: str, channel: str, text: str, thread_ts: str | None = None) -> tuple[
            Message, Interaction]:
        """`user` writes `@signoff text` in `channel` (or in a thread): Slack sends app_mention."""
        message = self.write(user, channel, f"<@U0SIGNOFF> {text}", thread_ts)
        return message, await self.deliver(self.message_event(message, "app_mention"))

    async def say(self, user: str, channel: str, text: str, thread_ts: str | None = None,
                  channel_type: str = "channel") -> tuple[Message, Interaction]:
        """`user` writes a plain message: Slack sends a message event."""
        message = self.write(user, channel, text, thread_ts)
        return message, await self.deliver(self.message_event(message, channel_type=channel_type))

    async def deliver(self, envelope: dict[str, Any], retry: int = 0) -> Interaction:
        """Send an Events API envelope; `retry` > 0 is Slack delivering it again."""
        headers = {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"} if retry else {}
        return await self.send_raw(json.dumps(envelope), "application/json", headers)

    async def slash(self, user: str, channel: str, text: str, command: str = "/signoff") -> Interaction:
        form = {"token": "legacy-verification-token", "team_id": self.team_id, "team_domain": "standin",
                "channel_id": channel, "channel_name": channel.lower(), "user_id": user, "user_name": user.lower(),
                "command": command, "text": text, "api_app_id": "A0SIGNOFF",
                "response_url": f"{self.base_url.rstrip('/')}/response/{uuid.uuid4().hex}",
                "trigger_id": self._issue_trigger(user)}
        return await self.send_raw(urlencode(form), "application/x-www-form-urlencoded")

    async def open_home(self, user: str) -> Interaction:
        envelope = {"token": "legacy-verification-token", "team_id": self.team_id, "api_app_id": "A0SIGNOFF",
                    "type": "event_callback", "event_id": f"Ev{uuid.uuid4().hex[:12].upper()}",
                    "event_time": int(time.time()),
                    "event": {"type": "app_home_opened", "user": user, "channel": f"D{user}", "tab": "home",
                              "event_ts": f"{time.time():.6f}"}}
        return await self.deliver(envelope)

    # the page ---------------------------------------------------------------

    page_channel = "C0APPROVALS"

    async def _page(self, request: web.Request) -> web.Response:
        from bot.standin_page import PAGE

        return web.Response(text=PAGE, content_type="text/html")

    def _shown(self, message: Message) -> dict[str, Any]:
        return {"ts": message.ts, "channel": message.channel, "user": message.user, "text": message.text,
                "blocks": message.blocks, "thread_ts": message.thread_ts, "kind": message.kind}

    async def _ui_state(self, request: web.Request) -> web.Response:
        user = request.query.get("user", "")
        channel = self.page_channel
        roots = [m for m in self.messages if m.channel == channel and not m.thread_ts]
        threads: dict[str, list[dict[str, Any]]] = {}
        for message in self.messages:
            if message.channel == channel and message.thread_ts:
                threads.setdefault(message.thread_ts, []).append(self._shown(message))
        return web.json_response({
            "messages": [self._shown(m) for m in roots],
            "threads": threads,
            "ephemerals": [{**e, "user": "U0SIGNOFF", "blocks": []} for e in self.ephemerals
                           if e["user"] == user and e["channel"] == channel],
            "views": [{k: v for k, v in view.items() if k != "user"} for view in self.open_views(user)],
            "home": self.home.get(user),
        })

    async def _ui_action(self, request: web.Request) -> web.Response:
        what = request.match_info["what"]
        body = await request.json()
        user = body.get("user", "")
        if what == "say":
            text = str(body.get("text", "")).strip()
            thread_ts = body.get("thread_ts")
            if text.startswith("@signoff"):
                await self.mention(user, self.page_channel, _escape(text.removeprefix("@signoff").strip()), thread_ts)
            else:
                await self.say(user, self.page_channel, _escape(text), thread_ts)
            return web.json_response({"ok": True})
        if what == "click":
            message = self.message(body.get("channel", ""), body.get("ts", ""))
            if message is None:
                return web.json_response({"ok": False, "error": "message_not_found"})
            interaction = await self.click(user, message, body["action_id"], body.get("selected"))
            return web.json_response({"ok": interaction.acked})
        if what == "submit":
            view = self.views.get(body.get("view_id", ""))
            if view is None or not view["open"]:
                return web.json_response({"ok": False, "error": "view_not_found"})
            interaction = await self.submit(user, view, body.get("values") or {})
            return web.json_response(interaction.json() if interaction.status == 200 else {"ok": False})
        if what == "close":
            view = self.views.get(body.get("view_id", ""))
            if view is not None:
                view["open"] = False
            return web.json_response({"ok": True})
        if what == "home":
            await self.open_home(user)
            return web.json_response({"ok": True})
        return web.json_response({"ok": False, "error": "unknown"}, status=404)

    # interactions -----------------------------------------------------------

    def _issue_trigger(self, user: str) -> str:
        trigger = f"{next(self._clock)}.{uuid.uuid4().hex[:12]}"
        self._triggers[trigger] = (user, time.monotonic())
        return trigger

    def _user(self, user: str) -> dict[str, Any]:
        return {"id": user, "username": user.lower(), "name": user.lower(), "team_id": self.team_id}

    def block_action_payload(self, user: str, message: Message, action_id: str,
                             selected: str | None = None) -> dict[str, Any]:
        """The payload Slack sends when `user` uses the element `action_id` on `message`."""
        block, element = find_element(message.blocks, action_id)
        action: dict[str, Any] = {"action_id": action_id, "block_id": block.get("block_id"),
                                  "type": element["type"], "action_ts": f"{time.time():.6f}"}
        if element["type"] == "button":
            action.update(text=element["text"], value=element.get("value"), style=element.get("style"))
        elif element["type"] == "overflow":
            option = next(o for o in element["options"] if o["value"] == selected or o["text"]["text"] == selected)
            action["selected_option"] = option
        return {
            "type": "block_actions",
            "user": self._user(user),
            "api_app_id": "A0SIGNOFF",
            "token": "legacy-verification-token",
            "container": {"type": "message", "message_ts": message.ts, "channel_id": message.channel,
                          "is_ephemeral": False},
            "trigger_id": self._issue_trigger(user),
            "team": {"id": self.team_id, "domain": "standin"},
            "is_enterprise_install": False,
            "channel": {"id": message.channel, "name": message.channel.lower()},
            "message": {"type": "message", "ts": message.ts, "text": message.text, "blocks": message.blocks,
                        "thread_ts": message.thread_ts},
            "state": {"values": {}},
            "response_url": f"{self.base_url.rstrip('/')}/response/{uuid.uuid4().hex}",
            "actions": [action],
        }

    async def click(self, user: str, message: Message, action_id: str, selected: str | None = None,
                    bot_url: str | None = None) -> Interaction:
        """`user` clicks the element `action_id` on `message` (it must be on the card)."""
        return await self.send(self.block_action_payload(user, message, action_id, selected), bot_url=bot_url)

    async def submit(self, user: str, view: dict[str, Any], values: dict[str, str | None]) -> Interaction:
        """`user` submits the modal `view` with `values` ({block_id: text}; others keep their initial value)."""
        state: dict[str, Any] = {}
        for block in view.get("blocks", []):
            if block.get("type") != "input":
                continue
            element = block["element"]
            text = values[block["block_id"]] if block["block_id"] in values else element.get("initial_value")
            state[block["block_id"]] = {element["action_id"]: {"type": element["type"], "value": text}}
        payload = {
            "type": "view_submission",
            "team": {"id": self.team_id, "domain": "standin"},
            "user": self._user(user),
            "api_app_id": "A0SIGNOFF",
            "token": "legacy-verification-token",
            "trigger_id": self._issue_trigger(user),
            "view": {**{k: v for k, v in view.items() if k not in ("user", "open")},
                     "team_id": self.team_id, "state": {"values": state}, "hash": uuid.uuid4().hex,
                     "root_view_id": view["id"], "app_id": "A0SIGNOFF", "bot_id": "B0SIGNOFF"},
            "response_urls": [],
            "is_enterprise_install": False,
        }
        interaction = await self.send(payload)
        if interaction.status == 200 and interaction.json().get("response_action") != "errors":
            self.views[view["id"]]["open"] = False
        return interaction

    async def send(self, payload: dict[str, Any], *, signature: str | None = None,
                   timestamp: int | None = None, bot_url: str | None = None) -> Interaction:
        """POST a signed interaction to the bot, as Slack does; a forged one with `signature`."""
        return await self.send_raw(urlencode({"payload": json.dumps(payload)}), "application/x-www-form-urlencoded",
                                   signature=signature, timestamp=timestamp, bot_url=bot_url)

    async def send_raw(self, body: str, content_type: str, extra_headers: dict[str, str] | None = None, *,
                       signature: str | None = None, timestamp: int | None = None,
                       bot_url: str | None = None) -> Interaction:
        target = bot_url or self.bot_url
        assert target and self._session, "start() the stand-in with bot_url set"
        stamp = str(timestamp if timestamp is not None else int(time.time()))
        signed = signature or SignatureVerifier(self.signing_secret).generate_signature(timestamp=stamp, body=body)
        headers = {"Content-Type": content_type, "X-Slack-Request-Timestamp": stamp,
                   "X-Slack-Signature": signed, **(extra_headers or {})}
        started = time.perf_counter()
        try:
            async with self._session.post(target, data=body, headers=headers,
                                          timeout=aiohttp.ClientTimeout(total=ACK_LIMIT_S + 2)) as response:
                text = await response.text()
                interaction = Interaction(response.status, text, time.perf_counter() - started)
        except asyncio.TimeoutError:
            interaction = Interaction(0, "", time.perf_counter() - started)
        self.interactions.append(interaction)
        return interaction

    def late_acks(self) -> list[Interaction]:
        return [i for i in self.interactions if i.status == 200 and i.seconds > ACK_LIMIT_S]


async def _arguments(request: web.Request) -> dict[str, Any]:
    if request.content_type == "application/json":
        args = dict(await request.json())
    else:
        args = dict(await request.post())
    args.update(request.query)
    for key in ("blocks", "view", "attachments", "metadata"):
        if isinstance(args.get(key), str):
            try:
                args[key] = json.loads(args[key])
            except ValueError:
                return {**args, key: None, "_bad": key}
    return args


def _escape(text: str) -> str:
    """What Slack does to a person's message text before an app sees it."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def find_element(blocks: list[dict[str, Any]], action_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    for block in blocks:
        candidates = list(block.get("elements", []))
        if block.get("accessory"):
            candidates.append(block["accessory"])
        for element in candidates:
            if isinstance(element, dict) and element.get("action_id") == action_id:
                return block, element
    raise LookupError(f"no element {action_id!r} on this message")


# Block Kit limits -------------------------------------------------------------

def _text_of(obj: Any) -> str:
    return obj.get("text", "") if isinstance(obj, dict) else str(obj or "")


def _message_problem(args: dict[str, Any]) -> dict[str, Any] | None:
    if args.get("_bad"):
        return {"ok": False, "error": "invalid_blocks"}
    blocks = args.get("blocks") or []
    if not blocks and not args.get("text"):
        return {"ok": False, "error": "no_text"}
    errors = block_problems(blocks, limit=50)
    if errors:
        return {"ok": False, "error": "invalid_blocks", "errors": errors}
    if total_text(blocks) > 12_000:
        return {"ok": False, "error": "msg_blocks_too_long"}
    return None


def total_text(blocks: list[dict[str, Any]]) -> int:
    size = 0
    for block in blocks:
        size += len(_text_of(block.get("text")))
        size += sum(len(_text_of(f)) for f in block.get("fields", []))
        size += sum(len(_text_of(e)) for e in block.get("elements", []) if e.get("type") in ("mrkdwn", "plain_text"))
    return size


def view_problems(view: dict[str, Any]) -> list[str]:
    errors = block_problems(view.get("blocks") or [], limit=100)
    for key in ("title", "submit", "close"):
        if key in view and len(_text_of(view[key])) > 24:
            errors.append(f"{key} must be at most 24 characters")
    if not view.get("title"):
        errors.append("title is required")
    if any(b.get("type") == "input" for b in view.get("blocks", [])) and not view.get("submit"):
        errors.append("submit is required when the view has inputs")
    if len(view.get("private_metadata") or "") > 3_000:
        errors.append("private_metadata must be at most 3000 characters")
    if len(view.get("callback_id") or "") > 255:
        errors.append("callback_id must be at most 255 characters")
    return errors


def block_problems(blocks: list[dict[str, Any]], limit: int) -> list[str]:
    errors: list[str] = []
    if len(blocks) > limit:
        errors.append(f"no more than {limit} blocks allowed")
    seen: set[str] = set()
    for number, block in enumerate(blocks):
        where = f"blocks[{number}]"
        block_id = block.get("block_id")
        if block_id is not None:
            if len(block_id) > 255:
                errors.append(f"{where}.block_id must be at most 255 characters")
            if block_id in seen:
                errors.append(f"{where}.block_id {block_id!r} is not unique")
            seen.add(block_id)
        kind = block.get("type")
        if kind == "header":
            if block.get("text", {}).get("type") != "plain_text" or len(_text_of(block.get("text"))) > 150:
                errors.append(f"{where}.text must be plain_text of at most 150 characters")
        elif kind == "section":
            text, fields = block.get("text"), block.get("fields") or []
            if not text and not fields:
                errors.append(f"{where} needs text or fields")
            if len(_text_of(text)) > 3_000:
                errors.append(f"{where}.text must be at most 3000 characters")
            if len(fields) > 10 or any(len(_text_of(f)) > 2_000 for f in fields):
                errors.append(f"{where}.fields: at most 10 of at most 2000 characters")
            if block.get("accessory"):
                errors += _element_problems(block["accessory"], f"{where}.accessory")
        elif kind == "context":
            elements = block.get("elements") or []
            if not 1 <= len(elements) <= 10:
                errors.append(f"{where}.elements: 1 to 10 allowed")
        elif kind == "actions":
            elements = block.get("elements") or []
            if not 1 <= len(elements) <= 25:
                errors.append(f"{where}.elements: 1 to 25 allowed")
            ids = [e.get("action_id") for e in elements if e.get("action_id")]
            if len(ids) != len(set(ids)):
                errors.append(f"{where}: action_ids must be unique")
            for i, element in enumerate(elements):
                errors += _element_problems(element, f"{where}.elements[{i}]")
        elif kind == "input":
            if len(_text_of(block.get("label"))) > 2_000 or not block.get("label"):
                errors.append(f"{where}.label is required, at most 2000 characters")
            errors += _element_problems(block.get("element") or {}, f"{where}.element")
        elif kind not in ("divider", "image", "rich_text", "file", "video", "markdown"):
            errors.append(f"{where}.type {kind!r} is not a block type")
    return errors


def _element_problems(element: dict[str, Any], where: str) -> list[str]:
    errors = []
    if len(element.get("action_id") or "") > 255:
        errors.append(f"{where}.action_id must be at most 255 characters")
    kind = element.get("type")
    if kind == "button":
        if len(_text_of(element.get("text"))) > 75:
            errors.append(f"{where}.text must be at most 75 characters")
        if len(element.get("value") or "") > 2_000:
            errors.append(f"{where}.value must be at most 2000 characters")
        if element.get("style") not in (None, "primary", "danger"):
            errors.append(f"{where}.style must be primary or danger")
        confirm = element.get("confirm")
        if confirm:
            limits = {"title": 100, "text": 300, "confirm": 30, "deny": 30}
            for key, most in limits.items():
                if len(_text_of(confirm.get(key))) > most:
                    errors.append(f"{where}.confirm.{key} must be at most {most} characters")
    elif kind == "overflow":
        options = element.get("options") or []
        if not 1 <= len(options) <= 5:
            errors.append(f"{where}.options: 1 to 5 allowed")
        for option in options:
            if len(_text_of(option.get("text"))) > 75 or len(option.get("value") or "") > 150:
                errors.append(f"{where}.options: text at most 75, value at most 150 characters")
    elif kind == "plain_text_input":
        most = element.get("max_length", 3_000)
        if most > 3_000:
            errors.append(f"{where}.max_length must be at most 3000")
        if len(element.get("initial_value") or "") > most:
            errors.append(f"{where}.initial_value is longer than max_length")
    return errors
