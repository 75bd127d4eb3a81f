"""What the operator's commands print with: times, text and JSON made safe for a terminal
(control and invisible characters escaped), and tables."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, TextIO


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
