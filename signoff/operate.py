"""The commands an operator reaches for: `signoff pending`, `audit`, `deadletters`, `migrate`
(`doctor` is `signoff.doctor`).

Each reads (or, for dead letters, changes) the same Redis the bot and runner
use, through the same `Store`; nothing here talks to a running process.

What they print is whole and safe to print: `pending` lists every pending approval
(read a page at a time, never cut at a count), and text that agents, Slack or another
writer of a stream put in Redis reaches the terminal with its control and invisible
characters escaped (a terminal obeys ESC sequences), whatever its bytes.
"""

from __future__ import annotations

import asyncio
import csv
import json
import re
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import ResponseError

from core import policy_file
from core.keys import BOTS_GROUP, LAYOUT_VERSION, RUNNERS_GROUP, Partition
from core.messages import decode_command, decode_event
from core.records import Approval, ApprovalStatus
from core.store import Store, entry_order


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")


def printable(text: str) -> str:
    """`text` for a terminal: what is not printable (ESC and other controls, bidi overrides,
    invisible characters, a lone surrogate a JSON escape spelled) as a backslash escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def printable_json(value: Any) -> str:
    """`value` as indented JSON a terminal shows as it is: the same JSON, with what is not
    printable inside its strings written as JSON escapes."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    return "".join(c if c.isprintable() or c == "\n" else json.dumps(c)[1:-1] for c in text)


# --- pending ---------------------------------------------------------------------------------


def pending_rows(
    approvals: Iterable[Approval], policy: policy_file.PolicyFile, now: float
) -> list[dict[str, Any]]:
    """What waits, where, for whom, how long: one row per pending approval, oldest first."""
    rows = []
    for approval in sorted(approvals, key=lambda a: a.created_at):
        actions = approval.request.actions
        routes = [policy.route(a.name) for a in actions] or [policy.route("")]
        approvers = list(dict.fromkeys(i for r in routes for i in r.approvers)) or ["anyone"]
        votes = sum(len(v) for v in approval.votes.values())
        expires = min(
            (
                at
                for i, at in (approval.terms.expires_at.items() if approval.terms else ())
                if i not in approval.decided
            ),
            default=None,
        )
        rows.append(
            {
                "approval_id": approval.approval_id,
                "waiting": policy_file.spoken(now - approval.created_at),
                "what": ", ".join(a.name for a in actions) or "question",
                "where": approval.card_where,
                "requester": approval.requester or "",
                "approvers": ",".join(approvers + list(approval.escalated_to())),
                "decided": f"{len(approval.decided)}/{approval.size}"
                + (f" ({votes} votes)" if votes else ""),
                "expires_in": policy_file.spoken(expires - now) if expires else "never",
                "thread_id": approval.thread_id,
            }
        )
    return rows


def table(rows: list[dict[str, Any]], out: TextIO) -> None:
    if not rows:
        out.write("Nothing is waiting.\n")
        return
    columns = list(rows[0])
    cells = [{c: printable(str(row[c])) for c in columns} for row in rows]
    widths = {c: max(len(c), *(len(r[c]) for r in cells)) for c in columns}
    out.write("  ".join(c.upper().ljust(widths[c]) for c in columns).rstrip() + "\n")
    for row in cells:
        out.write("  ".join(row[c].ljust(widths[c]) for c in columns).rstrip() + "\n")


async def pending_approvals(store: Store, page: int = 500) -> AsyncIterator[list[Approval]]:
    """Every pending approval, oldest first, a page at a time. Each partition's index is read
    with ZSCAN (it returns every id held from its start to its end, whatever changes meanwhile),
    then the records a page at a time: an operator's listing is where everything shows, so it
    has no cap (the Slack command shows the newest and points here)."""
    created: dict[str, float] = {}
    for partition in store.keys.partitions:
        async for approval_id, at in store.redis.zscan_iter(partition.pending_all, count=page):
            created[approval_id] = at
    ids = sorted(created, key=lambda i: (created[i], i))
    for start in range(0, len(ids), page):
        found = await asyncio.gather(*(store.approval(i) for i in ids[start : start + page]))
        yield [a for a in found if a and a.status is ApprovalStatus.PENDING]


