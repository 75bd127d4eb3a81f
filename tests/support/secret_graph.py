"""An agent whose one call carries secrets of every kind Signoff hides: an API key (by its
argument's name and its shape), an Authorization header holding a BEARER_JWT (a header list, by the
header's name), a customer's card number (only the policy's `redact` knows it), beside plain
arguments; and an answer that repeats the key. Its tool writes what it received to a ledger."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.tools import tool

from signoff_demo.scripted_model import ScriptedChatModel, calls, tool_call

PAYMENTS_KEY = "sk-proj-Zq8mN3vR5tY7wK2pL9xB4cD6"
BEARER_JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhZ2VudC0xIiwiZXhwIjoxOTk5OTk5OTk5fQ."
    "c2lnbmF0dXJlLW9mLXRoZS10b2tlbi1vaw"
)
CARD_NUMBER = "4111111111111111"
SECRETS = (PAYMENTS_KEY, BEARER_JWT, CARD_NUMBER)
ARGS: dict[str, Any] = {
    "url": "https://payments.example.com/v1/charges",
    "api_key": PAYMENTS_KEY,
    "headers": [
        {"name": "Authorization", "value": f"Bearer {BEARER_JWT}"},
        {"name": "Accept", "value": "json"},
    ],
    "customer": {"name": "Ada Lovelace", "card_number": CARD_NUMBER},
    "note": "ticket 4411",
}
REDACT = 'redact = ["args.customer.card_number"]'


@tool
def charge(url: str, api_key: str, headers: list[dict[str, str]], customer: dict[str, str], note: str) -> str:
    """Charge a customer's card through a payments API."""
    path = os.environ.get("SIGNOFF_TEST_LEDGER")
    if path:
        received = {"url": url, "api_key": api_key, "headers": headers, "customer": customer, "note": note}
        with Path(path).open("a") as out:
            out.write(json.dumps(received) + "\n")
    return f"charged {customer.get('name')}"


def build_secret_agent(checkpointer=None):
    model = ScriptedChatModel(
        turns=[
            calls(tool_call("charge", ARGS, "c1")),
            calls(content=f"Charged Ada, with the key {PAYMENTS_KEY} as asked."),
        ]
    )
    return create_agent(
        model,
        tools=[charge],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"charge": True})],
        checkpointer=checkpointer,
    )
