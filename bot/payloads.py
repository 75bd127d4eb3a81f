"""Every request Slack sends the bot, as one typed model each. Pure.

`parse` turns a request body (already verified as Slack's) into its model,
or says in one line why it cannot: a field missing, of the wrong type, an id
that is not a Slack id, a text longer than Slack allows. Listeners read the
models, never the raw dicts, so a malformed payload is refused before any
listener (or Bolt's own middleware) touches it. A type the bot does not
take (a shortcut, a type Slack adds later) is acked and dropped the same way.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from bot.views.text import cut

SlackId = Annotated[str, StringConstraints(pattern=r"^[A-Z0-9]{2,32}$")]
UserId = Annotated[str, StringConstraints(pattern=r"^[UW][A-Z0-9]{2,32}$")]
Short = Annotated[str, StringConstraints(max_length=255)]
Ts = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,12}(\.[0-9]{1,9})?$")]

MESSAGE_MAX = 40_000  # Slack's longest message text
COMMAND_MAX = 4_000
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # JSON's spelling of half a UTF-16 pair
INPUT_MAX = 3_000  # a plain_text_input's longest value (Slack's clients enforce it; the bot does too)


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Ref(_Model):
    id: SlackId


class Person(_Model):
    id: UserId
    team_id: SlackId | None = None


class Option(_Model):
    value: Annotated[str, StringConstraints(max_length=2_000)]


class Action(_Model):
    action_id: Short
    block_id: Short | None = None
    value: Annotated[str, StringConstraints(max_length=2_000)] | None = None
    selected_option: Option | None = None


class Container(_Model):
    type: Short | None = None  # "message", or "view" for a click inside a modal
    channel_id: SlackId | None = None
    message_ts: Ts | None = None
    view_id: SlackId | None = None


class MessageRef(_Model):
    text: Annotated[str, StringConstraints(max_length=MESSAGE_MAX)] = ""


class _Interaction(_Model):
    """What every interactive payload says of who acted: the person, their team, the organisation."""

    user: Person
    team: Ref | None = None
    enterprise: Ref | None = None

    @property
    def team_id(self) -> str | None:
        return self.user.team_id or (self.team.id if self.team else None)


class BlockActions(_Interaction):
    type: Literal["block_actions"]
    channel: Ref | None = None  # none for a click inside a modal: `container` and `view` say where
    container: Container = Container()
    response_url: Annotated[str, StringConstraints(max_length=500)] | None = None  # none inside a modal
    message: MessageRef | None = None
    view: ViewPayload | None = None
    trigger_id: Short = ""
    actions: list[Action] = Field(min_length=1, max_length=1)

    @property
    def channel_id(self) -> str | None:
        return self.channel.id if self.channel else self.container.channel_id

    @property
    def action(self) -> Action:
        return self.actions[0]


class Input(_Model):
    """One input's state: typed text (a plain, email, url or number input), a date, a date and
    time (Unix seconds), or the options chosen (a select, radio buttons, a multi-select)."""

    type: Short | None = None
    value: str | None = None
    selected_date: Annotated[str, StringConstraints(pattern=r"^\d{4}-\d{2}-\d{2}$")] | None = None
    selected_date_time: int | None = None
    selected_option: Option | None = None
    selected_options: list[Option] = Field(default=[], max_length=100)


class ViewState(_Model):
    values: dict[Short, dict[Short, Input]] = {}


class ViewPayload(_Model):
    type: Short  # Bolt reads it from every view
    id: SlackId | None = None
    hash: Short | None = None  # the view as the person saw it (views.update refuses a stale one)
    callback_id: Short = ""
    private_metadata: Annotated[str, StringConstraints(max_length=3_000)] = ""
    state: ViewState = ViewState()
    previous_view_id: SlackId | None = None  # a pushed view: the one it was pushed over


class ViewSubmission(_Interaction):
    type: Literal["view_submission"]
    view: ViewPayload

    def values(self) -> dict[str, str | None]:
        """{block_id: typed text}: each input block's one element's value."""
        return {
            block: next(iter(inputs.values()), Input()).value
            for block, inputs in self.view.state.values.items()
        }

    def inputs(self) -> dict[str, dict[str, Any]]:
        """{block_id: its one input's state, as Slack sent it (only the fields it set)}."""
        return {
            block: next(iter(inputs.values()), Input()).model_dump(exclude_none=True, exclude_defaults=True)
            for block, inputs in self.view.state.values.items()
        }


class ViewClosed(_Interaction):
    type: Literal["view_closed"]
    view: ViewPayload


class SlashCommand(_Model):
    command: Short
    text: Annotated[str, StringConstraints(max_length=COMMAND_MAX)] = ""
    user_id: UserId
    channel_id: SlackId
    team_id: SlackId
    enterprise_id: SlackId | None = None
    trigger_id: Annotated[str, StringConstraints(min_length=1, max_length=255)]


class MessageEvent(_Model):
    type: Literal["message", "app_mention"]
    user: UserId | None = None
    text: Annotated[str, StringConstraints(max_length=MESSAGE_MAX)] = ""
    ts: Ts
    channel: SlackId
    thread_ts: Ts | None = None
    channel_type: Short | None = None
    subtype: Short | None = None
    bot_id: Short | None = None
    team: SlackId | None = None
    user_team: SlackId | None = None


class HomeOpened(_Model):
    """A person opened the app's Home tab, or its Messages tab (`tab` "messages": the app's DM,
    which Slack's agent view makes the agent's conversations, each message its own thread)."""

    type: Literal["app_home_opened"]
    user: UserId
    channel: SlackId | None = None  # the app's DM with the person
    tab: Short = "home"


class AgentThread(_Model):
    user_id: UserId
    channel_id: SlackId
    thread_ts: Ts


class AgentThreadStarted(_Model):
    """A person opened a new thread with the app in its Messages tab, in Slack's earlier assistant
    view (an app installed from a manifest with `assistant_view`); the agent view sends none."""

    type: Literal["assistant_thread_started"]
    assistant_thread: AgentThread


class OtherEvent(_Model):
    type: Short


class EventCallback(_Model):
    type: Literal["event_callback"]
    team_id: SlackId
    enterprise_id: SlackId | None = None
    event_id: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    event: MessageEvent | HomeOpened | AgentThreadStarted | OtherEvent

    def teams(self) -> set[str]:
        event = self.event
        extra = {event.team, event.user_team} if isinstance(event, MessageEvent) else set()
        return {self.team_id, *(t for t in extra if t)}


class UrlVerification(_Model):
    type: Literal["url_verification"]
    challenge: Short


Payload = BlockActions | ViewSubmission | ViewClosed | SlashCommand | EventCallback | UrlVerification
_MODELS: dict[str, type[_Model]] = {
    "block_actions": BlockActions,
    "view_submission": ViewSubmission,
    "view_closed": ViewClosed,
    "event_callback": EventCallback,
    "url_verification": UrlVerification,
}


class Malformed(ValueError):
    """The request cannot be read; `str()` says why in one line. `body` is what could be decoded."""

    def __init__(self, reason: str, body: dict[str, Any] | None = None):
        super().__init__(reason)
        self.body = body or {}


def decode(raw: bytes, content_type: str | None) -> dict[str, Any]:
    """The body as Bolt reads it (JSON, a form, or a form's `payload` JSON); a dict, or Malformed."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Malformed("the body is not UTF-8") from exc
    try:
        if content_type == "application/json" or text.startswith("{"):
            body, spelled = json.loads(text), text
        else:
            form = dict(parse_qsl(text, keep_blank_values=True))
            spelled = form.get("payload", "")
            body = json.loads(spelled) if "payload" in form else form
    except ValueError as exc:
        raise Malformed("the body is not JSON") from exc
    if not isinstance(body, dict):
        raise Malformed("the body is not a JSON object")
    # JSON may spell a lone surrogate ("\\ud800"): no text holds one, so nothing may carry it on.
    # Only a \\uD8.. to \\uDF.. escape can spell one (a form's own escapes decode to valid UTF-8).
    if SURROGATE_ESCAPE.search(spelled):
        try:
            json.dumps(body, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise Malformed("the body holds an unpaired surrogate") from exc
    return body


# Fields Bolt's own middleware reads from any request, whatever its type: when present, of this shape.
_BOLT_READS: dict[str, tuple[type, ...]] = {
    "event": (dict,),
    "view": (dict,),
    "actions": (list,),
    "container": (dict,),
    "message": (dict,),
    "authorizations": (list,),
    "user": (dict, str),
    "channel": (dict, str),
    "team": (dict, str, type(None)),
    "enterprise": (dict, str, type(None)),
}


def parse(body: dict[str, Any]) -> Payload:
    """The typed model of a decoded request, or Malformed naming the first problem."""
    for field, shapes in _BOLT_READS.items():
        if field in body and not isinstance(body[field], shapes):
            raise Malformed(f"{field}: not {' or '.join(s.__name__ for s in shapes)}", body)
    model = SlashCommand if "command" in body else _MODELS.get(str(body.get("type")))
    if model is None:  # a type Bolt would meet without listeners: refused here, as malformed
        raise Malformed(f"type: not a request Signoff takes ({cut(repr(body.get('type')), 40)})", body)
    try:
        return model.model_validate(body)  # type: ignore[return-value]
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "body"
        raise Malformed(f"{where}: {first['msg']}", body) from None


def teams(payload: Payload) -> set[str]:
    """The workspaces and organisations a request speaks for (user's, team's, enterprise's)."""
    match payload:
        case BlockActions() | ViewSubmission() | ViewClosed():
            ids = {payload.user.team_id, payload.team and payload.team.id}
            return {i for i in (*ids, payload.enterprise and payload.enterprise.id) if i}
        case SlashCommand():
            return {i for i in (payload.team_id, payload.enterprise_id) if i}
        case EventCallback():
            return payload.teams() | ({payload.enterprise_id} if payload.enterprise_id else set())
    return set()
