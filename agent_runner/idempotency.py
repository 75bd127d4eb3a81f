"""Idempotency keys for tools with side effects.

LangGraph saves a tool's result in a checkpoint after the tool returns. If the
process dies in between (killed, OOM, a node lost), the run continues from the
last checkpoint and the tool runs again: side effects are *at least once*.
A tool that hands `idempotency_key(runtime, args)` to the system it changes
(a payment API's Idempotency-Key header, a unique column, a dedupe table)
makes them *exactly once*: the key is the same for every execution of one
tool call and different for every other call.

The key is derived from the thread, the tool call's id (kept stable by the
checkpointed model message that asked for the call) and, for a call a person
approved, that approval and the approved arguments, so an edited call or a
call approved again after time travel gets a key of its own. The runner puts
the thread's approved calls in the run's config (`signoff_approved`); nothing
else is needed from the tool than its `runtime: ToolRuntime` argument.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from core.protocol import APPROVED
from core.records import Approval, ApprovalStatus


def idempotency_key(runtime: Any, args: Mapping[str, Any] | None = None) -> str:
    """The key for this execution's side effects; `args` are the arguments the tool acts on.

    `runtime` is the `ToolRuntime` LangChain injects into a tool that declares
    `runtime: ToolRuntime`. Without `args`, the arguments of the model's call are used.
    """
    config = runtime.config or {}
    configurable = config.get("configurable") or {}
    call_id = runtime.tool_call_id
    if not call_id:
        raise ValueError("idempotency_key needs a tool call id: call it from a tool run by an agent")
    name, called_with = _tool_call(runtime.state, call_id)
    acted_on = dict(args) if args is not None else called_with
    approval = approved_call(configurable.get(APPROVED) or [], name, acted_on)
    material: dict[str, Any] = {"thread": configurable.get("thread_id"), "call": call_id}
    if approval:
        material.update(approval=approval, args=acted_on)
    digest = hashlib.sha256(_canonical(material).encode()).hexdigest()
    return f"signoff-{digest[:40]}"


def approved_call(approved: Sequence[Mapping[str, Any]], tool: str, args: Mapping[str, Any]) -> str | None:
    """The newest approval that let `tool` run with exactly `args`."""
    wanted = _canonical(args)
    for entry in approved:
        if entry.get("tool") == tool and _canonical(entry.get("args") or {}) == wanted:
            return str(entry["approval_id"])
    return None


def _tool_call(state: Any, call_id: str) -> tuple[str, dict[str, Any]]:
    messages = state.get("messages", []) if isinstance(state, Mapping) else getattr(state, "messages", [])
    for message in reversed(messages or []):
        for call in getattr(message, "tool_calls", None) or []:
            if call.get("id") == call_id:
                return str(call.get("name", "")), dict(call.get("args") or {})
    return "", {}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def approved_calls_of(approvals: list[Approval]) -> list[dict[str, Any]]:
    """The calls people let run among a thread's approvals (newest first, as given)."""
    calls = []
    for approval in approvals:
        if approval.status not in (ApprovalStatus.RESUMING, ApprovalStatus.RESUMED):
            continue
        for index, action in enumerate(approval.request.actions):
            decision = approval.decided.get(index)
            kind = decision.decision.get("type") if decision else None
            if kind == "approve":
                calls.append(
                    {"approval_id": approval.approval_id, "tool": action.name, "args": action.real_args}
                )
            elif kind == "edit":
                edited = decision.decision.get("edited_action", {}) if decision else {}
                calls.append(
                    {
                        "approval_id": approval.approval_id,
                        "tool": action.name,
                        "args": edited.get("args", {}),
                    }
                )
    return calls
