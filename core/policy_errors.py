"""A policy file's problems in words: the key (and the rule's name), what is wrong, what was
given, and an example of what would do; one line each (`core.policy_file.load` raises them as a
`PolicyError`). Pydantic's own messages ("String should match pattern '^[1-9]…'", "Input should
be a valid tuple") speak to the code's author, not to the file's: each kind is said here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic_core import ErrorDetails

# what a key's value looks like, for the examples (keys not named: a placeholder)
EXAMPLES = {
    "tools": "send_email",
    "approvers": "U0ALICE",
    "escalate_to": "S0ONCALL",
    "trust_args": "order_id",
    "redact": "args.password",
}
# string patterns, by the key (or the key above a list item) they are found at
PATTERNS = {
    "tools": "not a tool name or glob (letters, digits, _ . - and the wildcards * ?)",
    "approvers": "not a user id (U…, W…) or user-group id (S…)",
    "escalate_to": "not a user id (U…, W…) or user-group id (S…)",
    "channel": "not a channel id (C…, G…)",
    "name": "not a name: one line of at most 80 characters",
    "trust_args": "not an argument name: letters, digits and _, not starting with a digit, like order_id",
}
DURATIONS = ("timeout", "remind_every", "escalate_after", "trust")


def problem(path: Path, error: ErrorDetails, data: dict[str, Any]) -> str:
    loc = [str(p) for p in error["loc"]]
    key = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc).lstrip(".") or "(top level)"
    name = _rule_name(data, loc)
    if name:  # rules[1] ("Large refunds").when: the rule as people call it too
        key = key.replace(f"rules[{loc[1]}]", f"rules[{loc[1]}] ({name!r})", 1)
    given = error.get("input")
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "value_error" and not loc:  # the whole-policy checks: each names its key
        return "\n".join(f"{path}: {problem}" for problem in message.split("; "))
    message = said(error, [p for p in loc if not p.isdigit()], given) or message
    shown = f" (given {given!r})" if isinstance(given, str | int | float | bool) else ""
    return f"{path}: {key}: {message}{shown if repr(given) not in message else ''}"


def said(error: ErrorDetails, keys: list[str], given: Any) -> str | None:
    """What pydantic's error means to the file's reader, with an example value (None: its own
    message says it)."""
    kind, ctx, last = error["type"], error.get("ctx") or {}, keys[-1] if keys else ""
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "string_pattern_mismatch":
        if last in DURATIONS:
            return "not a duration like 90s, 30m, 2h or 7d"
        return PATTERNS.get(last, f"not a value {last or 'this key'} takes")
    if kind in ("tuple_type", "list_type") and last == "require":
        return 'a list of tables, like require = [{ approvers = ["S0FINANCE"], count = 1 }]'
    if kind in ("tuple_type", "list_type"):
        item = given if isinstance(given, str) else EXAMPLES.get(last, "…")
        return f"a list, in square brackets: {last} = {json.dumps([item], ensure_ascii=False)}"
    if kind == "too_short":
        what = "no entry left that can be read" if given else "an empty list"
        return f"{what}: name at least one, like {last} = {json.dumps([EXAMPLES.get(last, '…')])}"
    return _SIMPLE.get(kind, lambda _: None)(ctx)


_SIMPLE: dict[str, Any] = {
    "int_parsing": lambda ctx: "not a whole number, like 2",
    "int_type": lambda ctx: "not a whole number, like 2",
    "bool_parsing": lambda ctx: "not true or false (without quotes)",
    "bool_type": lambda ctx: "not true or false (without quotes)",
    "string_type": lambda ctx: 'not text: put it in quotes, like "…"',
    "literal_error": lambda ctx: f"not one of {ctx.get('expected')}",
    "less_than_equal": lambda ctx: f"at most {ctx.get('le')}",
    "greater_than_equal": lambda ctx: f"at least {ctx.get('ge')}",
    "string_too_long": lambda ctx: f"longer than {ctx.get('max_length')} characters",
    "too_long": lambda ctx: f"more than {ctx.get('max_length')} items",
    "missing": lambda ctx: "missing: this key is needed",
    "model_type": lambda ctx: "not a table: [[rules]] entries and [defaults] hold keys",
    "dict_type": lambda ctx: 'not a table, like { approvers = ["U0ALICE"], count = 1 }',
}


def _rule_name(data: dict[str, Any], loc: list[str]) -> str | None:
    """The name of the rule a problem is in, when it has a usable one."""
    rules = data.get("rules")
    if len(loc) < 2 or loc[0] != "rules" or not loc[1].isdigit() or not isinstance(rules, list):
        return None
    index = int(loc[1])
    rule = rules[index] if index < len(rules) else None
    name = rule.get("name") if isinstance(rule, dict) else None
    return name if isinstance(name, str) and 0 < len(name) <= 80 and name.isprintable() else None
