"""The demo agent: a real deepagents agent on a scripted model (no API key).

Configured like the production example in `docs/hitl-semantics.md` (its last
section): `send_email` always pauses (approve / reject), `issue_refund` always
pauses (approve / reject) and the policy file says which refunds need a person
(`build_self_gated_agent` pauses only above 1000, by its own `when`), `delete` always pauses (every decision),
`write_file` and `edit_file` pause only outside /tmp/ and /drafts/ (approve / edit /
reject), a write described by path, length and the first 200 characters (its card shows
the diff of the file: `core.previews`). Reads, todos and scratch writes never pause. A
`bookkeeper` subagent issues refunds under the same rule, so its pauses surface at the top
level. Each thread starts with a small workspace (`WORKSPACE`: a launch plan, a README) in
the agent's files, so there is something to edit.

The scripted model reads the request in plain words: "email a@b.c ...",
"refund order 12 for 5000", "write ... to /plans/x.md", "in /plans/launch.md replace "Monday"
with "Tuesday"", "delete /old/x.pdf",
"ask the bookkeeper to ...", "deploy checkout to staging" and "connect github" (two tools
of an MCP server, `signoff_demo.mcp_server`, whose questions become cards). Several requests
in one message become parallel tool calls in one turn. After the tools ran, it reports what
each returned.
"""

from __future__ import annotations

import os
import re
from typing import Any

from deepagents import create_deep_agent
from deepagents.backends.utils import create_file_data
from langchain.agents.middleware import AgentMiddleware, InterruptOnConfig
from langchain.tools import ToolRuntime
from langchain_core.messages import AIMessage, BaseMessage, ToolCall, ToolMessage, get_notification_metadata
from langchain_core.tools import tool
from langgraph.types import Checkpointer

from agent_runner.idempotency import idempotency_key
from signoff_demo import payments as demo_payments
from signoff_demo.mcp_server import mcp_tools
from signoff_demo.scripted_model import ScriptedChatModel, last_human_text, tool_call, turns_since_human

REFUND_LIMIT = 1000
UNREVIEWED_DIRS = ("/tmp/", "/drafts/")


@tool
def send_email(to: str, subject: str, body: str) -> str:
    """Send an email to one recipient."""
    return f"Email to {to} sent: {subject}"


@tool
def issue_refund(order_id: str, amount: int, runtime: ToolRuntime) -> str:
    """Refund an order, amount in whole currency units."""
    # The same key for every execution of this call: a re-run after a crash refunds once.
    key = idempotency_key(runtime, {"order_id": order_id, "amount": amount})
    demo_payments.refund(order_id, amount, idempotency_key=key)
    return f"Refunded {amount} on order {order_id}"


def refund_needs_review(request: Any) -> bool:
    return int(request.tool_call["args"].get("amount", 0)) > REFUND_LIMIT


def write_needs_review(request: Any) -> bool:
    path = str(request.tool_call["args"].get("file_path", ""))
    return not path.startswith(UNREVIEWED_DIRS)


def describe_write(tool_call: ToolCall, state: Any, runtime: Any) -> str:
    args = tool_call["args"]
    content = str(args.get("content", ""))
    preview = content[:200] + ("…" if len(content) > 200 else "")
    return f"Write {len(content)} characters to {args.get('file_path')}:\n{preview}"


def describe_edit(tool_call: ToolCall, state: Any, runtime: Any) -> str:
    args = tool_call["args"]
    every = " (every match)" if args.get("replace_all") else ""
    return f"Edit {args.get('file_path')}: replace text{every}"


# The files each demo thread starts with, in the agent's state (deepagents' state backend).
WORKSPACE = {
    "/plans/launch.md": (
        "# Launch plan\n"
        "\n"
        "- Freeze the release branch on Thursday\n"
        "- Launch on Monday at 10:00 UTC\n"
        "- Post the announcement in #general\n"
        "- Watch the error dashboards for an hour\n"
        "- Send the launch email to customers\n"
    ),
    "/docs/README.md": "# Acme\n\nThe Acme app. Ask in #support for help.\n",
}


class Workspace(AgentMiddleware):
    """Puts `WORKSPACE` in a thread's files on its first turn (never over files it has)."""

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        if state.get("files"):
            return None
        return {"files": {path: create_file_data(text) for path, text in WORKSPACE.items()}}


def _refund_rule() -> InterruptOnConfig:
    return {"allowed_decisions": ["approve", "reject"], "when": refund_needs_review}


