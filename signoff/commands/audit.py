"""`signoff audit`: who decided what, with the original and edited arguments, as JSON lines or
CSV (cells a spreadsheet would run as a formula defused).

A JSON line also carries what makes it verifiable (`core.audit_chain`): its `chain` (the
partition), stream `id`, `prev` and `hash` (null for an entry written before the chain), and the
`entry` as stored, which the hash covers; `signoff audit verify` checks them
(`signoff.commands.audit_verify`). A JSON export begins with a line saying what it is
(`{"signoff_audit": "export", …}`) and ends with one giving each chain's first entry, count and
head (`{"signoff_audit": "end", …}`): an export whose first or last lines were cut fails verify
without any key."""

from __future__ import annotations

import csv
import json
import re
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, TextIO

from core import policy_file
from core.store import Store
from signoff.commands.printing import iso

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
    "preview_sha256",
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


async def audit_records(store: Store, page: int = 500) -> AsyncIterator[tuple[int, str, dict[str, str]]]:
    """Every audit entry, oldest first (the partitions' audit streams merged), a page at a time:
    (its chain, that is its partition's index, its id, its fields). What decisions queued is
    chained first (`Audit.chain`: a bot stopped between a click and its chaining leaves some)."""
    await store.audit.chain_all()
    async for chain, entry_id, fields in store.queue.paged_by_partition(lambda p: p.audit, page):
        yield chain, entry_id, fields


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
        # the SHA-256 of the preview the card showed (`core.previews`): the approval record has it
        "preview_sha256": fields.get("preview_sha256") or None,
    }


def export_row(chain: int, entry_id: str, fields: dict[str, str]) -> dict[str, Any]:
    """A JSON line: the row, and what verifies it (the entry as stored, its chain links)."""
    stored = {k: v for k, v in fields.items() if k not in ("prev", "hash")}
    links = {"prev": fields.get("prev"), "hash": fields.get("hash")}
    return {**audit_row(fields), "chain": chain, "id": entry_id, **links, "entry": stored}


async def audit(
    store: Store,
    out: TextIO,
    since: str | None = None,
    tool: str | None = None,
    user: str | None = None,
    fmt: str = "jsonl",
) -> int:
    """Every entry from `since` on (a chain's entries from its first one since then: a chain
    stays whole from there, whatever a clock did), of `tool` and by `user` if given."""
    start = since_time(since, time.time())
    writer = csv.DictWriter(out, AUDIT_COLUMNS) if fmt == "csv" else None
    if writer:
        writer.writeheader()
    else:
        filtered = bool(tool or user)
        out.write(json.dumps({"signoff_audit": "export", "since": start, "filtered": filtered}) + "\n")
    begun: set[int] = set()
    ends: dict[str, dict[str, Any]] = {}
    async for chain, entry_id, fields in audit_records(store):
        if chain not in begun and float(fields.get("at", 0)) < start:
            continue
        begun.add(chain)
        if (tool and fields.get("tool") != tool) or (user and fields.get("user") != user):
            continue
        if writer:
            writer.writerow({k: _cell(v) for k, v in audit_row(fields).items()})
            continue
        out.write(json.dumps(export_row(chain, entry_id, fields), ensure_ascii=False) + "\n")
        end = ends.setdefault(str(chain), {"first": entry_id, "entries": 0, "head": None})
        end["entries"] += 1
        end["head"] = fields.get("hash") or end["head"]
    if not writer:
        out.write(json.dumps({"signoff_audit": "end", "chains": ends}) + "\n")
    return 0


def _cell(value: Any) -> Any:
    """A CSV cell: JSON for structures; text a spreadsheet would run as a formula (=, +, -, @)
    gets a leading apostrophe (what people and agents wrote is untrusted)."""
    if isinstance(value, dict | list):
        value = json.dumps(value, ensure_ascii=False)
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value
