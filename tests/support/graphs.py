"""Graphs the end-to-end tests run besides the demo agent (loaded by name, like users' graphs)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.tools import tool
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

from signoff_demo.agent import build_self_gated_agent, demo_script
from signoff_demo.mcp_server import mcp_tools
from signoff_demo.scripted_model import (
    ScriptedChatModel,
    calls,
    last_human_text,
    tool_call,
    turns_since_human,
)
from tests.support.agents import EMAIL, TOOLS, WRITE, scripted

# The tests' "demo" (SIGNOFF_GRAPH names a graph after its attribute): the demo agent pausing only
# for refunds over 1,000, by its own `when`, so the tests need no policy for small refunds to run.
build_demo_agent = build_self_gated_agent


def build_per_call_agent(checkpointer=None):
    return create_agent(
        scripted(WRITE, EMAIL),
        tools=TOOLS,
        middleware=[
            HumanInTheLoopMiddleware(
                interrupt_on={"write_file": True, "send_email": {"allowed_decisions": ["approve", "reject"]}},
                interrupt_mode="per_call",
            )
        ],
        checkpointer=checkpointer,
    )


class Budget(TypedDict, total=False):
    messages: list
    code: str


def ask_budget(state: Budget) -> Budget:
    return {"code": interrupt("Which budget code should I use for <!channel> travel?")}


def build_question_graph(checkpointer=None):
    return (
        StateGraph(Budget)
        .add_node("ask", ask_budget)
        .add_edge(START, "ask")
        .compile(checkpointer=checkpointer)
    )


def build_mcp_agent(checkpointer=None):
    """A `create_agent` graph whose tools are an MCP server's (`signoff_demo.mcp_server`, in
    process), through LangChain's own MCP adapter: "deploy checkout to staging" asks for the
    rollout in a form, "connect github" sends a person to sign in."""
    return create_agent(
        ScriptedChatModel(script=demo_script), tools=mcp_tools(), checkpointer=checkpointer, name="mcp"
    )


def _note(variable: str, line: str) -> None:
    """A line in the file the environment variable names (when it names one)."""
    path = os.environ.get(variable)
    if path:
        with Path(path).open("a") as out:
            out.write(f"{line}\n")


@tool
def send_email(to: str, subject: str, body: str) -> str:
    """Send an email (slowly), and write it to the ledger file once sent (SIGNOFF_TEST_STARTED:
    when each execution started, by which process)."""
    _note("SIGNOFF_TEST_STARTED", f"{to} {os.getpid()} {time.time():.3f}")
    time.sleep(float(os.environ.get("SIGNOFF_TEST_TOOL_SECONDS", "0")))
    ledger = os.environ.get("SIGNOFF_TEST_LEDGER")
    if ledger:
        with Path(ledger).open("a") as out:
            out.write(f"{to}\n")
    return f"sent to {to}"


def build_ledger_agent(checkpointer=None):
    model = ScriptedChatModel(
        turns=[
            calls(tool_call("send_email", {"to": "a@acme.com", "subject": "hi", "body": "x"}, "c1")),
            calls(content="Sent."),
        ]
    )
    return create_agent(
        model,
        tools=[send_email],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"send_email": True})],
        checkpointer=checkpointer,
    )


API_KEY = "sk-live-7Qx2Vn9Lr4Tb8Kw1"  # what `build_keyed_agent`'s call carries: found nowhere at rest


@tool
def call_api(url: str, api_key: str) -> str:
    """Call an API with a key; the key it was given goes to the ledger file."""
    _note("SIGNOFF_TEST_LEDGER", api_key)
    return f"called {url}"


def build_keyed_agent(checkpointer=None):
    """One call carrying a secret (`API_KEY`), paused for approval, then an answer."""
    model = ScriptedChatModel(
        turns=[
            calls(tool_call("call_api", {"url": "https://api.example.com/v1", "api_key": API_KEY}, "c1")),
            calls(content="Called."),
        ]
    )
    return create_agent(
        model,
        tools=[call_api],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"call_api": True})],
        checkpointer=checkpointer,
    )


def remember(messages):
    """Answers with everything the person said in this conversation: proof of memory."""
    from langchain_core.messages import AIMessage, HumanMessage

    said = [m.text for m in messages if isinstance(m, HumanMessage)]
    return AIMessage(content="You said: " + " | ".join(said))


def build_memory_agent(checkpointer=None):
    return create_agent(ScriptedChatModel(script=remember), tools=[], checkpointer=checkpointer)


def flaky(messages):
    """Fails while the file named by SIGNOFF_TEST_FAIL exists (a provider outage); the file's text,
    when it has some, is the error's."""
    from langchain_core.messages import AIMessage

    flag = os.environ.get("SIGNOFF_TEST_FAIL")
    if flag and Path(flag).exists():
        raise RuntimeError(Path(flag).read_text() or "the model provider is unavailable")
    return AIMessage(content="**Recovered** and done.")