async def pending(store: Store, policy: policy_file.PolicyFile, out: TextIO) -> int:
    now, rows = time.time(), []
    async for approvals in pending_approvals(store):
        rows += pending_rows(approvals, policy, now)
    table(rows, out)
    return 0


# --- audit -----------------------------------------------------------------------------------

AUDIT_COLUMNS = (
    "at",
    "approval_id",
    "thread_id",
    "index",
    "tool",
    "user",
    "outcome",
    "decision",
    "message",
    "original_args",
    "edited_args",
)


def since_time(given: str | None, now: float) -> float:
    """`--since`: a duration back from now (7d, 12h, 90s) or an ISO date/time (UTC if no zone)."""
    if not given:
        return 0.0
    if re.fullmatch(r"[1-9][0-9]{0,5}[smhd]", given):
        return now - (policy_file.seconds(given) or 0)
    try:
        parsed = datetime.fromisoformat(given)
    except ValueError:
        raise ValueError(f"--since {given!r}: a duration like 7d or 12h, or a date like 2026-11-01") from None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


async def audit_records(store: Store, page: int = 500) -> AsyncIterator[dict[str, Any]]:
    """Every audit entry, oldest first (the partitions' audit streams merged), a page at a time."""
    async for _, fields in store.paged(lambda p: p.audit, page):
        yield fields


def audit_row(fields: dict[str, str]) -> dict[str, Any]:
    decision = json.loads(fields.get("decision") or "null")
    decision = decision if isinstance(decision, dict) else {}
    edited = decision.get("edited_action", {}).get("args") if decision.get("type") == "edit" else None
    return {
        "at": iso(float(fields["at"])),
        "approval_id": fields.get("approval_id", ""),
        "thread_id": fields.get("thread_id", ""),
        "index": int(fields.get("index", "0")),
        "tool": fields.get("tool", ""),
        "user": fields.get("user", ""),
        "outcome": fields.get("outcome", "decided"),
        "decision": decision.get("type", "answer" if "answer" in decision else ""),
        "message": decision.get("message") or (str(decision["answer"]) if "answer" in decision else ""),
        "original_args": json.loads(fields.get("original_args") or "null"),
        "edited_args": edited,
    }


async def audit(
    store: Store,
    out: TextIO,
    since: str | None = None,
    tool: str | None = None,
    user: str | None = None,
    fmt: str = "jsonl",
) -> int:
    start = since_time(since, time.time())
    writer = csv.DictWriter(out, AUDIT_COLUMNS) if fmt == "csv" else None
    if writer:
        writer.writeheader()
    async for fields in audit_records(store):
        if float(fields.get("at", 0)) < start or (tool and fields.get("tool") != tool):
            continue
        if user and fields.get("user") != user:
            continue
        row = audit_row(fields)
        if writer:
            writer.writerow({k: _cell(v) for k, v in row.items()})
        else:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    return 0


def _cell(value: Any) -> Any:
    """A CSV cell: JSON for structures; text a spreadsheet would run as a formula (=, +, -, @)
    gets a leading apostrophe (what people and agents wrote is untrusted)."""
    if isinstance(value, dict | list):
        value = json.dumps(value, ensure_ascii=False)
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


