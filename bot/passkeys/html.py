"""The passkey pages' HTML (pure functions): a step-up page showing the call as the card did, an
enrolment page listing a person's passkeys, a page that only says something. Everything from an
agent or a person is escaped (`html.escape`); the WebAuthn options travel as JSON in a
`<script type="application/json">` block (with `<`, `>`, `&` escaped, so no text closes it); the
only script is Signoff's own, allowed by a per-page nonce in the Content-Security-Policy."""

from __future__ import annotations

import html
import json
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.store.passkeys import Passkey

STATIC = Path(__file__).with_name("static")
STYLE = (STATIC / "page.css").read_text(encoding="utf-8")
SCRIPT = (STATIC / "page.js").read_text(encoding="utf-8")


def _json_block(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page(title: str, body: str, options: Any = None) -> tuple[str, str]:
    """(the page, its script nonce): the nonce goes into the response's Content-Security-Policy."""
    nonce = secrets.token_urlsafe(16)
    script = (
        f'<script type="application/json" id="options">{_json_block(options or {})}</script>'
        f'<script nonce="{nonce}">{SCRIPT}</script>'
    )
    text = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f'<title>{html.escape(title)} · Signoff</title><style nonce="{nonce}">{STYLE}</style></head>'
        f'<body><main><h1>{html.escape(title)}</h1>{body}<p id="said" role="status"></p></main>'
        f"{script}</body></html>"
    )
    return text, nonce


def call_html(tool: str, summary: str, args: Any) -> str:
    """One call as the card shows it: its tool, its summary line, its arguments (masked as on
    the card), every character escaped."""
    shown = json.dumps(args, indent=2, ensure_ascii=False, sort_keys=True)
    line = f"<div>{html.escape(summary)}</div>" if summary else ""
    return f'<div class="call"><div class="tool">{html.escape(tool)}</div>{line}<pre>{html.escape(shown)}</pre></div>'


def step_up_body(user: str, calls: list[str], has_passkey: bool) -> str:
    """The step-up page's body: what the passkey approves, and the one button."""
    intro = (
        f"<p>Sent to <b>{html.escape(user)}</b> in Slack. Your passkey approves exactly this, as the "
        "card showed it, and nothing else:</p>"
    )
    if not has_passkey:
        return (
            intro
            + "".join(calls)
            + (
                '<p class="warn">You have no passkey yet: type <b>/signoff passkey</b> in Slack '
                "to add one, then click Approve on the card again. Nothing was recorded.</p>"
            )
        )
    return (
        intro
        + "".join(calls)
        + (
            '<button id="go" type="button">Approve with your passkey</button>'
            '<p class="note">The link works once, for 5 minutes. Nothing is recorded until your passkey says so.</p>'
        )
    )


def enrol_body(user: str, passkeys: list[Passkey]) -> str:
    """The enrolment page's body: the person's passkeys (each removable) and a way to add one."""
    items = "".join(
        f'<li><span>{html.escape(p.label or "Passkey")} <span class="note">added '
        f"{datetime.fromtimestamp(p.created_at, UTC):%Y-%m-%d %H:%M} UTC</span></span>"
        f'<button class="quiet" type="button" data-remove="{html.escape(p.credential_id)}">Remove</button></li>'
        for p in passkeys
    )
    listed = f"<ul>{items}</ul>" if passkeys else '<p class="note">You have no passkey yet.</p>'
    return (
        f"<p>Passkeys of <b>{html.escape(user)}</b>: a rule may ask you to confirm an approval with one.</p>"
        f'{listed}<p><label for="label">Name it (which device)</label>'
        '<input id="label" maxlength="60" value="This device"></p>'
        '<button id="go" type="button">Add a passkey</button>'
    )


def words_page(title: str, text: str) -> tuple[str, str]:
    """A page that only says something (a link expired, an approval closed meanwhile)."""
    return page(title, f"<p>{html.escape(text)}</p>")
