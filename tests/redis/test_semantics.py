"""`hitl-semantics.md`, line by line, through the runner on the project's saver.

Real agents (langchain `create_agent`, deepagents `create_deep_agent`) on
scripted models, a real Redis, and every resume going through the protocol's
checks as it will in production.
"""

from __future__ import annotations

import re

import pytest
from deepagents import create_deep_agent
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from agent_runner.checkpointer import AsyncRedisCheckpointer
from agent_runner.runner import Runner, StaleAnswer
from core.protocol import DecisionRefused, RequestKind
from core.records import RunState
from signoff_demo.agent import SELF_GATED, build_self_gated_agent
from signoff_demo.scripted_model import ScriptedChatModel
from tests.support.agents import EMAIL, WRITE, hitl_agent, scripted

REJECT_NO_REASON = (
    "User rejected the tool call for `write_file` with id c0. The tool was not executed. "
    "Do not retry this tool call unless the user explicitly requests it."
)


@pytest.fixture
async def saver(redis_url):
    async with AsyncRedisCheckpointer.from_conn_string(redis_url) as instance:
        await instance.asetup()
        yield instance


def write_runner(saver, **rules):
    interrupt_on = {"write_file": True, "send_email": {"allowed_decisions": ["approve", "reject"]}, **rules}
    return Runner(hitl_agent(scripted(WRITE), interrupt_on, saver))


async def messages(runner: Runner, thread_id: str):
    state = await runner.graph.aget_state({"configurable": {"thread_id": thread_id}})
    return state.values["messages"]


async def tool_messages(runner, thread_id):
    return [m for m in await messages(runner, thread_id) if isinstance(m, ToolMessage)]


async def decide(runner: Runner, thread_id: str, *decisions):
    (request,) = await runner.pending(thread_id)
    return await runner.resume(thread_id, {request.interrupt_id: {"decisions": list(decisions)}})


async def test_pause_happens_before_any_tool_code(saver, thread_id):
    runner = write_runner(saver)
    outcome = await runner.start(thread_id, "write the note")

    assert outcome.state is RunState.WAITING
    state = await runner.graph.aget_state({"configurable": {"thread_id": thread_id}})
    assert state.next == ("HumanInTheLoopMiddleware.after_model",)
    assert await tool_messages(runner, thread_id) == []


async def test_approve_runs_the_tool_with_the_original_args(saver, thread_id):
    runner = write_runner(saver)
    await runner.start(thread_id, "write the note")

    outcome = await decide(runner, thread_id, {"type": "approve"})

    assert outcome.state is RunState.FINISHED
    (result,) = await tool_messages(runner, thread_id)
    assert result.content == "wrote 5 chars to /notes/a.md"


async def test_edit_runs_the_edited_args_and_the_model_keeps_the_original_call(saver, thread_id):
    runner = write_runner(saver)
    await runner.start(thread_id, "write the note")
    edited = {"name": "write_file", "args": {"path": "/notes/b.md", "content": "edited!"}}

    await decide(runner, thread_id, {"type": "edit", "edited_action": edited})

    history = await messages(runner, thread_id)
    ai_call = next(m for m in history if isinstance(m, AIMessage) and m.tool_calls)
    (result,) = [m for m in history if isinstance(m, ToolMessage)]
    # langchain 1.5: the AIMessage keeps the model's call; the ToolMessage says what ran.
    assert ai_call.tool_calls[0]["args"] == {"path": "/notes/a.md", "content": "hello"}
    assert result.content.startswith("Note: a human reviewer replaced this tool call before it ran.")
    assert (
        'Executed instead: write_file with arguments {"path": "/notes/b.md", "content": "edited!"}'
        in result.content
    )
    assert result.content.endswith("wrote 7 chars to /notes/b.md")


async def test_reject_without_reason_says_do_not_retry(saver, thread_id):
    runner = write_runner(saver)
    await runner.start(thread_id, "write the note")

    await decide(runner, thread_id, {"type": "reject"})

    (result,) = await tool_messages(runner, thread_id)
    assert result.content == REJECT_NO_REASON
    assert result.status == "error"