# --- dead letters ------------------------------------------------------------------------------

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
    backslash-escaped, see `store.redis_client`); the first line of `why` with text, cut at 80."""
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
        for entry_id, fields in await store.redis.xrange(partition.dead_letters):
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
        DeadLetter(p, entry_id, hits[0][1])
        for p in candidates
        if (hits := await store.redis.xrange(p.dead_letters, min=entry_id, max=entry_id))
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


async def deadletters_show(store: Store, entry_id: str, out: TextIO) -> int:
    found = await _dead_letter(store, entry_id, out)
    if found is None:
        return 1
    shown = {k: _maybe_json(v) for k, v in found.fields.items()}
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
    async with store.redis.pipeline(transaction=True) as pipe:
        pipe.xadd(stream, message)
        pipe.xdel(partition.dead_letters, found.entry_id)
        new_id, _ = await pipe.execute()
    out.write(f"Replayed {entry_id} onto {stream} as {new_id}.\n")
    return 0


async def deadletters_drop(store: Store, entry_id: str, out: TextIO) -> int:
    found = await _dead_letter(store, entry_id, out)
    if found is None:
        return 1
    if not await store.redis.xdel(found.partition.dead_letters, found.entry_id):
        out.write(f"No dead letter {entry_id}.\n")
        return 1
    out.write(f"Dropped {entry_id}.\n")
    return 0


# --- migrate ----------------------------------------------------------------------------------

# Keys of no run: the same name in both layouts.
UNMOVED = ("slackthread:", "dedupe:", "rate:", "groups", "layout")


async def migrate(store: Store, out: TextIO, quiet_s: float = 10.0) -> int:
    """Move the keys of the layout before partitions (`prefix:approval:…`, `prefix:commands`…)
    into partition 0 (`prefix:{tag}:approval:…`), on the same server, with every bot and runner
    stopped. Each key is renamed (streams keep their consumer groups and pending entries, so
    a pending approval's card works after it); dead letters are written again with the stream
    they came from renamed. A mark set first keeps every process from starting until the end,
    and a migration cut off is finished by running it again."""
    prefix = store.keys.prefix
    if store.keys.count != 1 or isinstance(store.redis, AsyncRedisCluster):
        out.write(
            "signoff migrate moves the old keys into one partition on the same server: run it with "
            "SIGNOFF_PARTITIONS=1 against the server that holds them (to move to a cluster afterwards, "
            "see docs/redis.md).\n"
        )
        return 2
    raw = await store.redis.get(store.keys.layout)
    if raw is not None and not json.loads(raw).get("migrating"):
        out.write(f"Nothing to migrate: {prefix!r} is already laid out in partitions.\n")
        return 0
    busy = await _busy_consumers(store, prefix, quiet_s)
    if busy:
        out.write(f"Stop every bot and runner first; still active: {', '.join(busy)}.\n")
        return 1
    await store.redis.set(store.keys.layout, json.dumps({"version": 1, "migrating": True}))
    target = store.keys.partitions[0]
    streams, moved = [], 0
    async for key in store.redis.scan_iter(match=f"{prefix}:*", count=500):
        rest = key[len(prefix) + 1 :]
        if rest.startswith("{") or rest.startswith(UNMOVED):
            continue
        if await store.redis.type(key) == "stream":
            streams.append(key)  # last: what a process looks for to tell the old layout
            continue
        if not await _moved(store, key, f"{target.base}:{rest}", out):
            return 1
        moved += 1
    for key in streams:
        if not await _moved(store, key, f"{target.base}:{key[len(prefix) + 1 :]}", out):
            return 1
        moved += 1
    await store.redis.set(store.keys.layout, json.dumps({"version": LAYOUT_VERSION, "partitions": 1}))
    out.write(f"Moved {moved} keys of {prefix!r} into the partitioned layout (1 partition).\n")
    return 0


async def _moved(store: Store, key: str, new: str, out: TextIO) -> bool:
    prefix = store.keys.prefix
    if key.endswith(":deadletters"):  # their entries name the stream they came from: renamed too
        for entry_id, fields in await store.redis.xrange(key):
            stream = fields.get("stream", "")
            if stream.startswith(f"{prefix}:") and not stream[len(prefix) + 1 :].startswith("{"):
                stream = f"{store.keys.partitions[0].base}:{stream[len(prefix) + 1 :]}"
            async with store.redis.pipeline(transaction=True) as pipe:  # moved once, even if cut off
                pipe.xadd(new, {**fields, "stream": stream})
                pipe.xdel(key, entry_id)
                await pipe.execute()
        await store.redis.delete(key)
        return True
    if await store.redis.renamenx(key, new):
        return True
    out.write(f"Both {key} and {new} exist: not moved; look at them before starting Signoff.\n")
    return False


async def _busy_consumers(store: Store, prefix: str, quiet_s: float) -> list[str]:
    """Consumers of the old streams seen within `quiet_s` (a bot or runner still running)."""
    busy = []
    for stream, group in ((f"{prefix}:commands", RUNNERS_GROUP), (f"{prefix}:events", BOTS_GROUP)):
        try:
            consumers = await store.redis.xinfo_consumers(stream, group)
        except ResponseError as exc:
            if "no such key" in str(exc).lower() or "NOGROUP" in str(exc):
                continue  # no such stream or group: nobody reads it
            raise
        # `idle`: since its last read of any kind (a waiting consumer reads every second)
        busy += [c["name"] for c in consumers if int(c.get("idle", 0)) < quiet_s * 1000]
    return busy
