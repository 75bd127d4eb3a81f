"""`signoff audit`: who decided what, with the original and edited arguments, as JSON lines or
CSV (cells a spreadsheet would run as a formula defused)."""

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