async def test_reject_with_reason_passes_the_reason_without_do_not_retry(saver, thread_id):
    runner = write_runner(saver)
    await runner.start(thread_id, "write the note")

    await decide(runner, thread_id, {"type": "reject", "message": "wrong folder, use /docs"})

    (result,) = await tool_messages(runner, thread_id)
    assert (
        result.content == "User rejected the tool call for `write_file` with reason: wrong folder, use /docs"
    )


async def test_respond_returns_the_message_verbatim_as_a_successful_result(saver, thread_id):
    runner = write_runner(saver)
    await runner.start(thread_id, "write the note")

    await decide(
        runner, thread_id, {"type": "respond", "message": "The note exists already: see /notes/old.md"}
    )

    (result,) = await tool_messages(runner, thread_id)
    assert result.content == "The note exists already: see /notes/old.md"
    assert result.status == "success"


async def test_batch_of_two_with_approve_and_reject(saver, thread_id):
    runner = Runner(hitl_agent(scripted(WRITE, EMAIL), {"write_file": True, "send_email": True}, saver))
    outcome = await runner.start(thread_id, "write and email")
    assert [a.name for a in outcome.pending[0].actions] == ["write_file", "send_email"]

    await decide(runner, thread_id, {"type": "approve"}, {"type": "reject", "message": "not yet"})

    results = {m.tool_call_id: m.content for m in await tool_messages(runner, thread_id)}
    assert results == {
        "c0": "wrote 5 chars to /notes/a.md",
        "c1": "User rejected the tool call for `send_email` with reason: not yet",
    }


async def test_only_allowed_decisions_pass_and_a_refusal_changes_nothing(saver, thread_id):
    agent = hitl_agent(scripted(EMAIL), {"send_email": {"allowed_decisions": ["approve", "reject"]}}, saver)
    runner = Runner(agent)
    outcome = await runner.start(thread_id, "email")
    (request,) = outcome.pending
    assert request.actions[0].allowed_decisions == ("approve", "reject")

    with pytest.raises(DecisionRefused, match="respond is not allowed for send_email"):
        await runner.resume(
            thread_id, {request.interrupt_id: {"decisions": [{"type": "respond", "message": "x"}]}}
        )

    assert [r.interrupt_id for r in await runner.pending(thread_id)] == [request.interrupt_id]
    outcome = await runner.resume(thread_id, {request.interrupt_id: {"decisions": [{"type": "approve"}]}})
    assert outcome.state is RunState.FINISHED
    assert [m.content for m in await tool_messages(runner, thread_id)] == ["sent to a@acme.com"]


async def test_an_unchecked_bad_resume_poisons_the_thread(saver, thread_id):
    """Why the protocol exists: with langgraph 1.2 a refused resume is saved first."""
    runner = write_runner(saver)
    await runner.start(thread_id, "write the note")
    config = {"configurable": {"thread_id": thread_id}}

    with pytest.raises(ValueError, match="Decision type 'accept' is not allowed"):
        await runner.graph.ainvoke(Command(resume={"decisions": [{"type": "accept"}]}), config)
    with pytest.raises(ValueError, match="Decision type 'accept' is not allowed"):
        await runner.graph.ainvoke(Command(resume={"decisions": [{"type": "approve"}]}), config)


@pytest.mark.parametrize("amount, pauses", [(500, False), (5000, True)])
async def test_when_predicate_pauses_only_big_refunds(saver, thread_id, amount, pauses):
    runner = Runner(build_self_gated_agent(saver), "demo")

    outcome = await runner.start(thread_id, f"Refund order 1234 for {amount}")

    assert (outcome.state is RunState.WAITING) == pauses
    if not pauses:
        assert outcome.answer == f"Here is what I did:\n- ✅ Refunded {amount} on order 1234"


async def test_subagent_pause_surfaces_at_the_top_and_one_resume_finishes_the_chain(saver, thread_id):
    runner = Runner(build_self_gated_agent(saver), "demo")

    outcome = await runner.start(thread_id, "Ask the bookkeeper to refund order 77 for 2500")

    assert outcome.state is RunState.WAITING
    (request,) = outcome.pending
    assert request.actions[0].name == "issue_refund"
    assert request.actions[0].args == {"order_id": "77", "amount": 2500}
    outcome = await runner.resume(thread_id, {request.interrupt_id: {"decisions": [{"type": "approve"}]}})
    assert outcome.state is RunState.FINISHED
    assert "Refunded 2500 on order 77" in outcome.answer


