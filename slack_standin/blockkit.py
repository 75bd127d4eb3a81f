"""Slack's Block Kit limits, enforced as Slack does: a bad message or view is refused, never cut.

Checked against slack_sdk's models and Slack's docs (docs/slack-platform.md).
"""

from __future__ import annotations

import re
from typing import Any


def find_element(blocks: list[dict[str, Any]], action_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    for block in blocks:
        candidates = list(block.get("elements", []))
        if block.get("accessory"):
            candidates.append(block["accessory"])
        for element in candidates:
            if isinstance(element, dict) and element.get("action_id") == action_id:
                return block, element
    raise LookupError(f"no element {action_id!r} on this message")


# Block Kit limits -------------------------------------------------------------


def text_of(obj: Any) -> str:
    return obj.get("text", "") if isinstance(obj, dict) else str(obj or "")


def message_problem(args: dict[str, Any]) -> dict[str, Any] | None:
    if args.get("_bad"):
        return {"ok": False, "error": "invalid_blocks"}
    blocks = args.get("blocks") or []
    if not blocks and not args.get("text"):
        return {"ok": False, "error": "no_text"}
    errors = block_problems(blocks, limit=50)
    if errors:
        return {"ok": False, "error": "invalid_blocks", "errors": errors}
    if total_text(blocks) > 12_000:
        return {"ok": False, "error": "msg_blocks_too_long"}
    return None


def total_text(blocks: list[dict[str, Any]]) -> int:
    size = 0
    for block in blocks:
        size += len(text_of(block.get("text")))
        size += sum(len(text_of(f)) for f in block.get("fields", []))
        size += sum(
            len(text_of(e)) for e in block.get("elements", []) if e.get("type") in ("mrkdwn", "plain_text")
        )
        if block.get("type") == "rich_text":  # its text counts as a section's does
            size += len(_rich_text(block))
        if block.get("type") == "plan":  # its title and every task's title, details and output
            size += len(str(block.get("title") or ""))
            for task in block.get("tasks") or []:
                size += len(str(task.get("title") or "")) + len(_rich_text(task.get("details")))
                size += len(_rich_text(task.get("output")))
    return size


def _rich_text(value: Any) -> str:
    if not isinstance(value, dict):
        return ""
    return "".join(
        str(e.get("text") or "")
        for section in value.get("elements") or []
        if isinstance(section, dict)
        for e in section.get("elements") or []
        if isinstance(e, dict)
    )


def view_problems(view: dict[str, Any]) -> list[str]:
    errors = block_problems(view.get("blocks") or [], limit=100)
    for key in ("title", "submit", "close"):
        if key in view and len(text_of(view[key])) > 24:
            errors.append(f"{key} must be at most 24 characters")
    if not view.get("title"):
        errors.append("title is required")
    if any(b.get("type") == "input" for b in view.get("blocks", [])) and not view.get("submit"):
        errors.append("submit is required when the view has inputs")
    if len(view.get("private_metadata") or "") > 3_000:
        errors.append("private_metadata must be at most 3000 characters")
    if len(view.get("callback_id") or "") > 255:
        errors.append("callback_id must be at most 255 characters")
    return errors


def block_problems(blocks: list[dict[str, Any]], limit: int) -> list[str]:
    errors: list[str] = []
    if len(blocks) > limit:
        errors.append(f"no more than {limit} blocks allowed")
    seen: set[str] = set()
    for number, block in enumerate(blocks):
        where = f"blocks[{number}]"
        block_id = block.get("block_id")
        if block_id is not None:
            if len(block_id) > 255:
                errors.append(f"{where}.block_id must be at most 255 characters")
            if block_id in seen:
                errors.append(f"{where}.block_id {block_id!r} is not unique")
            seen.add(block_id)
        kind = block.get("type")
        if kind == "header":
            if block.get("text", {}).get("type") != "plain_text" or len(text_of(block.get("text"))) > 150:
                errors.append(f"{where}.text must be plain_text of at most 150 characters")
        elif kind == "section":
            text, fields = block.get("text"), block.get("fields") or []
            if not text and not fields:
                errors.append(f"{where} needs text or fields")
            if len(text_of(text)) > 3_000:
                errors.append(f"{where}.text must be at most 3000 characters")
            if len(fields) > 10 or any(len(text_of(f)) > 2_000 for f in fields):
                errors.append(f"{where}.fields: at most 10 of at most 2000 characters")
            if block.get("accessory"):
                errors += _element_problems(block["accessory"], f"{where}.accessory")
        elif kind == "context":
            elements = block.get("elements") or []
            if not 1 <= len(elements) <= 10:
                errors.append(f"{where}.elements: 1 to 10 allowed")
        elif kind == "actions":
            elements = block.get("elements") or []
            if not 1 <= len(elements) <= 25:
                errors.append(f"{where}.elements: 1 to 25 allowed")
            ids = [e.get("action_id") for e in elements if e.get("action_id")]
            if len(ids) != len(set(ids)):
                errors.append(f"{where}: action_ids must be unique")
            for i, element in enumerate(elements):
                errors += _element_problems(element, f"{where}.elements[{i}]")
        elif kind == "input":
            if len(text_of(block.get("label"))) > 2_000 or not block.get("label"):
                errors.append(f"{where}.label is required, at most 2000 characters")
            errors += _element_problems(block.get("element") or {}, f"{where}.element")
        elif kind == "plan":
            if not isinstance(block.get("title"), str) or not block["title"]:
                errors.append(f"{where}.title is required, in plain text")
            for n, task in enumerate(block.get("tasks") or []):
                errors += _task_problems(task, f"{where}.tasks[{n}]")
        elif kind == "task_card":
            errors += _task_problems(block, where)
        elif kind == "rich_text":
            errors += rich_text_problems(block, where)
        elif kind not in ("divider", "image", "file", "video", "markdown"):
            errors.append(f"{where}.type {kind!r} is not a block type")
    return errors


def _element_problems(element: dict[str, Any], where: str) -> list[str]:
    errors = []
    if len(element.get("action_id") or "") > 255:
        errors.append(f"{where}.action_id must be at most 255 characters")
    kind = element.get("type")
    if kind == "button":
        if len(text_of(element.get("text"))) > 75:
            errors.append(f"{where}.text must be at most 75 characters")
        if len(element.get("value") or "") > 2_000:
            errors.append(f"{where}.value must be at most 2000 characters")
        if element.get("style") not in (None, "primary", "danger"):
            errors.append(f"{where}.style must be primary or danger")
        confirm = element.get("confirm")
        if confirm:
            limits = {"title": 100, "text": 300, "confirm": 30, "deny": 30}
            for key, most in limits.items():
                if len(text_of(confirm.get(key))) > most:
                    errors.append(f"{where}.confirm.{key} must be at most {most} characters")
        if len(element.get("url") or "") > 3_000:
            errors.append(f"{where}.url must be at most 3000 characters")
    elif kind in ("static_select", "multi_static_select", "radio_buttons", "checkboxes"):
        errors += _options_problems(element, where, 100 if "select" in kind else 10)
    elif kind == "number_input":
        if not isinstance(element.get("is_decimal_allowed"), bool):
            errors.append(f"{where}.is_decimal_allowed is required")
        try:
            bounds = [float(element[k]) for k in ("min_value", "max_value") if element.get(k) is not None]
        except (TypeError, ValueError):
            errors.append(f"{where}.min_value and max_value must be numbers, as strings")
        else:
            if len(bounds) == 2 and bounds[0] > bounds[1]:
                errors.append(f"{where}.min_value must not exceed max_value")
    elif kind == "datepicker":
        if element.get("initial_date") is not None and not re.match(
            r"^\d{4}-\d{2}-\d{2}$", element["initial_date"]
        ):
            errors.append(f"{where}.initial_date must be YYYY-MM-DD")
    elif kind == "overflow":
        options = element.get("options") or []
        if not 1 <= len(options) <= 5:
            errors.append(f"{where}.options: 1 to 5 allowed")
        for option in options:
            if len(text_of(option.get("text"))) > 75 or len(option.get("value") or "") > 150:
                errors.append(f"{where}.options: text at most 75, value at most 150 characters")
    elif kind == "plain_text_input":
        most = element.get("max_length", 3_000)
        if most > 3_000:
            errors.append(f"{where}.max_length must be at most 3000")
        if len(element.get("initial_value") or "") > most:
            errors.append(f"{where}.initial_value is longer than max_length")
    return errors


def _options_problems(element: dict[str, Any], where: str, most: int) -> list[str]:
    """A select's, radio buttons' or checkboxes' options: how many, their text and value, and the
    initial ones among them."""
    errors = []
    options = element.get("options") or []
    if not 1 <= len(options) <= most:
        errors.append(f"{where}.options: 1 to {most} allowed")
    for option in options:
        if len(text_of(option.get("text"))) > 75 or len(option.get("value") or "") > 150:
            errors.append(f"{where}.options: text at most 75, value at most 150 characters")
    initial = (
        [element["initial_option"]] if element.get("initial_option") else element.get("initial_options") or []
    )
    if any(o not in options for o in initial):
        errors.append(f"{where}: an initial option must be one of the options")
    return errors


RICH_PARTS = ("rich_text_section", "rich_text_list", "rich_text_preformatted", "rich_text_quote")
RICH_INLINE = ("text", "link", "emoji", "user", "usergroup", "channel", "broadcast", "date", "color")


def rich_text_problems(block: dict[str, Any], where: str) -> list[str]:
    """A rich_text block as Slack takes it: sections, lists (of sections), preformatted text
    and quotes, each of inline elements (text, links…); preformatted text holds text and links
    only. Slack refuses any other shape with invalid_blocks."""
    errors = []
    parts = block.get("elements")
    if not isinstance(parts, list) or not parts:
        return [f"{where}.elements: at least one rich_text element is required"]
    for n, part in enumerate(parts):
        at = f"{where}.elements[{n}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in RICH_PARTS:
            errors.append(f"{at}.type must be one of {', '.join(RICH_PARTS)}")
            continue
        if kind == "rich_text_list":
            if part.get("style") not in ("bullet", "ordered"):
                errors.append(f"{at}.style must be bullet or ordered")
            inner = part.get("elements") or []
            if not inner or any(
                not isinstance(e, dict) or e.get("type") != "rich_text_section" for e in inner
            ):
                errors.append(f"{at}.elements must be rich_text_section elements")
            continue
        allowed = ("text", "link") if kind == "rich_text_preformatted" else RICH_INLINE
        for m, element in enumerate(part.get("elements") or []):
            if not isinstance(element, dict) or element.get("type") not in allowed:
                errors.append(f"{at}.elements[{m}].type must be one of {', '.join(allowed)}")
            elif element["type"] == "text" and not isinstance(element.get("text"), str):
                errors.append(f"{at}.elements[{m}].text must be a string")
            elif element["type"] == "link" and not isinstance(element.get("url"), str):
                errors.append(f"{at}.elements[{m}].url must be a string")
    return errors


TASK_STATUSES = ("pending", "in_progress", "complete", "error")
TASK_TEXT_MOST = 256  # reported, not documented: Slack cuts a task's title, details and output there


def _task_problems(task: Any, where: str) -> list[str]:
    """A task_card (in a plan or on its own): its fields as slack_sdk's TaskCardBlock has them."""
    if not isinstance(task, dict):
        return [f"{where} must be a task_card"]
    errors = []
    if not isinstance(task.get("task_id"), str) or not task["task_id"]:
        errors.append(f"{where}.task_id is required")
    title = task.get("title")
    if not isinstance(title, str) or not title or len(title) > TASK_TEXT_MOST:
        errors.append(f"{where}.title is required, plain text of at most {TASK_TEXT_MOST} characters")
    if task.get("status") is not None and task["status"] not in TASK_STATUSES:
        errors.append(f"{where}.status must be one of {', '.join(TASK_STATUSES)}")
    for key in ("details", "output"):
        value = task.get(key)
        if value is None:
            continue
        if not isinstance(value, dict) or value.get("type") != "rich_text":
            errors.append(f"{where}.{key} must be a single rich_text")
        elif len(_rich_text(value)) > TASK_TEXT_MOST:
            errors.append(f"{where}.{key} must be at most {TASK_TEXT_MOST} characters")
    return errors
