"""The approval protocol reads every pause shape and explains every refusal."""

from __future__ import annotations

import uuid

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

from agent_runner.runner import tool_schemas
from core.protocol import (
    ActionReview,
    DecisionRefused,
    PendingRequest,
    RequestKind,
    check_resume,
    preview_args,
)
from tests.support.agents import EMAIL, REFUND, WRITE, hitl_agent, scripted

ONLY_APPROVE_REJECT = {"allowed_decisions": ["approve", "reject"]}


def interrupts_of(agent, text="go"):
    config = {"configurable": {"thread_id": uuid.uuid4().hex}}
    return agent.invoke({"messages": [{"role": "user", "content": text}]}, config, version="v2").interrupts


@pytest.fixture(scope="module")
def batched() -> PendingRequest:
    agent = hitl_agent(
        scripted(WRITE, EMAIL), {"write_file": True, "send_email": ONLY_APPROVE_REJECT}, InMemorySaver()
    )
    (found,) = interrupts_of(agent)
    return PendingRequest.from_interrupt(found, tool_schemas(agent))


@pytest.fixture(scope="module")
def per_call() -> list[PendingRequest]:
    agent = hitl_agent(
        scripted(EMAIL, REFUND),
        {"send_email": ONLY_APPROVE_REJECT, "issue_refund": True},
        InMemorySaver(),
        mode="per_call",
    )
    return [PendingRequest.from_interrupt(i) for i in interrupts_of(agent)]


def test_batched_request_lists_actions_in_order_with_their_rules(batched):
    assert batched.kind is RequestKind.BATCHED
    assert [a.name for a in batched.actions] == ["write_file", "send_email"]
    assert batched.actions[0].allowed_decisions == ("approve", "edit", "reject", "respond")
    assert batched.actions[1].allowed_decisions == ("approve", "reject")
    assert batched.actions[0].args == {"path": "/notes/a.md", "content": "hello"}
    assert batched.actions[0].args_schema["required"] == ["path", "content"]


def test_per_call_request_reads_allowed_decisions_and_args_schema_from_response_schema(per_call):
    by_tool = {r.actions[0].name: r for r in per_call}
    email, refund = by_tool["send_email"], by_tool["issue_refund"]
    assert email.kind is RequestKind.PER_CALL
    assert email.actions[0].allowed_decisions == ("approve", "reject")
    assert email.actions[0].args_schema is None
    assert refund.actions[0].allowed_decisions == ("approve", "edit", "reject", "respond")
    assert refund.actions[0].args_schema["properties"]["amount"]["type"] == "integer"
    assert refund.actions[0].tool_call_id == "c2"


def test_any_other_interrupt_is_a_question():
    class State(TypedDict):
        answer: str

    def ask(state: State) -> State:
        return {"answer": interrupt("Which budget code should I use?")}

    graph = (
        StateGraph(State).add_node("ask", ask).add_edge(START, "ask").compile(checkpointer=InMemorySaver())
    )
    config = {"configurable": {"thread_id": "q"}}
    (found,) = graph.invoke({"answer": ""}, config, version="v2").interrupts

    request = PendingRequest.from_interrupt(found)

    assert request.kind is RequestKind.QUESTION
    assert request.question == "Which budget code should I use?"
    assert check_resume(request, "BX-12") == "BX-12"


def refusal(request, payload) -> str:
    with pytest.raises(DecisionRefused) as refused:
        check_resume(request, payload)
    return str(refused.value)


