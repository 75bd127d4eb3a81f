"""`signoff deadletters list|show|replay|drop`: the entries no consumer could handle, each
partition's; a replayed one goes back onto its stream only if it now decodes (the check a
consumer makes first)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from core.keys import Partition
from core.messages import decode_command, decode_event
from core.secrets import Redaction, conceal
from core.store import Store, entry_order
from signoff.commands.printing import iso, printable, printable_json, table

BOOKKEEPING = ("stream", "entry_id", "why")
STREAM_ID = re.compile(r"([0-9]{1,20})-([0-9]{1,20})")  # ASCII digits: \d takes others
LARGEST_ID_PART = 2**64 - 1  # each half of a stream entry id is a 64-bit unsigned number


def entry_time(entry_id: str) -> str:
    """When an entry was added, from its id; XADD takes any id, and one past the calendar's
    end (year 9999) is said, not a crash of the whole listing."""
    try:
        return iso(entry_order(entry_id)[0] / 1000)
    except (OverflowError, ValueError, OSError):
        return "not a date"


def dead_letter_row(shown_id: str, entry_id: str, fields: dict[str, str]) -> dict[str, Any]:
    """One line of `deadletters list`: the fields as read (bytes that are not UTF-8 arrive
    backslash-escaped, see `core.store.client.redis_client`); the first line of `why` with text, cut at 80."""
    why = fields.get("why") or ""
    return {
        "id": shown_id,
        "at": entry_time(entry_id),
        "stream": fields.get("stream", "").rpartition(":")[2],
        "why": next((line for line in why.splitlines() if line.strip()), "")[:80],
    }


async def deadletters_list(store: Store, out: TextIO) -> int:
    found = []
    for partition in store.keys.partitions:
        for entry_id, fields in await store.dead_letters.listed(partition):
            # entry ids are unique per stream: with partitions, the id says which one
            shown_id = entry_id if store.keys.count == 1 else f"{partition.index}/{entry_id}"
            found.append((entry_order(entry_id), dead_letter_row(shown_id, entry_id, fields)))
    if not found:
        out.write("No dead letters.\n")
        return 0
    found.sort(key=lambda item: item[0])
    table([row for _, row in found], out)
    return 0


@dataclass(frozen=True)
class DeadLetter:
    partition: Partition
    entry_id: str
    fields: dict[str, str]


async def _dead_letter(store: Store, given: str, out: TextIO) -> DeadLetter | None:
    """The dead letter `given` names (`<entry id>`, or `<partition>/<entry id>` as `list` shows
    it with partitions), or None, said on `out`: none, or two partitions holding that id."""
    where, _, entry_id = given.rpartition("/")
    if not _stream_id(entry_id) or not re.fullmatch(r"([0-9]{1,4})?", where):
        out.write(f"No dead letter {printable(given)}.\n")  # not an id at all (Redis would refuse it)
        return None
    candidates = store.keys.partitions
    if where:
        candidates = store.keys.partitions[int(where) : int(where) + 1]
    found = [
        DeadLetter(p, entry_id, fields)
        for p in candidates
        if (fields := await store.dead_letters.find(p, entry_id)) is not None
    ]
    if not found:
        out.write(f"No dead letter {given}.\n")
        return None
    if len(found) > 1:
        named = ", ".join(f"{d.partition.index}/{entry_id}" for d in found)
        out.write(f"Two partitions hold a dead letter {entry_id}: name one of {named}.\n")
        return None
    return found[0]


def _stream_id(text: str) -> bool:
    """Whether `text` is an entry id Redis takes: `<ms>-<seq>`, each at most 2**64 - 1."""
    parts = STREAM_ID.fullmatch(text)
    return parts is not None and all(int(part) <= LARGEST_ID_PART for part in parts.groups())


async def deadletters_show(
    store: Store, entry_id: str, out: TextIO, redact: Callable[[str], Sequence[Redaction]] | None = None
) -> int:
    """One dead letter's fields; a resume's edited arguments with their secrets masked as on a
    card (found by name or shape, and at the policy's `redact` paths of the tool: `redact`)."""
    found = await _dead_letter(store, entry_id, out)
    if found is None:
        return 1
    shown, _ = conceal({k: _edits_masked(_maybe_json(v), redact) for k, v in found.fields.items()})
    out.write(printable_json(shown) + "\n")
    return 0


def _maybe_json(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


async def deadletters_replay(store: Store, entry_id: str, out: TextIO) -> int:
    """Put a dead letter back on its stream as a new entry: its consumers decode and check it as
    they do any entry (and park it here again if it still cannot be handled)."""
    found = await _dead_letter(store, entry_id, out)
    if found is None:
        return 1
    partition, fields = found.partition, found.fields
    stream = fields.get("stream", "")
    message = {k: v for k, v in fields.items() if k not in BOOKKEEPING}
    # Only onto a stream of the partition that parked it (the same slot as its dead letters).
    decode = {partition.commands: decode_command, partition.events: decode_event}.get(stream)
    if decode is None:
        out.write(
            f"Dead letter {entry_id} came from {stream!r}, not a stream Signoff consumes; not replayed.\n"
        )
        return 1
    try:
        decode(message)
    except Exception as exc:  # the same check a consumer makes first: it would park it again
        out.write(f"Dead letter {entry_id} still does not decode ({type(exc).__name__}); not replayed.\n")
        return 1
    new_id = await store.dead_letters.replay(partition, found.entry_id, stream, message)
    out.write(f"Replayed {entry_id} onto {stream} as {new_id}.\n")
    return 0


async def deadletters_drop(store: Store, entry_id: str, out: TextIO) -> int:
    found = await _dead_letter(store, entry_id, out)
    if found is None:
        return 1
    if not await store.dead_letters.drop(found.partition, found.entry_id):
        out.write(f"No dead letter {entry_id}.\n")
        return 1
    out.write(f"Dropped {entry_id}.\n")
    return 0


def _edits_masked(value: Any, redact: Callable[[str], Sequence[Redaction]] | None) -> Any:
    """`value` with each edit's arguments (`{"edited_action": {"name", "args"}}`, at any depth)
    masked at its tool's `redact` paths."""
    if isinstance(value, list):
        return [_edits_masked(v, redact) for v in value]
    if not isinstance(value, dict):
        return value
    action = value.get("edited_action")
    if redact and isinstance(action, dict) and isinstance(action.get("args"), dict):
        args = conceal(action["args"], redact(str(action.get("name", ""))))[0]
        return {**value, "edited_action": {**action, "args": args}}
    return {k: _edits_masked(v, redact) for k, v in value.items()}
