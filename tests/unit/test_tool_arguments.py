"""A call is judged as its tool will receive it: the runner checks and converts its arguments with
the tool's own schema before the policy sees them (a refund's amount sent as text is the number
the tool refunds), and says why the schema refuses what the tool would fail on."""

from __future__ import annotations

from decimal import Decimal

from langchain_core.tools import StructuredTool, tool
from pydantic import BaseModel, field_validator

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


class CentsArgs(BaseModel):
    """The payment API takes cents; the model is told dollars."""

    order_id: str
    amount: int

    @field_validator("amount")
    @classmethod
    def to_cents(cls, value: int) -> int:
        return value * 100


def test_a_tool_is_judged_by_the_schema_it_runs_on_its_validators_included():
    refund = StructuredTool.from_function(
        lambda order_id, amount: "ok", name="issue_refund", description="Refund.", args_schema=CentsArgs
    )

    assert as_received(refund, {"order_id": "7", "amount": 50}) == ({"order_id": "7", "amount": 5000}, None)


def test_a_decimal_is_judged_as_the_number_it_is():
    @tool
    def pay(order_id: str, amount: Decimal) -> str:
        """Pay."""
        return "ok"

    assert as_received(pay, {"order_id": "7", "amount": "50.5"}) == ({"order_id": "7", "amount": 50.5}, None)
    assert as_received(pay, {"order_id": "7", "amount": "50"}) == ({"order_id": "7", "amount": 50}, None)