@pytest.mark.parametrize(
    "payload, reason",
    [
        (
            [{"type": "approve"}, {"type": "approve"}],
            'send {"decisions": [...]}, not a bare list of decisions',
        ),
        ({"decisions": [{"type": "approve"}]}, "expected 2 decision(s), one per action in order, got 1"),
        (
            {"decisions": [{"type": "accept"}, {"type": "approve"}]},
            "action 1 (write_file): 'accept' is not a decision; use approve, edit, reject or respond "
            "(the type is 'approve', not 'accept')",
        ),
        (
            {
                "decisions": [
                    {"type": "approve"},
                    {"type": "edit", "edited_action": {"name": "send_email", "args": {}}},
                ]
            },
            "action 2 (send_email): edit is not allowed for send_email; allowed: approve, reject",
        ),
        (
            {
                "decisions": [
                    {"type": "edit", "action": {"name": "write_file", "args": {}}},
                    {"type": "approve"},
                ]
            },
            "action 1 (write_file): an edit carries the new call as edited_action: {name, args}",
        ),
        (
            {
                "decisions": [
                    {"type": "edit", "edited_action": {"name": "send_email", "args": {}}},
                    {"type": "approve"},
                ]
            },
            "action 1 (write_file): an edit cannot change the tool (write_file -> send_email)",
        ),
        (
            {
                "decisions": [
                    {"type": "edit", "edited_action": {"name": "write_file", "args": {"path": 5}}},
                    {"type": "approve"},
                ]
            },
            "action 1 (write_file): 'content' is a required property; "
            "action 1 (write_file): path: 5 is not of type 'string'",
        ),
        (
            {"decisions": [{"type": "respond"}, {"type": "approve"}]},
            "action 1 (write_file): respond needs a message: the text the agent gets as the tool's result",
        ),
        (
            {"decisions": [{"type": "approve"}, {"type": "reject", "message": 42}]},
            "action 2 (send_email): a reject reason must be text",
        ),
        ({"decision": []}, 'a batched pause is answered with {"decisions": [...]}'),
    ],
)
def test_refusals_say_what_is_wrong(batched, payload, reason):
    assert refusal(batched, payload) == reason


def test_accepted_set_is_sent_clean_and_in_request_order(batched):
    payload = {
        "decisions": [
            {
                "type": "edit",
                "edited_action": {"name": "write_file", "args": {"path": "/b.md", "content": "x"}},
                "note": "ignored",
            },
            {"type": "reject", "message": "not today"},
        ]
    }
    assert check_resume(batched, payload) == {
        "decisions": [
            {
                "type": "edit",
                "edited_action": {"name": "write_file", "args": {"path": "/b.md", "content": "x"}},
            },
            {"type": "reject", "message": "not today"},
        ]
    }


def test_per_call_edit_is_checked_against_the_tools_schema(per_call):
    refund = next(r for r in per_call if r.actions[0].name == "issue_refund")
    bad = {
        "type": "edit",
        "edited_action": {"name": "issue_refund", "args": {"order_id": "o1", "amount": "lots"}},
    }
    good = {
        "type": "edit",
        "edited_action": {"name": "issue_refund", "args": {"order_id": "o1", "amount": 50}},
    }

    assert refusal(refund, bad) == "issue_refund: amount: 'lots' is not of type 'integer'"
    assert check_resume(refund, good) == good


def test_a_question_is_not_approved():
    request = PendingRequest(interrupt_id="i", kind=RequestKind.QUESTION, question="Budget?")
    schema_request = request.model_copy(update={"answer_schema": {"type": "integer"}})

    assert refusal(schema_request, "ten") == "the answer does not fit: 'ten' is not of type 'integer'"
    assert check_resume(schema_request, 10) == 10


def test_long_arguments_are_previewed_with_their_length():
    action = ActionReview(
        name="write_file",
        args={"path": "/a.md", "content": "x" * 10_000, "n": [1, 2]},
        allowed_decisions=("approve",),
    )
    path, content, numbers = preview_args(action.args, limit=200)

    assert (path.text, path.cut) == ("/a.md", False)
    assert content.length == 10_000 and content.cut and len(content.text) == 200
    assert content.text.endswith("…")
    assert numbers.text == "[1, 2]"


def test_requests_round_trip_through_json(batched):
    assert PendingRequest.model_validate_json(batched.model_dump_json()) == batched
