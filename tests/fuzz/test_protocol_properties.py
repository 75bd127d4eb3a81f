"""`check_resume` agrees with the real HITL middleware.

Hypothesis builds resume payloads from the parts people and scripts get wrong
(old names like `accept`, bare lists, `action` for `edited_action`, missing
messages, wrong counts, other tools) and each one is sent to a real agent
paused on a fresh thread: every payload the protocol accepts resumes without
error, and every payload it refuses makes the middleware (or LangGraph's
`response_schema` check) raise.

Outside this domain the protocol is stricter on purpose, and says so in
`core/protocol.py`: an edit naming another existing tool, edited args
that break the tool's schema, and non-text messages are refused although the
middleware would pass them on. `test_protocol.py` covers those.
"""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from agent_runner.runner import tool_schemas
from core.protocol import DecisionRefused, PendingRequest, check_resume
from tests.support.agents import EMAIL, REFUND, WRITE, hitl_agent, scripted

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

BATCHED_AGENT = hitl_agent(
    scripted(WRITE, EMAIL),
    {"write_file": True, "send_email": {"allowed_decisions": ["approve", "reject"]}},
    InMemorySaver(),
)
PER_CALL_AGENT = hitl_agent(scripted(REFUND), {"issue_refund": True}, InMemorySaver(), mode="per_call")

text = st.text(alphabet="abc /._-", max_size=12)


def well_formed(tool: str, args):
    """Decisions the middleware understands (some not allowed for every tool)."""
    return st.one_of(
        st.just({"type": "approve"}),
        st.fixed_dictionaries({"type": st.just("reject")}, optional={"message": text}),
        st.fixed_dictionaries({"type": st.just("respond"), "message": text}),
        st.fixed_dictionaries(
            {
                "type": st.just("edit"),
                "edited_action": st.fixed_dictionaries({"name": st.just(tool), "args": args}),
            }
        ),
    )


def malformed(tool: str, args):
    """What people and scripts get wrong: old names, misspelt keys, missing parts."""
    action = st.fixed_dictionaries({"name": st.sampled_from([tool, "no_such_tool"]), "args": args})
    return st.one_of(
        st.fixed_dictionaries(
            {"type": st.sampled_from(["accept", "Approve", "", "ok"])}, optional={"message": text}
        ),
        st.just({"type": "respond"}),
        st.just({}),
        st.fixed_dictionaries({"type": st.just("edit"), "action": action}),
        st.fixed_dictionaries({"type": st.just("edit"), "edited_action": action}),
        st.fixed_dictionaries(
            {"type": st.just("edit"), "edited_action": st.fixed_dictionaries({"args": args})}
        ),
        st.fixed_dictionaries(
            {"type": st.just("edit"), "edited_action": st.fixed_dictionaries({"name": st.just(tool)})}
        ),
        st.fixed_dictionaries(
            {
                "type": st.just("edit"),
                "edited_action": st.fixed_dictionaries({"name": st.just(tool), "args": text}),
            }
        ),
        st.sampled_from(["approve", None, 1, []]),
    )


def decisions(tool: str, args):
    # Mostly well formed, so that accepted sets are common and the allowed-decision
    # and count rules are what tells them apart.
    return st.one_of(well_formed(tool, args), well_formed(tool, args), malformed(tool, args))


write_args = st.fixed_dictionaries({"path": text, "content": text})
refund_args = st.fixed_dictionaries(
    {"order_id": text, "amount": st.one_of(st.integers(-10, 10_000), st.sampled_from(["lots", None, [1]]))}
)
pairs = st.tuples(decisions("write_file", write_args), decisions("send_email", write_args)).map(list)
batched_payloads = st.one_of(
    pairs.map(lambda pair: {"decisions": pair}),
    pairs.map(lambda pair: {"decisions": pair}),
    st.lists(decisions("write_file", write_args), max_size=3).map(lambda some: {"decisions": some}),
    pairs,
    pairs.map(lambda pair: {"decision": pair}),
)


def outcome_of(agent, payload_for) -> tuple[bool, bool]:
    """(protocol accepted, real agent resumed without raising) on a fresh pause."""
    config = {"configurable": {"thread_id": uuid.uuid4().hex}}
    (paused,) = agent.invoke(
        {"messages": [{"role": "user", "content": "go"}]}, config, version="v2"
    ).interrupts
    request = PendingRequest.from_interrupt(paused, tool_schemas(agent))
    payload = payload_for(paused.id)
    try:
        check_resume(request, payload[paused.id])
        accepted = True
    except DecisionRefused:
        accepted = False
    try:
        agent.invoke(Command(resume=payload), config, version="v2")
        resumed = True
    except Exception:
        resumed = False
    event("accepted" if accepted else "refused")
    return accepted, resumed


@SETTINGS
@given(batched_payloads)
def test_batched_verdicts_match_the_middleware(payload):
    accepted, resumed = outcome_of(BATCHED_AGENT, lambda interrupt_id: {interrupt_id: payload})
    assert accepted == resumed


@SETTINGS
@given(decisions("issue_refund", refund_args))
def test_per_call_verdicts_match_langgraph(decision):
    accepted, resumed = outcome_of(PER_CALL_AGENT, lambda interrupt_id: {interrupt_id: decision})
    assert accepted == resumed
