"""The Web API the bot calls: chat.*, views.*, conversations.*, usergroups.*, auth.test, and
apps.manifest.export (for an app configuration token, as Slack's).

Every call is recorded (`calls`). Slack's rate limits apply (429 with
Retry-After), `fail_next` injects 429s and 5xx, `delay_next` answers late.
Bad blocks and views are refused as Slack refuses them (see `blockkit`).
History (conversations.history, .replies) is paged with cursors, within the
limits of the app's kind: an internal or Marketplace app's Tier 3, or, once
`distributed_app()` says the app is commercially distributed outside the
Marketplace, 15 messages a call and one call a minute per method.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from slack_standin.app_config import manifest_scopes
from slack_standin.blockkit import block_problems, message_problem, view_problems
from slack_standin.models import TRIGGER_TTL_S, Call, Message
from slack_standin.streaming import Streaming
from slack_standin.workspace import Workspace


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
RATES = {
    "chat.postMessage": (1.0, 4),
    "chat.update": (1.0, 20),
    "chat.postEphemeral": (2.0, 30),
    "views.open": (2.0, 30),
    "views.update": (2.0, 30),
    "views.push": (2.0, 30),
    # the streaming methods: a stream is a message (posted at postMessage's pace, per channel);
    # appends and stops are Tier 4, 100+ a minute
    "chat.startStream": (1.0, 4),
    "chat.appendStream": (1.7, 20),
    "chat.stopStream": (1.7, 20),
    # history: Tier 3 (50+ a minute) for an internal app and a Marketplace app
    "conversations.history": (1.0, 20),
    "conversations.replies": (1.0, 20),
}

# An app commercially distributed outside the Slack Marketplace: since May 29, 2025 (new apps
# and installs; existing installs since March 3, 2026) conversations.history and .replies
# answer one call a minute, with at most 15 messages (`limit`'s default and maximum).
HISTORY = ("conversations.history", "conversations.replies")
DISTRIBUTED_RATE = (1 / 60, 1)
DISTRIBUTED_PAGE = 15
# `limit`'s default and maximum otherwise, per method (Slack may answer fewer: these are the stand-in's)
PAGE = {"conversations.history": (100, 999), "conversations.replies": (1000, 1000)}


GRANTED = manifest_scopes()


class WebAPI(Streaming, Workspace):
    """The Web API, at /api/<method>."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._faults: dict[str, list[tuple[int, int]]] = {}
        self._refusals: dict[str, list[str]] = {}
        self._delays: dict[str, list[tuple[float, str | None, bool]]] = {}
        self._buckets: dict[tuple[str, str], Bucket] = {}
        # What the token was granted (auth.test says so in x-oauth-scopes, as Slack does).
        self.scopes: list[str] = list(GRANTED)
        self.left: set[str] = set()  # channels the bot is not a member of: posting there fails
        self.config_token = "xoxe.xoxp-standin"  # an app configuration token (apps.manifest.*)

    def distributed_app(self, on: bool = True) -> None:
        """Play an app commercially distributed outside the Marketplace (or not, with False):
        conversations.history and .replies then answer at most 15 messages a call, and one call
        a minute per method (HTTP 429 with Retry-After otherwise), as Slack limits such apps."""
        self.distributed = on

    def remove_bot(self, channel: str) -> None:
        """The bot leaves `channel` (or was never invited): chat.postMessage says not_in_channel."""
        self.left.add(channel)

    def fail_next(self, method: str, status: int = 500, count: int = 1, retry_after: int = 1) -> None:
        """The next `count` calls of `method` get HTTP `status` (429 carries Retry-After)."""
        self._faults.setdefault(method, []).extend([(status, retry_after)] * count)

    def refuse_next(self, method: str, error: str, count: int = 1) -> None:
        """The next `count` calls of `method` get Slack's answer `{"ok": false, "error": error}`."""
        self._refusals.setdefault(method, []).extend([error] * count)

    def delay_next(
        self, method: str, seconds: float, count: int = 1, kind: str | None = None, before: bool = False
    ) -> None:
        """The next `count` calls of `method` (of Signoff message `kind`, if given) are answered
        `seconds` late: taking effect at once, or only after the wait with `before`."""
        self._delays.setdefault(method, []).extend([(seconds, kind, before)] * count)

    def _delay_for(self, method: str, args: dict[str, Any]) -> tuple[float, bool]:
        queue = self._delays.get(method) or []
        given = args.get("metadata")
        metadata: dict[str, Any] = given if isinstance(given, dict) else {}
        kind = str(metadata.get("event_type", "")).removeprefix("signoff_")
        for n, (seconds, wanted, before) in enumerate(queue):
            if wanted is None or wanted == kind:
                del queue[n]
                return seconds, before
        return 0.0, False

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args = await _arguments(request)
        # apps.connections.open takes the app-level token (Socket Mode); every other method the bot token.
        token = getattr(self, "app_token", self.token) if method == "apps.connections.open" else self.token
        token = self.config_token if method.startswith("apps.manifest.") else token  # (a configuration token)
        if request.headers.get("Authorization") != f"Bearer {token}" and args.get("token") != token:
            return self._reply(method, args, {"ok": False, "error": "invalid_auth"})
        faults = self._faults.get(method)
        if faults:
            status, retry_after = faults.pop(0)
            self.calls.append(Call(method, args, status, {}))
            headers = {"Retry-After": str(retry_after)} if status == 429 else {}
            return web.json_response(
                {"ok": False, "error": "ratelimited" if status == 429 else "fatal_error"},
                status=status,
                headers=headers,
            )
        refusals = self._refusals.get(method)
        if refusals:
            return self._reply(method, args, {"ok": False, "error": refusals.pop(0)})
        limited = self.distributed and method in HISTORY  # enforced even with rate_limits off
        if limited or (self.rate_limits and method in RATES):
            per_channel = method in ("chat.postMessage", "chat.startStream")
            scope = str(args.get("channel", "")) if per_channel else "distributed" if limited else ""
            rate, burst = DISTRIBUTED_RATE if limited else RATES[method]
            wait = self._buckets.setdefault((method, scope), Bucket(rate, burst)).take()
            if wait:
                self.calls.append(Call(method, args, 429, {}))
                return web.json_response(
                    {"ok": False, "error": "ratelimited"},
                    status=429,
                    headers={"Retry-After": str(max(1, round(wait)))},
                )
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
        headers = {"x-oauth-scopes": ",".join(self.scopes)} if reply.get("ok") else {}
        return web.json_response(reply, headers=headers)

    def _conversations_info(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = str(args.get("channel", ""))
        if not channel.startswith(("C", "G", "D")):
            return {"ok": False, "error": "channel_not_found"}
        return {"ok": True, "channel": {"id": channel, "is_member": channel not in self.left}}

    def _apps_manifest_export(self, args: dict[str, Any]) -> dict[str, Any]:
        """The app's manifest, as the workspace has it configured (`app_manifest`)."""
        if args.get("app_id") != "A0SIGNOFF" or self.app_manifest is None:
            return {"ok": False, "error": "app_not_found"}
        return {"ok": True, "manifest": self.app_manifest}

    def _auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "http://standin.local/",
            "team": "Stand-in",
            "user": "signoff",
            "team_id": self.team_id,
            "user_id": "U0SIGNOFF",
            "bot_id": "B0SIGNOFF",
        }

    def _chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        problem = message_problem(args)
        if problem:
            return problem
        metadata = args.get("metadata")
        channel = str(args["channel"])
        if channel in self.left:
            return {"ok": False, "error": "not_in_channel"}
        if channel.startswith(("U", "W")):  # posting to a person opens the app's DM with them
            channel = self.dm_channel(channel)
        message = Message(
            channel=channel,
            ts=self._next_ts(),
            text=args.get("text", ""),
            blocks=args.get("blocks") or [],
            thread_ts=args.get("thread_ts"),
            metadata=json.loads(metadata) if isinstance(metadata, str) else metadata,
            broadcast=bool(args.get("thread_ts"))
            and str(args.get("reply_broadcast")).lower() in ("true", "1"),
        )
        self.messages.append(message)
        return {
            "ok": True,
            "channel": message.channel,
            "ts": message.ts,
            "message": {"text": message.text, "ts": message.ts, "blocks": message.blocks},
        }

    def _chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        problem = message_problem(args)
        if problem:
            return problem
        message = self.message(args.get("channel", ""), args.get("ts", ""))
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        message.text = args.get("text", message.text)
        message.blocks = args.get("blocks") or message.blocks
        message.changed("chat.update")
        return {"ok": True, "channel": message.channel, "ts": message.ts, "text": message.text}

    def _chat_delete(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self.message(args.get("channel", ""), str(args.get("ts", "")))
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        if message.user != "U0SIGNOFF":
            return {"ok": False, "error": "cant_delete_message"}
        self.remove(message)
        return {"ok": True, "channel": message.channel, "ts": message.ts}

    def _listed(self, message: Message, metadata: bool) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "type": "message",
            "user": message.user,
            "text": message.text,
            "ts": message.ts,
            "blocks": message.blocks,
        }
        if message.thread_ts:
            shown["thread_ts"] = message.thread_ts
        if metadata and message.metadata:
            shown["metadata"] = message.metadata
        return shown

    def _conversations_history(self, args: dict[str, Any]) -> dict[str, Any]:
        """Top-level messages, newest first (thread replies are not in a channel's history)."""
        channel = args.get("channel", "")
        found = [m for m in reversed(self.messages) if m.channel == channel and not m.thread_ts]
        return self._history_page("conversations.history", found, args, newest_first=True)

    def _conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        """A thread, root first (the root too is left out when `oldest` or `latest` excludes it)."""
        channel, ts = args.get("channel", ""), str(args.get("ts", ""))
        if self.message(channel, ts) is None:
            return {"ok": False, "error": "thread_not_found"}
        return self._history_page("conversations.replies", self.thread(channel, ts), args, newest_first=False)

    def _history_page(
        self, method: str, messages: list[Message], args: dict[str, Any], newest_first: bool
    ) -> dict[str, Any]:
        """One page of `messages` (in the method's order) as Slack answers it: within `oldest` and
        `latest` (`inclusive` of them or not), from the `cursor` on, at most `limit` of them
        (its default and maximum: the method's, or 15 for a distributed app), and the cursor of
        the next page while there is one."""
        default, most = (DISTRIBUTED_PAGE, DISTRIBUTED_PAGE) if self.distributed else PAGE[method]
        try:
            limit = min(int(args.get("limit") or default), most)
            oldest, latest = float(args.get("oldest") or 0), float(args.get("latest") or "inf")
            start = _cursor_ts(str(args.get("cursor") or ""))
        except ValueError:
            return {"ok": False, "error": "invalid_arguments"}
        if limit < 1:
            return {"ok": False, "error": "invalid_limit"}
        inclusive = str(args.get("inclusive", "")).lower() in ("1", "true")
        within = [
            m
            for m in messages
            if (oldest <= float(m.ts) <= latest if inclusive else oldest < float(m.ts) < latest)
            and (
                start is None
                or (float(m.ts) <= float(start) if newest_first else float(m.ts) >= float(start))
            )
        ]
        metadata = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        page, rest = within[:limit], within[limit:]
        reply: dict[str, Any] = {
            "ok": True,
            "messages": [self._listed(m, metadata) for m in page],
            "has_more": bool(rest),
        }
        if rest:
            reply["response_metadata"] = {"next_cursor": _cursor(rest[0].ts)}
        return reply

    def _chat_postEphemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        if not args.get("user") or not args.get("channel"):
            return {"ok": False, "error": "invalid_arguments"}
        problem = message_problem(args)
        if problem:
            return problem
        ts = self.add_ephemeral(
            str(args["channel"]),
            str(args["user"]),
            args.get("text") or "",
            args.get("blocks") or [],
            args.get("thread_ts"),
        )
        return {"ok": True, "message_ts": ts}

    def _take_trigger(self, args: dict[str, Any]) -> tuple[str, str | None] | dict[str, Any]:
        """(user, the view it came from) of a trigger used once within 3 s, or Slack's error."""
        trigger = self._triggers.pop(str(args.get("trigger_id")), None)
        if trigger is None:
            return {"ok": False, "error": "invalid_trigger_id"}
        user, issued, view_id = trigger
        if time.monotonic() - issued > TRIGGER_TTL_S:
            return {"ok": False, "error": "expired_trigger_id"}
        return user, view_id

    def _views_open(self, args: dict[str, Any]) -> dict[str, Any]:
        taken = self._take_trigger(args)
        if isinstance(taken, dict):
            return taken
        user, inside = taken
        opened = self._store_view(args.get("view"), user)
        if opened["ok"] and inside and self.views.get(inside, {}).get("open"):
            # A second modal opened from inside one: Slack answers ok, and the person never sees it
            # (views.push is how a modal shows another view; Slack's own SDK team warns that
            # views.open there "does not properly work").
            self.views[opened["view"]["id"]]["open"] = False
        return opened

    def _views_push(self, args: dict[str, Any]) -> dict[str, Any]:
        """Onto the stack of the modal the trigger's interaction happened in: at most 3 views."""
        taken = self._take_trigger(args)
        if isinstance(taken, dict):
            return taken
        user, inside = taken
        under = self.views.get(inside or "")
        if under is None or not under["open"]:  # not from an interaction inside an open modal
            return {"ok": False, "error": "invalid_trigger_id"}
        stack = self.stack(under["root_view_id"])
        if len(stack) >= 3:
            return {"ok": False, "error": "push_limit_reached"}
        return self._store_view(
            args.get("view"), user, root_view_id=under["root_view_id"], previous_view_id=stack[-1]["id"]
        )

    def _views_update(self, args: dict[str, Any]) -> dict[str, Any]:
        """Replace an open view (any in its stack); a `hash` other than the view's current one is
        refused with hash_conflict: the view changed since the caller saw it."""
        current = self.views.get(str(args.get("view_id")))
        if current is None or not current["open"]:
            return {"ok": False, "error": "not_found"}
        if args.get("hash") and args["hash"] != current["hash"]:
            return {"ok": False, "error": "hash_conflict"}
        return self._store_view(
            args.get("view"),
            current["user"],
            current["id"],
            root_view_id=current["root_view_id"],
            previous_view_id=current["previous_view_id"],
        )

    def _store_view(
        self,
        view: Any,
        user: str,
        view_id: str | None = None,
        root_view_id: str | None = None,
        previous_view_id: str | None = None,
    ) -> dict[str, Any]:
        view = json.loads(view) if isinstance(view, str) else view
        errors = view_problems(view or {})
        if errors:
            return {"ok": False, "error": "invalid_arguments", "response_metadata": {"messages": errors}}
        view_id = view_id or f"V{uuid.uuid4().hex[:10].upper()}"
        stored = {
            **view,
            "id": view_id,
            "team_id": self.team_id,
            "state": {"values": {}},
            "hash": f"{int(time.time())}.{uuid.uuid4().hex[:8]}",  # new with every change
            "root_view_id": root_view_id or view_id,
            "previous_view_id": previous_view_id,
            "app_id": "A0SIGNOFF",
            "bot_id": "B0SIGNOFF",
            "user": user,
            "open": True,
        }
        self.views[view_id] = stored
        return {"ok": True, "view": {k: v for k, v in stored.items() if k not in ("user", "open")}}

    def _usergroups_users_list(self, args: dict[str, Any]) -> dict[str, Any]:
        group = args.get("usergroup")
        if group not in self.groups:
            return {"ok": False, "error": "no_such_subteam"}
        return {"ok": True, "users": self.groups[group]}

    def _users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = str(args.get("user", ""))
        if not user.startswith(("U", "W")):
            return {"ok": False, "error": "user_not_found"}
        name = self.name_of(user)
        profile = {"display_name": name, "real_name": name}
        return {"ok": True, "user": {"id": user, "name": name.lower(), "real_name": name, "profile": profile}}

    def _chat_getPermalink(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, ts = args.get("channel", ""), str(args.get("message_ts", ""))
        if self.message(channel, ts) is None:
            return {"ok": False, "error": "message_not_found"}
        return {
            "ok": True,
            "channel": channel,
            "permalink": f"{self.base_url.removesuffix('api/').rstrip('/')}/archives/{channel}/p{ts.replace('.', '')}",
        }

    def _views_publish(self, args: dict[str, Any]) -> dict[str, Any]:
        view = json.loads(args["view"]) if isinstance(args.get("view"), str) else args.get("view") or {}
        errors = block_problems(view.get("blocks") or [], limit=100)
        if view.get("type") != "home" or errors:
            return {"ok": False, "error": "invalid_arguments", "response_metadata": {"messages": errors}}
        self.home[str(args.get("user_id"))] = view
        return {"ok": True, "view": {**view, "id": f"VH{args.get('user_id')}"}}


def _cursor(ts: str) -> str:
    """A page's cursor, as Slack makes history's: base64 of `next_ts:<the next message's ts>`."""
    return base64.b64encode(f"next_ts:{ts}".encode()).decode()


def _cursor_ts(cursor: str) -> str | None:
    """The ts a cursor starts at (None: the first page); ValueError if it is not one of ours."""
    if not cursor:
        return None
    said = base64.b64decode(cursor.encode(), validate=True).decode()
    if not said.startswith("next_ts:"):
        raise ValueError(cursor)
    float(said.removeprefix("next_ts:"))
    return said.removeprefix("next_ts:")


async def _arguments(request: web.Request) -> dict[str, Any]:
    if request.content_type == "application/json":
        args = dict(await request.json())
    else:
        args = dict(await request.post())
    args.update(request.query)
    for key in ("blocks", "view", "attachments", "metadata", "chunks", "prompts"):
        if isinstance(args.get(key), str):
            try:
                args[key] = json.loads(args[key])
            except ValueError:
                return {**args, key: None, "_bad": key}
    return args
