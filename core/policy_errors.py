"""A policy file's problems in words: the key (and the rule's name), what is wrong, what was
given; one line each (`core.policy_file.load` raises them as a `PolicyError`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic_core import ErrorDetails

DURATIONS = ("timeout", "remind_every", "escalate_after")


def problem(path: Path, error: ErrorDetails, data: dict[str, Any]) -> str:
    loc = [str(p) for p in error["loc"]]
    key = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc).lstrip(".") or "(top level)"
    name = _rule_name(data, loc)
    if name:  # rules[1] ("Large refunds").when: the rule as people call it too
        key = key.replace(f"rules[{loc[1]}]", f"rules[{loc[1]}] ({name!r})", 1)
    given = error.get("input")
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown key"
    elif error["type"] == "string_pattern_mismatch" and loc and loc[-2:-1] == ["tools"]:
        message = "not a tool name or glob (letters, digits, _ . - and the wildcards * ?)"
    elif error["type"] == "string_pattern_mismatch" and "approvers" in loc:
        message = "not a user id (U…, W…) or user-group id (S…)"
    elif error["type"] == "string_pattern_mismatch" and "channel" in loc:
        message = "not a channel id (C…, G…)"
    elif error["type"] == "string_pattern_mismatch" and loc and loc[-1] in DURATIONS:
        message = "not a duration like 90s, 30m, 2h or 7d"
    elif error["type"] == "string_pattern_mismatch" and loc and loc[-1] == "name":
        message = "not a name: one line of at most 80 characters"
    elif error["type"] == "value_error" and not loc:  # the whole-policy checks: each names its key
        return "\n".join(f"{path}: {problem}" for problem in message.split("; "))
    shown = f" (given {given!r})" if isinstance(given, str | int | float | bool) else ""
    return f"{path}: {key}: {message}{shown}"


def _rule_name(data: dict[str, Any], loc: list[str]) -> str | None:
    """The name of the rule a problem is in, when it has a usable one."""
    rules = data.get("rules")
    if len(loc) < 2 or loc[0] != "rules" or not loc[1].isdigit() or not isinstance(rules, list):
        return None
    index = int(loc[1])
    rule = rules[index] if index < len(rules) else None
    name = rule.get("name") if isinstance(rule, dict) else None
    return name if isinstance(name, str) and 0 < len(name) <= 80 and name.isprintable() else None
