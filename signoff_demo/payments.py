"""A stand-in payment API for the demo agent's refunds, honouring idempotency keys.

Like a real payment provider (Stripe's `Idempotency-Key`, for one), it refunds
once per key: a request repeated with the same key gets the first refund back
instead of a second one. Every request is written to a JSON-lines ledger
(`SIGNOFF_DEMO_PAYMENTS`, else kept in memory), so tests can count both what
was asked and what was done. `SIGNOFF_DEMO_PAYMENTS_LATENCY_S` makes the API
answer that long *after* the refund went through: the window in which a
crash loses the tool's result but not its effect.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

_memory: list[dict[str, Any]] = []


def refund(order_id: str, amount: int, idempotency_key: str) -> str:
    """Refund `amount` on `order_id` once per key; returns the refund's id."""
    path = os.environ.get("SIGNOFF_DEMO_PAYMENTS")
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+") as ledger:
            fcntl.flock(ledger, fcntl.LOCK_EX)
            ledger.seek(0)
            entries = [json.loads(line) for line in ledger if line.strip()]
            refund_id, entry = _apply(entries, order_id, amount, idempotency_key)
            ledger.write(json.dumps(entry) + "\n")
    else:
        refund_id, entry = _apply(_memory, order_id, amount, idempotency_key)
        _memory.append(entry)
    time.sleep(float(os.environ.get("SIGNOFF_DEMO_PAYMENTS_LATENCY_S", "0")))
    return refund_id


def _apply(entries: list[dict[str, Any]], order_id: str, amount: int, key: str) -> tuple[str, dict[str, Any]]:
    earlier = next((e for e in entries if e["key"] == key and e["effect"] == "refunded"), None)
    if earlier:
        return earlier["refund_id"], {**earlier, "effect": "replayed", "at": time.time()}
    refund_id = f"re_{uuid.uuid4().hex[:12]}"
    return refund_id, {
        "key": key,
        "order_id": order_id,
        "amount": amount,
        "refund_id": refund_id,
        "effect": "refunded",
        "at": time.time(),
    }


def ledger(path: str | Path) -> list[dict[str, Any]]:
    """Every request the API got, in order."""
    file = Path(path)
    return (
        [json.loads(line) for line in file.read_text().splitlines() if line.strip()] if file.exists() else []
    )