async def test_per_call_mode_pauses_per_call_and_resumes_keyed_by_interrupt_id(saver, thread_id):
    agent = hitl_agent(
        scripted(WRITE, EMAIL),
        {"write_file": True, "send_email": {"allowed_decisions": ["approve", "reject"]}},
        saver,
        mode="per_call",
    )
    runner = Runner(agent)
    outcome = await runner.start(thread_id, "write and email")
    by_tool = {r.actions[0].name: r for r in outcome.pending}
    assert {r.kind for r in outcome.pending} == {RequestKind.PER_CALL}
    assert by_tool["send_email"].actions[0].allowed_decisions == ("approve", "reject")

    outcome = await runner.resume(
        thread_id,
        {
            by_tool["write_file"].interrupt_id: {"type": "approve"},
            by_tool["send_email"].interrupt_id: {"type": "reject", "message": "hold it"},
        },
    )

    assert outcome.state is RunState.FINISHED
    results = {m.tool_call_id: m.content for m in await tool_messages(runner, thread_id)}
    assert results == {
        "c0": "wrote 5 chars to /notes/a.md",
        "c1": "User rejected the tool call for `send_email` with reason: hold it",
    }


async def test_write_file_rule_and_description_follow_the_seed(saver, thread_id):
    runner = Runner(build_self_gated_agent(saver), "demo")
    scratch = await runner.start(thread_id + "-a", 'Write "x" to /drafts/plan.md')
    body = "word " * 100
    outcome = await runner.start(thread_id, f'Write "{body}" to /plans/launch.md')

    assert scratch.state is RunState.FINISHED
    (action,) = outcome.pending[0].actions
    assert action.allowed_decisions == ("approve", "edit", "reject")
    assert action.description.startswith(f"Write {len(body)} characters to /plans/launch.md:\n")
    assert action.description.endswith(body[:200] + "…")
    assert set(SELF_GATED) == {"send_email", "issue_refund", "delete", "write_file", "edit_file"}


async def test_unknown_interrupt_ids_are_refused_before_langgraph(saver, thread_id):
    runner = write_runner(saver)
    await runner.start(thread_id, "write the note")

    with pytest.raises(StaleAnswer):
        await runner.resume(thread_id, {"0" * 32: {"decisions": [{"type": "approve"}]}})
    assert len(await runner.pending(thread_id)) == 1


async def test_a_deepagents_model_failure_is_an_outcome_not_a_crash(saver, thread_id):
    def broken(messages):
        raise RuntimeError("model provider is down")

    runner = Runner(create_deep_agent(model=ScriptedChatModel(script=broken), checkpointer=saver))

    outcome = await runner.start(thread_id, "hello")

    assert outcome.state is RunState.FAILED
    # What Slack will show: the type and a reference to the log line with the details.
    assert re.fullmatch(r"RuntimeError — details in the logs, ref [0-9a-f]{8}", outcome.error)


async def test_a_plain_interrupt_is_answered_with_text(saver, thread_id):
    class Budget(TypedDict):
        code: str

    def ask(state: Budget) -> Budget:
        return {"code": interrupt("Which budget code should I use?")}

    graph = StateGraph(Budget).add_node("ask", ask).add_edge(START, "ask").compile(checkpointer=saver)
    runner = Runner(graph, "budget")
    outcome = await runner.start(thread_id, "go", code="")
    (request,) = outcome.pending
    assert request.kind is RequestKind.QUESTION

    outcome = await runner.resume(thread_id, {request.interrupt_id: "BX-12"})

    assert outcome.state is RunState.FINISHED
    state = await graph.aget_state({"configurable": {"thread_id": thread_id}})
    assert state.values["code"] == "BX-12"


async def test_the_origin_of_a_pause_names_the_subagent(saver, thread_id):
    runner = Runner(build_self_gated_agent(saver), "demo")

    sub = await runner.start(thread_id, "Ask the bookkeeper to refund order 77 for 2500")
    top = await runner.start(thread_id + "-top", "Refund order 5 for 5000")

    assert list(sub.origins.values()) == ["subagent bookkeeper"]
    assert list(top.origins.values()) == ["demo"]