def build_flaky_agent(checkpointer=None):
    return create_agent(ScriptedChatModel(script=flaky), tools=[], checkpointer=checkpointer)


@tool
def compile_report(topic: str) -> str:
    """Compile a report (slowly); every execution is written to the ledger file."""
    ledger = os.environ.get("SIGNOFF_TEST_LEDGER")
    if ledger:
        with Path(ledger).open("a") as out:
            out.write(f"report {topic}\n")
    time.sleep(float(os.environ.get("SIGNOFF_TEST_REPORT_SECONDS", "0")))
    return f"report on {topic} compiled"


def build_slow_agent(checkpointer=None):
    """No approval at all: one ungated tool that takes SIGNOFF_TEST_REPORT_SECONDS."""
    model = ScriptedChatModel(
        turns=[calls(tool_call("compile_report", {"topic": "q3"}, "c1")), calls(content="Report ready.")]
    )
    return create_agent(model, tools=[compile_report], checkpointer=checkpointer)


def thinking_slowly(messages):
    """Thinks SIGNOFF_TEST_MODEL_SECONDS (noted in SIGNOFF_TEST_THINKING) before it calls the
    report tool; then says it is ready."""
    from langchain_core.messages import AIMessage, ToolMessage

    if any(isinstance(m, ToolMessage) for m in messages):
        return AIMessage(content="Report ready.")
    _note("SIGNOFF_TEST_THINKING", f"{os.getpid()} {time.time():.3f}")
    time.sleep(float(os.environ.get("SIGNOFF_TEST_MODEL_SECONDS", "0")))
    return calls(tool_call("compile_report", {"topic": "q3"}, "c1"))


def build_thinking_agent(checkpointer=None):
    """A model step that takes a while, then one ungated tool: a runner frozen while it thinks."""
    return create_agent(
        ScriptedChatModel(script=thinking_slowly), tools=[compile_report], checkpointer=checkpointer
    )


def email_everyone(messages):
    """ "Email 60 people": one turn of 60 send_email calls (u0@acme.com…), then a count of results."""
    from langchain_core.messages import AIMessage, ToolMessage

    if turns_since_human(messages) == 0:
        number = re.search(r"\d+", last_human_text(messages))
        count = int(number.group(0)) if number else 1
        return calls(
            *[
                tool_call("send_email", {"to": f"u{n}@acme.com", "subject": "hi", "body": "x"}, f"c{n}")
                for n in range(count)
            ]
        )
    results = [m for m in messages if isinstance(m, ToolMessage)]
    sent = sum("sent to" in m.text for m in results)  # an edited call's result starts with a notice
    return AIMessage(content=f"Sent {sent} of {len(results)} emails.")


def build_batch_agent(checkpointer=None):
    """One model turn that asks for as many emails as the request says: a batch of any size."""
    return create_agent(
        ScriptedChatModel(script=email_everyone),
        tools=[send_email],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"send_email": True})],
        checkpointer=checkpointer,
    )


_SPELLED = re.compile(r"order (\w+) for (.+)$")


def spelled_refund(messages):
    """Calls issue_refund with the amount spelled as the request spells it, read as JSON:
    `Refund order 7 for "50000"` passes the text "50000", `for [50000]` a list (a model's own
    argument types, which the policy must judge as the tool receives them)."""
    import json

    from langchain_core.messages import AIMessage, ToolMessage

    if turns_since_human(messages) == 0:
        found = _SPELLED.search(last_human_text(messages))
        assert found, "ask: Refund order N for <a JSON amount>"
        args = {"order_id": found.group(1), "amount": json.loads(found.group(2))}
        call = {**tool_call("issue_refund", args, "c1"), "id": f"c{len(messages)}"}
        return AIMessage(content="", tool_calls=[call])
    said = [m.text for m in messages if isinstance(m, ToolMessage)]
    return AIMessage(content=f"Done: {said[-1] if said else 'nothing'}")


def build_spelled_refund_agent(checkpointer=None):
    """The demo agent (every refund pauses: the policy decides) on a model that spells the amount
    as asked."""
    from signoff_demo.agent import build_demo_agent as shipped

    return shipped(checkpointer, model=ScriptedChatModel(script=spelled_refund))


@tool
def tag_items(items: list[int]) -> str:
    """Tag every item (a call whose list a policy's `when` reads item by item)."""
    return f"tagged {len(items)} items"