# Every refund pauses: which ones need a person is the policy's to say (signoff_demo/signoff.toml:
# over 1,000 to #finance, the rest approved by policy), where approvers can read and change it.
INTERRUPT_ON: dict[str, bool | InterruptOnConfig] = {
    "send_email": {"allowed_decisions": ["approve", "reject"]},
    "issue_refund": {"allowed_decisions": ["approve", "reject"]},
    "delete": True,
    "write_file": InterruptOnConfig(
        allowed_decisions=["approve", "edit", "reject"], when=write_needs_review, description=describe_write
    ),
    "edit_file": InterruptOnConfig(
        allowed_decisions=["approve", "edit", "reject"], when=write_needs_review, description=describe_edit
    ),
}
# The same agent deciding in its own code which refunds pause (over 1,000), as a team without a
# policy file would: the terminal walkthrough (no bot, so no policy) and the tests' "demo" graph.
SELF_GATED: dict[str, bool | InterruptOnConfig] = {**INTERRUPT_ON, "issue_refund": _refund_rule()}

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_PATH = re.compile(r"(/[\w.\-/]+)")
_DEPLOY = re.compile(r"\bdeploy\s+([\w-]+)\s+to\s+([\w-]+)", re.I)
_CONNECT = re.compile(r"\bconnect\s+(?:our\s+|the\s+)?([\w-]+)", re.I)
_REFUND = re.compile(r"refund\D*?(?:order\s*#?\s*)?(\w+)\D+?(\d+)", re.I)
_REPLACE = re.compile(r"\breplace\s+(all\s+)?[\"“](.+?)[\"”]\s+(?:with|by)\s+[\"“](.*?)[\"”]", re.I | re.S)


def plan(text: str) -> list[dict[str, Any]]:
    """The tool calls the scripted model makes for one request."""
    lowered = text.lower()
    if "bookkeeper" in lowered:
        task = re.sub(r"^.*?bookkeeper\s*(to\s*)?", "", text, flags=re.I) or text
        return [tool_call("task", {"description": task, "subagent_type": "bookkeeper"}, "call_task")]
    calls: list[dict[str, Any]] = []
    for number, clause in enumerate(re.split(r"\s+(?:and|then)\s+|;\s*", text)):
        words = clause.lower()
        call_id = f"call_{number}"
        if deploy := _DEPLOY.search(clause):  # an MCP tool: its server asks for the rollout
            service, environment = deploy.groups()
            calls.append(
                tool_call("deploy_service", {"service": service, "environment": environment}, call_id)
            )
        elif connect := _CONNECT.search(clause):  # an MCP tool: its server sends a person to sign in
            calls.append(tool_call("connect_account", {"provider": connect.group(1).lower()}, call_id))
        elif (edit := _REPLACE.search(clause)) and (path := _PATH.search(clause)):
            replace_all, old, new = edit.groups()
            args = {"file_path": path.group(1), "old_string": _lines(old), "new_string": _lines(new)}
            calls.append(tool_call("edit_file", {**args, "replace_all": bool(replace_all)}, call_id))
        elif words.startswith(("delete", "remove")) and (path := _PATH.search(clause)):
            calls.append(tool_call("delete", {"file_path": path.group(1)}, call_id))
        elif "refund" in words and (match := _REFUND.search(clause)):
            order, amount = match.groups()
            calls.append(tool_call("issue_refund", {"order_id": order, "amount": int(amount)}, call_id))
        elif ("write" in words or "save" in words) and (path := _PATH.search(clause)):
            body = _lines(_quoted(clause) or f"Notes requested: {clause.strip()}")
            calls.append(tool_call("write_file", {"file_path": path.group(1), "content": body}, call_id))
        elif ("email" in words or "mail" in words) and (address := _EMAIL.search(clause)):
            subject = _quoted(clause) or clause.strip()[:60]
            body = f"Hello,\n\n{clause.strip()}\n\n-- sent by the Signoff demo agent"
            calls.append(
                tool_call("send_email", {"to": address.group(0), "subject": subject, "body": body}, call_id)
            )
    return calls


def _lines(text: str) -> str:
    """A quoted text as the model means it: a written "\\n" is a new line."""
    return text.replace("\\n", "\n")


def _quoted(text: str) -> str | None:
    match = re.search(r"[\"“](.+?)[\"”]", text)
    return match.group(1) if match else None


