"""A call is judged as its tool will receive it: the runner checks and converts its arguments with
the tool's own schema before the policy sees them (a refund's amount sent as text is the number
the tool refunds), and says why the schema refuses what the tool would fail on."""

from __future__ import annotations

from agent_runner.runner import as_received, tools_of
from core.protocol import ActionReview, PendingRequest, RequestKind
from core.records import Run, approval_for
from signoff_demo.agent import build_demo_agent


def test_the_demo_refund_tool_receives_an_amount_sent_as_text_as_a_number_and_refuses_a_list():
    refund = tools_of(build_demo_agent())["issue_refund"]

    assert as_received(refund, {"order_id": "7", "amount": "50000"}) == (
        {"order_id": "7", "amount": 50000},
        None,
    )
    assert as_received(refund, {"order_id": "7", "amount": 5.0}) == ({"order_id": "7", "amount": 5}, None)
    assert as_received(refund, {"order_id": "7", "amount": [50000]}) == (
        None,
        "amount: Input should be a valid integer",
    )
    received, refused = as_received(refund, {"order_id": 7, "amount": float("nan")})
    assert received is None and refused is not None
    assert refused.split("; ") == [
        "order_id: Input should be a valid string",
        "amount: Input should be a finite number",
    ]


def test_the_policy_sees_the_arguments_as_received_and_the_card_keeps_them_as_sent():
    action = ActionReview(
        name="issue_refund",
        args={"order_id": "7", "amount": "50000"},
        allowed_decisions=("approve", "reject"),
        received={"order_id": "7", "amount": 50000},
    )
    request = PendingRequest(interrupt_id="i-1", kind=RequestKind.BATCHED, actions=(action,))
    approval = approval_for(request, Run(thread_id="t-1", graph="demo", channel="C0OPS"), "demo")

    assert approval.calls()[0].args == {"order_id": "7", "amount": 50000}
    assert approval.request.actions[0].args == {"order_id": "7", "amount": "50000"}