def build_tagging_agent(checkpointer=None):
    """`Tag N items`: one call of tag_items with N items, paused for approval."""

    def tag(messages):
        from langchain_core.messages import AIMessage

        if turns_since_human(messages) == 0:
            found = re.search(r"(\d+)", last_human_text(messages))
            items = list(range(int(found.group(1)) if found else 1))
            return AIMessage(
                content="", tool_calls=[tool_call("tag_items", {"items": items}, f"t{len(messages)}")]
            )
        return AIMessage(content="Tagged.")

    return create_agent(
        ScriptedChatModel(script=tag),
        tools=[tag_items],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"tag_items": True})],
        checkpointer=checkpointer,
    )


def _delegates(messages):
    """The parent: hands the request to the `editor` subagent, then reports what it said."""
    from langchain_core.messages import AIMessage, ToolMessage

    if turns_since_human(messages) == 0:
        return calls(
            tool_call("task", {"description": last_human_text(messages), "subagent_type": "editor"}, "t1")
        )
    said = [m.text for m in messages if isinstance(m, ToolMessage)]
    return AIMessage(content=f"The editor says: {said[-1] if said else 'nothing'}")


def _edits_its_own_draft(messages):
    """The `editor` subagent: writes /notes/draft.md (unasked), then edits it (paused)."""
    from langchain_core.messages import AIMessage

    turn = turns_since_human(messages)
    if turn == 0:
        draft = "# Draft\n\nShip on Monday.\nTell the team.\n"
        return calls(tool_call("write_file", {"file_path": "/notes/draft.md", "content": draft}, "w1"))
    if turn == 1:
        args = {"file_path": "/notes/draft.md", "old_string": "Monday", "new_string": "Friday"}
        return calls(tool_call("edit_file", args, "e1"))
    return AIMessage(content="Edited the draft.")


def build_editor_agent(checkpointer=None):
    """A deepagents agent whose `editor` subagent writes a draft of its own (in its own state:
    the parent's files do not have it yet) and then edits it, paused for approval."""
    from deepagents import create_deep_agent

    return create_deep_agent(
        model=ScriptedChatModel(script=_delegates),
        tools=[],
        subagents=[
            {
                "name": "editor",
                "description": "Edits files.",
                "system_prompt": "You edit files.",
                "model": ScriptedChatModel(script=_edits_its_own_draft),
                "interrupt_on": {"edit_file": {"allowed_decisions": ["approve", "reject"]}},
            }
        ],
        checkpointer=checkpointer,
        name="editor",
    )


LAUNCH = "# Launch plan\n\n- Freeze on Thursday\n- Launch on Monday\n- Tell the team\n"


def _folder_with_a_plan(name: str) -> Path:
    """A new folder holding plans/launch.md (`LAUNCH`), for a graph whose files are on disk."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix=f"signoff-{name}-"))
    (root / "plans").mkdir()
    (root / "plans" / "launch.md").write_text(LAUNCH)
    return root


def _edits_the_launch_plan(tool: str, args: dict):
    def script(messages):
        from langchain_core.messages import AIMessage, ToolMessage

        if turns_since_human(messages) == 0:
            return calls(tool_call(tool, args, "f1"))
        said = [m.text for m in messages if isinstance(m, ToolMessage)]
        return AIMessage(content=f"Done: {said[-1] if said else 'nothing'}")

    return script


def build_disk_agent(checkpointer=None):
    """A deepagents agent whose files are a folder on disk (`FilesystemBackend`): it asks to edit
    /plans/launch.md there (approve / reject)."""
    from deepagents import create_deep_agent
    from deepagents.backends import FilesystemBackend

    edit = {"file_path": "/plans/launch.md", "old_string": "Monday", "new_string": "Tuesday"}
    return create_deep_agent(
        model=ScriptedChatModel(script=_edits_the_launch_plan("edit_file", edit)),
        backend=FilesystemBackend(root_dir=_folder_with_a_plan("disk"), virtual_mode=True),
        interrupt_on={"edit_file": {"allowed_decisions": ["approve", "reject"]}},
        checkpointer=checkpointer,
        name="disk",
    )


def build_text_editor_agent(checkpointer=None):
    """A `create_agent` with Anthropic's text editor on a folder (`langchain_anthropic`): it asks
    to replace a line of /plans/launch.md there."""
    from langchain_anthropic.middleware import FilesystemClaudeTextEditorMiddleware

    edit = {"command": "str_replace", "path": "/plans/launch.md", "old_str": "Monday", "new_str": "Friday"}
    return create_agent(
        ScriptedChatModel(script=_edits_the_launch_plan("str_replace_based_edit_tool", edit)),
        middleware=[
            FilesystemClaudeTextEditorMiddleware(root_path=str(_folder_with_a_plan("editor"))),
            HumanInTheLoopMiddleware(interrupt_on={"str_replace_based_edit_tool": True}),
        ],
        checkpointer=checkpointer,
        name="text_editor",
    )
