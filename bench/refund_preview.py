"""A preview hook for `bench/click_ack.py --features`: what a refund will do, as a payments team's
hook would say it (the order's line, the amount, the balance after), made when the card is."""

from __future__ import annotations

from typing import Any


def refund(call: dict[str, Any], state: Any) -> dict[str, str]:
    """issue_refund: the refund as the customer's statement will show it."""
    args = call["args"]
    lines = [f"Order {args.get('order_id')}: refund of {args.get('amount')} cents to the card on file"]
    lines += [f"  line {n}: item {n} of the order, kept" for n in range(1, 9)]
    return {"kind": "text", "summary": f"refunds {args.get('amount')} cents", "text": "\n".join(lines)}
