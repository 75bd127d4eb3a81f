"""People in the workspace, and what Slack sends the bot on their behalf.

People write messages and mention the bot (Events API envelopes), run
`/signoff`, click buttons and submit modals (signed interaction payloads, as
Slack builds them), open the Home tab. Everything goes to the bot's
/slack/events signed with the app's signing secret, and the bot's answer and
its latency are kept (`interactions`): an answer later than 3 s counts as
failed, as Slack shows the person an error.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any
from urllib.parse import urlencode

import aiohttp
from slack_sdk.signature import SignatureVerifier

from slack_standin.blockkit import find_element
from slack_standin.models import ACK_LIMIT_S, Interaction, Message
from slack_standin.socket_mode import SocketMode


class People(SocketMode):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.captured: list[tuple[str, str]] = []  # (body, content type) sent over HTTP: for replay tests

    @property
    def experience(self) -> str:  # (`Streaming`'s, which comes first)
        raise NotImplementedError

    def write(self, user: str, channel: str, text: str, thread_ts: str | None = None) -> Message:
        """A person's message appears in the channel (no event is sent)."""
        message = Message(
            channel=channel, ts=self._next_ts(), text=text, blocks=[], thread_ts=thread_ts, user=user
        )
        self.messages.append(message)
        return message

    def message_event(
        self, message: Message, kind: str = "message", channel_type: str = "channel", **extra: Any
    ) -> dict[str, Any]:
        event = {
            "type": kind,
            "user": message.user,
            "text": message.text,
            "ts": message.ts,
            "channel": message.channel,
            "channel_type": channel_type,
            "event_ts": message.ts,
            "team": self.team_id,
            **extra,
        }
        if message.thread_ts:
            event["thread_ts"] = message.thread_ts
        return {
            "token": "legacy-verification-token",
            "team_id": self.team_id,
            "api_app_id": "A0SIGNOFF",
            "event": event,
            "type": "event_callback",
            "event_id": f"Ev{uuid.uuid4().hex[:12].upper()}",
            "event_time": int(time.time()),
            "authorizations": [{"team_id": self.team_id, "user_id": "U0SIGNOFF", "is_bot": True}],
        }

    async def mention(
        self, user: str, channel: str, text: str, thread_ts: str | None = None
    ) -> tuple[Message, Interaction]:
        """`user` writes `@signoff text` in `channel` (or in a thread): Slack sends app_mention."""
        message = self.write(user, channel, f"<@U0SIGNOFF> {text}", thread_ts)
        return message, await self.deliver(self.message_event(message, "app_mention"))

    async def say(
        self, user: str, channel: str, text: str, thread_ts: str | None = None, channel_type: str = "channel"
    ) -> tuple[Message, Interaction]:
        """`user` writes a plain message: Slack sends a message event."""
        message = self.write(user, channel, text, thread_ts)
        return message, await self.deliver(self.message_event(message, channel_type=channel_type))

    async def deliver(self, envelope: dict[str, Any], retry: int = 0) -> Interaction:
        """Send an Events API envelope; `retry` > 0 is Slack delivering it again."""
        if self.socket_connected:
            return await self.over_socket("events_api", envelope, retry)
        headers = {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"} if retry else {}
        return await self.send_raw(json.dumps(envelope), "application/json", headers)

    async def slash(self, user: str, channel: str, text: str, command: str = "/signoff") -> Interaction:
        form = {
            "token": "legacy-verification-token",
            "team_id": self.team_id,
            "team_domain": "standin",
            "channel_id": channel,
            "channel_name": channel.lower(),
            "user_id": user,
            "user_name": user.lower(),
            "command": command,
            "text": text,
            "api_app_id": "A0SIGNOFF",
            "response_url": self._issue_response_url(user, channel, None),
            "trigger_id": self._issue_trigger(user),
        }
        if self.socket_connected:
            interaction = await self.over_socket("slash_commands", form)
        else:
            interaction = await self.send_raw(urlencode(form), "application/x-www-form-urlencoded")
        interaction.response_url = form["response_url"]
        self._show_ack(interaction, user, channel)
        return interaction

    def _show_ack(self, interaction: Interaction, user: str, channel: str) -> None:
        """A slash command's answer in its ack, as Slack shows it: to the person who typed it
        alone, in the channel (the text, plain or JSON's `text`, with JSON's blocks if any). An
        `in_channel` answer is left to the response_url that replaces it (Signoff sends none)."""
        if not interaction.acked or not interaction.said:
            return
        try:
            answer = interaction.json()
        except ValueError:
            answer = {}
        if answer.get("response_type") == "in_channel":
            return
        self.add_ephemeral(channel, user, interaction.said, answer.get("blocks") or [], None)

    def app_event(self, event: dict[str, Any]) -> dict[str, Any]:
        """An Events API envelope for an event of the app (not a message)."""
        return {
            "token": "legacy-verification-token",
            "team_id": self.team_id,
            "api_app_id": "A0SIGNOFF",
            "type": "event_callback",
            "event_id": f"Ev{uuid.uuid4().hex[:12].upper()}",
            "event_time": int(time.time()),
            "event": {**event, "event_ts": f"{time.time():.6f}"},
        }

    async def open_home(self, user: str) -> Interaction:
        event = {"type": "app_home_opened", "user": user, "channel": self.dm_channel(user), "tab": "home"}
        return await self.deliver(self.app_event(event))

    async def open_messages_tab(self, user: str) -> Interaction:
        """`user` opens the app's Messages tab (its DM): Slack sends app_home_opened with tab
        "messages", which the agent view makes the app's cue to set its suggested prompts."""
        event = {"type": "app_home_opened", "user": user, "channel": self.dm_channel(user), "tab": "messages"}
        return await self.deliver(self.app_event(event))

    async def open_agent_thread(self, user: str) -> tuple[Message, Interaction]:
        """`user` opens a new thread with an assistant-view app in its Messages tab: Slack starts
        the thread (its root is Slack's, subtype assistant_app_thread) and sends
        assistant_thread_started. An agent-view app gets no such thread: each message is one."""
        if self.experience != "assistant":  # (`Streaming.experience`)
            raise LookupError("an agent-view app has no assistant threads: use open_messages_tab and say")
        root = Message(
            channel=self.dm_channel(user),
            ts=self._next_ts(),
            text="New chat",
            blocks=[],
            user="U0SIGNOFF",
            quiet=True,
        )
        self.messages.append(root)
        thread = {"user_id": user, "context": {}, "channel_id": root.channel, "thread_ts": root.ts}
        envelope = self.app_event({"type": "assistant_thread_started", "assistant_thread": thread})
        return root, await self.deliver(envelope)

    def _user(self, user: str) -> dict[str, Any]:
        return {"id": user, "username": user.lower(), "name": user.lower(), "team_id": self.team_id}

    def block_action_payload(
        self, user: str, message: Message, action_id: str, selected: str | None = None
    ) -> dict[str, Any]:
        """The payload Slack sends when `user` uses the element `action_id` on `message`."""
        block, element = find_element(message.blocks, action_id)
        shown = {"type": "message", "ts": message.ts, "text": message.text, "blocks": message.blocks}
        return self._message_click(
            user,
            message.channel,
            message.ts,
            _action(block, element, action_id, selected),
            {**shown, "thread_ts": message.thread_ts},
        )

    def _message_click(
        self, user: str, channel: str, ts: str, action: dict[str, Any], message: dict[str, Any] | None
    ) -> dict[str, Any]:
        """A click on a message in `channel` (`message`: as the app posted it; None: an ephemeral
        one, which Slack says so of and sends without it)."""
        payload = {
            "type": "block_actions",
            "user": self._user(user),
            "api_app_id": "A0SIGNOFF",
            "token": "legacy-verification-token",
            "container": {
                "type": "message",
                "message_ts": ts,
                "channel_id": channel,
                "is_ephemeral": not message,
            },
            "trigger_id": self._issue_trigger(user),
            "team": {"id": self.team_id, "domain": "standin"},
            "is_enterprise_install": False,
            "channel": {"id": channel, "name": channel.lower()},
            "state": {"values": {}},
            "response_url": self._issue_response_url(user, channel, ts, ephemeral=not message),
            "actions": [action],
        }
        return {**payload, "message": message} if message else payload

    async def click(
        self,
        user: str,
        message: Message,
        action_id: str,
        selected: str | None = None,
        bot_url: str | None = None,
    ) -> Interaction:
        """`user` clicks the element `action_id` on `message` (it must be on the card)."""
        return await self.send(self.block_action_payload(user, message, action_id, selected), bot_url=bot_url)

    async def click_ephemeral(self, user: str, ephemeral: dict[str, Any], action_id: str) -> Interaction:
        """`user` clicks the element `action_id` on an ephemeral message only they see: Slack's
        payload says so (`is_ephemeral`) and carries no `message` (the app never had one)."""
        if ephemeral.get("user") != user:
            raise LookupError(f"{user} does not see that ephemeral message")
        block, element = find_element(ephemeral.get("blocks") or [], action_id)
        action = _action(block, element, action_id, None)
        return await self.send(
            self._message_click(user, str(ephemeral["channel"]), ephemeral["ts"], action, None)
        )

    def view_action_payload(
        self, user: str, view: dict[str, Any], action_id: str, selected: str | None = None
    ) -> dict[str, Any]:
        """The payload Slack sends when `user` uses the element `action_id` inside the modal view
        `view` (as their screen shows it): the view, its hash and private_metadata, a trigger that
        can push onto its stack; no channel, no message, no response_url."""
        block, element = find_element(view.get("blocks", []), action_id)
        action = _action(block, element, action_id, selected)
        shown = {k: v for k, v in view.items() if k not in ("user", "open")}
        return {
            "type": "block_actions",
            "user": self._user(user),
            "api_app_id": "A0SIGNOFF",
            "token": "legacy-verification-token",
            "container": {"type": "view", "view_id": view["id"]},
            "trigger_id": self._issue_trigger(user, view["id"]),
            "team": {"id": self.team_id, "domain": "standin"},
            "is_enterprise_install": False,
            "view": {**shown, "state": {"values": {}}},
            "actions": [action],
        }

    async def click_in_view(
        self, user: str, view: dict[str, Any], action_id: str, selected: str | None = None
    ) -> Interaction:
        """`user` clicks the element `action_id` in a modal. Only the view on top of their open
        modal is on their screen: a view under a pushed one, or closed, cannot be clicked."""
        if (self.on_screen(user) or {}).get("id") != view.get("id"):
            raise LookupError(f"view {view.get('id')} is not on {user}'s screen")
        return await self.send(self.view_action_payload(user, view, action_id, selected))

    def close_view(self, user: str, view: dict[str, Any]) -> None:
        """`user` closes the view on their screen (Close, or Back on a pushed view): a pushed view
        goes back to the one under it; the root closes the whole modal."""
        stored = self.views[view["id"]]
        closing = self.stack(stored["root_view_id"]) if stored["id"] == stored["root_view_id"] else [stored]
        for shown in closing:
            shown["open"] = False

    def view_submission_payload(
        self, user: str, view: dict[str, Any], values: dict[str, Any]
    ) -> dict[str, Any]:
        """The view_submission `user` would send for `view` with `values`, whatever Slack's client
        would say of them: what a forger (or a client of another day) can post to the app."""
        return view_submission(self.team_id, user, view, values, self._issue_trigger(user, view["id"]))

    async def submit(self, user: str, view: dict[str, Any], values: dict[str, Any]) -> Interaction:
        """`user` submits the modal `view` with `values` ({block_id: text}; others keep their initial value).

        As Slack's clients do, a required input left empty is not sent: the person sees
        "Please fill out this field." under it (`send` posts any payload, as a forger could).
        Acked with no body, the view closes (a pushed one goes back to the view under it);
        `response_action: clear` closes the whole modal.
        """
        payload = view_submission(self.team_id, user, view, values, self._issue_trigger(user, view["id"]))
        state = payload["view"]["state"]["values"]
        refused = {  # what Slack's client says under a field, without sending anything
            block["block_id"]: said
            for block in view.get("blocks", [])
            if block.get("type") == "input"
            and (said := client_check(block, next(iter(state[block["block_id"]].values()))))
        }
        if refused:
            return Interaction(0, json.dumps({"response_action": "errors", "errors": refused}), 0.0)
        interaction = await self.send(payload)
        answer = interaction.json() if interaction.status == 200 and interaction.body.startswith("{") else {}
        stored = self.views.get(view["id"])
        if stored and interaction.status == 200 and answer.get("response_action") != "errors":
            closing = self.stack(stored["root_view_id"]) if answer.get("response_action") == "clear" else []
            for shown in [*closing, stored]:
                shown["open"] = False
        return interaction

    async def send(
        self,
        payload: dict[str, Any],
        *,
        signature: str | None = None,
        timestamp: int | None = None,
        bot_url: str | None = None,
    ) -> Interaction:
        """Send an interaction to the bot, as Slack does: over Socket Mode when the app is connected
        that way, else a signed POST (a forged one with `signature`, to `bot_url` if given)."""
        if self.socket_connected and signature is None and timestamp is None and bot_url is None:
            interaction = await self.over_socket("interactive", payload)
        else:
            interaction = await self.send_raw(
                urlencode({"payload": json.dumps(payload)}),
                "application/x-www-form-urlencoded",
                signature=signature,
                timestamp=timestamp,
                bot_url=bot_url,
            )
        interaction.response_url = payload.get("response_url")
        return interaction

    async def send_raw(
        self,
        body: str,
        content_type: str,
        extra_headers: dict[str, str] | None = None,
        *,
        signature: str | None = None,
        timestamp: int | None = None,
        bot_url: str | None = None,
    ) -> Interaction:
        target = bot_url or self.bot_url
        assert target and self._session, "start() the stand-in with bot_url set"
        headers = {**self.signed_headers(body, content_type, signature, timestamp), **(extra_headers or {})}
        self.captured.append((body, content_type))
        sent_at, started = time.monotonic(), time.perf_counter()
        try:
            async with self._session.post(
                target, data=body, headers=headers, timeout=aiohttp.ClientTimeout(total=ACK_LIMIT_S + 2)
            ) as response:
                text = await response.text()
                interaction = Interaction(response.status, text, time.perf_counter() - started, sent_at)
        except TimeoutError:
            interaction = Interaction(0, "", time.perf_counter() - started, sent_at)
        self.interactions.append(interaction)
        return interaction

    def signed_headers(
        self, body: str, content_type: str, signature: str | None = None, timestamp: int | None = None
    ) -> dict[str, str]:
        """The headers Slack sends a request to the app with: signed now (or forged: `signature`)."""
        stamp = str(timestamp if timestamp is not None else int(time.time()))
        signed = signature or SignatureVerifier(self.signing_secret).generate_signature(
            timestamp=stamp, body=body
        )
        return {
            "Content-Type": content_type,
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": str(signed),
        }

    def click_request(self, user: str, message: Message, action_id: str) -> tuple[str, dict[str, str]]:
        """The body and headers of `user`'s click on `action_id` as Slack would POST it, for a
        sender outside this process (a bench's: its clock then runs in no loop that also serves
        the app's Web API calls)."""
        body = urlencode({"payload": json.dumps(self.block_action_payload(user, message, action_id, None))})
        return body, self.signed_headers(body, "application/x-www-form-urlencoded")

    def late_acks(self) -> list[Interaction]:
        return [i for i in self.interactions if i.status == 200 and i.seconds > ACK_LIMIT_S]


def _action(
    block: dict[str, Any], element: dict[str, Any], action_id: str, selected: str | None
) -> dict[str, Any]:
    """The `actions[0]` of a block_actions payload: what was clicked, or chosen in a menu."""
    action: dict[str, Any] = {
        "action_id": action_id,
        "block_id": block.get("block_id"),
        "type": element["type"],
        "action_ts": f"{time.time():.6f}",
    }
    if element["type"] == "button":
        action.update(text=element["text"], value=element.get("value"), style=element.get("style"))
        if element.get("url"):  # a link button: the client opened it, and still tells the app
            action["url"] = element["url"]
    elif element["type"] == "overflow":
        option = next(
            o for o in element["options"] if o["value"] == selected or o["text"]["text"] == selected
        )
        action["selected_option"] = option
    return action


def _escape(text: str) -> str:
    """What Slack does to a person's message text before an app sees it."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


INITIAL = object()  # a field the person left as the modal filled it in
TEXT_INPUTS = ("plain_text_input", "email_text_input", "url_text_input", "number_input")


def input_state(element: dict[str, Any], given: Any) -> dict[str, Any]:
    """An input's state in a view_submission, as Slack sends it for its element type: text as
    `value` (a number too), a date as `selected_date`, a date and time as `selected_date_time`
    (Unix seconds), the options chosen as `selected_option(s)` (found by their text or value)."""
    kind = element["type"]
    state: dict[str, Any] = {"type": kind}
    if kind in TEXT_INPUTS:
        state["value"] = element.get("initial_value") if given is INITIAL else given
    elif kind == "datepicker":
        state["selected_date"] = element.get("initial_date") if given is INITIAL else given
    elif kind == "datetimepicker":
        state["selected_date_time"] = element.get("initial_date_time") if given is INITIAL else given
    elif kind in ("static_select", "radio_buttons"):
        state["selected_option"] = (
            element.get("initial_option") if given is INITIAL else _option(element, given)
        )
    elif kind in ("multi_static_select", "checkboxes"):
        chosen = (
            element.get("initial_options") or [] if given is INITIAL else [_option(element, g) for g in given]
        )
        state["selected_options"] = [o for o in chosen if o]
    else:
        raise ValueError(f"the stand-in does not know the input {kind!r}")
    return state


def _option(element: dict[str, Any], given: Any) -> dict[str, Any] | None:
    if given is None:
        return None
    for option in element.get("options") or []:
        if given in (option["value"], option["text"]["text"]):
            return option
    raise LookupError(f"no option {given!r} in {element.get('action_id')}")


_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def client_check(block: dict[str, Any], state: dict[str, Any]) -> str | None:
    """What Slack's client says under an input before it sends a submission: a required field
    left empty (only spaces count as empty), an email or URL that is not one, a number that is
    not one, out of range or not whole, text outside its length limits. None: it sends."""
    element = block["element"]
    kind = element["type"]
    filled = {k: v for k, v in state.items() if k != "type" and v not in (None, [], "")}
    text = state.get("value")
    if not filled:
        return None if block.get("optional") else "Please fill out this field."
    if kind == "email_text_input" and not _EMAIL.match(text or ""):
        return "Please enter a valid email address."
    if kind == "url_text_input" and not re.match(r"^https?://[^\s/]+\.[^\s]+$", text or ""):
        return "Please enter a valid URL."
    if kind == "number_input":
        try:
            number = float(text or "")
        except ValueError:
            return "Please enter a number."
        if not element.get("is_decimal_allowed") and not number.is_integer():
            return "Please enter a whole number."
        low, high = element.get("min_value"), element.get("max_value")
        if low is not None and number < float(low) or high is not None and number > float(high):
            return f"Please enter a number between {low} and {high}."
    if kind == "plain_text_input" and isinstance(text, str):
        if len(text) < element.get("min_length", 0):
            return f"Please enter at least {element['min_length']} characters."
    return None


def view_submission(
    team: str, user: str, view: dict[str, Any], values: dict[str, Any], trigger_id: str
) -> dict[str, Any]:
    """The view_submission Slack sends when `user` submits `view`: `values` by block id, the other
    inputs as the modal filled them in."""
    state: dict[str, Any] = {}
    for block in view.get("blocks", []):
        if block.get("type") == "input":
            element = block["element"]
            given = values[block["block_id"]] if block["block_id"] in values else INITIAL
            state[block["block_id"]] = {element["action_id"]: input_state(element, given)}
    return {
        "type": "view_submission",
        "team": {"id": team, "domain": "standin"},
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": team},
        "api_app_id": "A0SIGNOFF",
        "token": "legacy-verification-token",
        "trigger_id": trigger_id,
        "view": {
            "hash": f"{int(time.time())}.{uuid.uuid4().hex[:8]}",
            "root_view_id": view["id"],
            "previous_view_id": None,
            **{k: v for k, v in view.items() if k not in ("user", "open")},  # its own, when Slack has it
            "team_id": team,
            "state": {"values": state},
            "app_id": "A0SIGNOFF",
            "bot_id": "B0SIGNOFF",
        },
        "response_urls": [],
        "is_enterprise_install": False,
    }
