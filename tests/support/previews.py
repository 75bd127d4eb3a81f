"""Preview hooks the tests name (`SIGNOFF_PREVIEWS`): what a team would write for its own tools."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any


async def rendered_email(call: dict[str, Any], state: Mapping[str, Any]) -> dict[str, str]:
    """The email as its reader will get it (Markdown), and how long the conversation is."""
    args = call["args"]
    said = len(state.get("messages", []))
    return {
        "kind": "markdown",
        "summary": f"an email to {args.get('to')}",
        "text": f"**To**: {args.get('to')}\n**Subject**: {args.get('subject')}\n\n{args.get('body')}\n\n"
        f"_({said} messages in this conversation)_",
    }


def slow(call: dict[str, Any], state: Mapping[str, Any]) -> str:
    """Takes SIGNOFF_TEST_PREVIEW_SECONDS (a plan from a slow service)."""
    import time

    time.sleep(float(os.environ.get("SIGNOFF_TEST_PREVIEW_SECONDS", "3")))
    return "too late to be shown"


async def broken(call: dict[str, Any], state: Mapping[str, Any]) -> str:
    """Fails, as a hook with a bug does."""
    await asyncio.sleep(0)
    raise RuntimeError("the plan service said no")