def demo_script(messages: list[BaseMessage]) -> AIMessage:
    if turns_since_human(messages) == 0:
        calls = plan(last_human_text(messages))
        if calls:  # ids unique in the thread, as a model's are: `call_0_1`, then `call_0_5`…
            calls = [{**call, "id": f"{call['id']}_{len(messages)}"} for call in calls]
            return AIMessage(content="", tool_calls=calls)
        return AIMessage(
            content="I can send emails, issue refunds, write and delete files, deploy a service, "
            "connect an account, or ask the bookkeeper. Try: refund order 1235 for 5000."
        )
    results: list[str] = []
    for message in reversed(messages):
        if not isinstance(message, ToolMessage):
            break
        results.extend(f"- {line}" for line in for_people(message).splitlines())
    if not results:
        return AIMessage(content="Done.")
    return AIMessage(content=REPORT + "\n".join(reversed(results)))


_REJECTED = re.compile(
    r"User rejected the tool call for `([^`]+)`(?: with id \S+?\.)?(?: with reason: (.*))?", re.S
)
_EDITED = re.compile(r"Executed instead: (\S+) with arguments ")
_RESPONSE = re.compile(r"Tool response:\s*(.*)$", re.S)
REPORT = "Here is what I did:\n"  # a subagent's answer is its own report: told as its lines


def for_people(message: ToolMessage) -> str:
    """A tool's result as the agent tells people, not as the model reads it: what the middleware
    wrote for the model (an edit's notice, "Do not retry unless asked") stays out."""
    text = message.text.strip()
    said = get_notification_metadata(message)
    if said and (said.get("data") or {}).get("decision") == "respond":  # nothing ran: a person answered
        return f"💬 I did not run {message.name}; a reviewer answered instead: {text}"
    rejected = _REJECTED.match(text)
    if rejected:
        reason = (rejected.group(2) or "").strip().removesuffix("Do not retry unless asked.").strip()
        if reason.startswith("No decision within"):  # no one decided in time
            return f"⌛ I did not run {rejected.group(1)}: {reason}"
        if reason.startswith("Withdrawn by the requester"):
            return f"↩️ I did not run {rejected.group(1)}: you withdrew the request."
        if reason:
            return f"❌ I did not run {rejected.group(1)}; the reviewer said: {reason}"
        return f"❌ I did not run {rejected.group(1)}, and I won't retry it unless you ask."
    if text.startswith(REPORT):
        return "\n".join(line.removeprefix("- ") for line in text.removeprefix(REPORT).splitlines())
    edited = _EDITED.search(text)
    if edited:
        response = _RESPONSE.search(text)
        result = response.group(1).strip() if response else ""
        return f"✏️ I ran {edited.group(1)} as a reviewer edited it" + (f": {result}" if result else ".")
    if message.status == "error":
        return f"⚠️ {message.name} failed: {text}"
    return f"✅ {text}"


def demo_model() -> Any:
    """The scripted model, or a real one when SIGNOFF_DEMO_MODEL names it (`provider:model`,
    e.g. `anthropic:claude-sonnet-4-6`, with that provider's API key in the environment)."""
    spec = os.environ.get("SIGNOFF_DEMO_MODEL")
    if spec:
        from langchain.chat_models import init_chat_model

        return init_chat_model(spec)
    return ScriptedChatModel(script=demo_script)


def build_demo_agent(checkpointer: Checkpointer = None, model: Any = None):
    """The compiled demo graph; the runner attaches its own checkpointer. Every refund pauses:
    the policy decides which need a person."""
    return _demo_agent(INTERRUPT_ON, checkpointer, model)


def build_self_gated_agent(checkpointer: Checkpointer = None, model: Any = None):
    """The demo graph pausing only for refunds over 1,000, by its own `when` (no policy needed)."""
    return _demo_agent(SELF_GATED, checkpointer, model)


def _demo_agent(interrupt_on: dict[str, bool | InterruptOnConfig], checkpointer: Checkpointer, model: Any):
    model = model or demo_model()
    return create_deep_agent(
        model=model,
        tools=[send_email, issue_refund, *mcp_tools()],  # deploy_service and connect_account ask
        system_prompt="You are the Signoff demo agent. Ask for approval before risky actions.",
        interrupt_on=interrupt_on,
        middleware=[Workspace()],
        subagents=[
            {
                "name": "bookkeeper",
                "description": "Handles refunds and anything about money.",
                "system_prompt": "You issue refunds.",
                "tools": [issue_refund],
                "model": model,
                "interrupt_on": {"issue_refund": interrupt_on["issue_refund"]},
            }
        ],
        checkpointer=checkpointer,
        name="demo",
    )
