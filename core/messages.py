"""What the runner and the bot say to each other on the streams: typed messages, one codec.

Commands (bot, CLI or API -> runner, on `commands`) and events (runner ->
bot, on `events`) are pydantic models told apart by `type`. Nothing else
builds or picks apart a stream entry: `encode` makes the entry's fields,
`decode_command` / `decode_event` read them back (as arq's `serialize_job` /
`deserialize_job` do), and the consumers dispatch on the model's class.

One entry is written by Lua rather than by `encode`: the decide script
queues a `Resume` from the approval's stored `resume_command` (this codec's
JSON, without decisions) and the decisions as they were sent, in a field of
their own; `decode_command` puts the two back together.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


# commands ----------------------------------------------------------------------------


class StartRun(_Message):
    """Start (or continue, in the same thread) a run with a person's message."""

    type: Literal["start"] = "start"
    command_id: str | None = None  # makes a second delivery a no-op; the entry id stands in when missing
    thread_id: str
    text: str


class Resume(_Message):
    """Resume a pause with a complete, recorded decision set."""

    type: Literal["resume"] = "resume"
    command_id: str | None = None
    approval_id: str
    thread_id: str
    interrupt_id: str
    graph: str
    decisions: list[Any] = []  # in request order, exactly as they were sent


class ContinueRun(_Message):
    """Retry after a failure: continue the run from its last checkpoint."""

    type: Literal["continue"] = "continue"
    command_id: str | None = None
    thread_id: str


AnyCommand = StartRun | Resume | ContinueRun  # what the runners' stream carries
Command = Annotated[AnyCommand, Field(discriminator="type")]

# events ------------------------------------------------------------------------------


class ApprovalCreated(_Message):
    """A pause became an approval record: it needs its card."""

    type: Literal["approval"] = "approval"
    approval_id: str
    thread_id: str


class RunFinished(_Message):
    type: Literal["finished"] = "finished"
    thread_id: str
    command_id: str | None = None  # names the answer's posts: telling it twice posts it once
    answer: str = ""


class RunFailed(_Message):
    type: Literal["failed"] = "failed"
    thread_id: str
    command_id: str | None = None
    error: str = ""


class DecisionsRefused(_Message):
    """The runner refused a recorded set (nothing was sent); the pause is offered again, unless
    it is gone (an Agent Server's interrupt answered elsewhere)."""

    type: Literal["refused"] = "refused"
    approval_id: str
    thread_id: str
    command_id: str | None = None
    error: str = ""
    offered_again: bool = True


AnyEvent = ApprovalCreated | RunFinished | RunFailed | DecisionsRefused  # what the bots' stream carries
Event = Annotated[AnyEvent, Field(discriminator="type")]

_commands: TypeAdapter[StartRun | Resume | ContinueRun] = TypeAdapter(Command)
_events: TypeAdapter[ApprovalCreated | RunFinished | RunFailed | DecisionsRefused] = TypeAdapter(Event)


class Malformed(ValueError):
    """A stream entry this codec cannot read (written by hand, or by another version)."""


def encode(message: _Message) -> dict[str, str]:
    """The fields of the stream entry for `message`."""
    if isinstance(message, Resume):
        return {"command": resume_command(message), "decisions": json.dumps(message.decisions)}
    key = (
        "event"
        if isinstance(message, ApprovalCreated | RunFinished | RunFailed | DecisionsRefused)
        else "command"
    )
    return {key: message.model_dump_json()}


def resume_command(resume: Resume) -> str:
    """A `Resume` without its decisions: what an approval stores for the decide script to queue."""
    return resume.model_dump_json(exclude={"decisions"})


def decode_command(fields: dict[str, str]) -> AnyCommand:
    try:
        data: dict[str, Any] = json.loads(fields["command"])
        if "decisions" in fields:
            data["decisions"] = json.loads(fields["decisions"])
        return _commands.validate_python(data)
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        raise Malformed(f"not a command: {exc}") from None


def decode_event(fields: dict[str, str]) -> AnyEvent:
    try:
        return _events.validate_json(fields["event"])
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        raise Malformed(f"not an event: {exc}") from None
