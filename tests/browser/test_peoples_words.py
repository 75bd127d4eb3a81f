"""What people are told, read in a real browser at phone and desktop size: after each outcome
(approve, quorum, edit, reject with a reason, respond, expiry, withdraw) the card's text (what a
notification shows), its header, the notices and the run's thread say it in words; Riley, who
asks, hears once per request, of its outcome; nobody is asked to confirm before being checked.
The same for the demo agent on a local Agent Server."""

from __future__ import annotations

import pytest
from playwright.async_api import Page, expect

from signoff_demo.page import POLICY
from tests.support.browser import (
    HAS_CHROMIUM,
    VIEWPORTS,
    add_passkey,
    approve_with_passkey,
    as_user,
    ask,
    card,
    confirm,
    demo_page,
    notifications,
    passkey_tab,
    shot,
    thread_of,
)

pytestmark = [
    pytest.mark.skipif(not HAS_CHROMIUM, reason="make test installs chromium; run it via make"),
    pytest.mark.slow,
]

ASKING = ("wants to", "Approval needed", "Waiting for approval")  # what a decided request never says


@pytest.fixture(params=list(VIEWPORTS))
async def quick_demo(request, redis_url, tmp_path):
    """The demo, with one email expiring after 3 seconds (the shipped policy says 2 minutes)."""
    policy = tmp_path / "signoff.toml"
    soon = (
        '[[rules]]\ntools = ["send_email"]\nwhen = \'args.subject == "too late"\'\ntimeout = "3s"\n'
        'summary = "Email {to}: {subject}"\n\n'
    )
    policy.write_text(soon + POLICY.read_text())
    async with demo_page(redis_url, request.param, policy=policy) as page:
        yield page


async def settled_as(page: Page, asked: str, header: str | None, told: str) -> None:
    """The request `asked` is settled: its card's header says `header` (when the card is in this
    channel), and the run's thread tells Riley `told` (mentioned, once)."""
    await as_user(page, "U0ALICE")
    if header:
        await expect(card(page, header)).to_be_visible()
    thread = thread_of(page, asked)
    await expect(thread).to_contain_text(f"@Riley {told}")
    for stale in ASKING:
        await expect(thread.locator(".msg", has_text=stale)).to_have_count(0)


async def test_every_outcome_is_told_in_words_and_riley_hears_each_once(quick_demo):
    page = quick_demo
    # approve: a destructive tool, so a dialog, opened once Alice is checked
    await ask(page, 'Email finance@acme.com "Q3 numbers are in"', decider="U0BOB")
    email = card(page, "Email finance@acme.com: Q3 numbers are in")
    await expect(email).to_contain_text("Approvers: @Alice")  # Riley may not approve hers: not listed
    await email.get_by_role("button", name="Approve").click()  # Bob: told at once, no dialog
    await expect(thread_of(page, "Q3 numbers are in").locator(".ephemeral")).to_contain_text(
        "You are not on the approver list"
    )
    await expect(page.get_by_role("dialog")).to_have_count(0)
    await as_user(page, "U0ALICE")
    await email.get_by_role("button", name="Approve").click()
    await confirm(page, "Approve")
    await settled_as(
        page,
        "Q3 numbers are in",
        "Approved by Alice",
        "✅ Approved by Alice: email finance@acme.com: Q3 numbers are in",
    )
    await expect(thread_of(page, "Q3 numbers are in")).to_contain_text("The agent carries on")

    # quorum, in #finance: the notice in Riley's thread says the outcome once decided
    tab = await passkey_tab(page)  # (each approver confirms a refund over 1,000 with a passkey)
    for person in ("U0ALICE", "U0DANA"):
        await add_passkey(page, tab, person)
    await ask(page, "Refund order 1235 for 5000")
    await page.click("[data-channel=C0FINANCE]")
    for person in ("U0ALICE", "U0DANA"):
        await as_user(page, person)
        await approve_with_passkey(page, tab, card(page, "Refund 5,000 on order 1235"))
        await page.bring_to_front()
    await expect(card(page, "Approved by Alice, Dana")).to_be_visible()
    await page.click("[data-channel=C0APPROVALS]")
    await settled_as(
        page,
        "Refund order 1235 for 5000",
        None,  # (the card is in #finance, seen above)
        "✅ Approved by Alice, Dana: refund 5,000 on order 1235",
    )
    await expect(thread_of(page, "Refund order 1235 for 5000")).to_contain_text(
        "✅ Approved by Alice, Dana: refund 5,000 on order 1235 (asked by Riley). Open the card in #finance."
    )  # the link that said it waited now says the outcome

    # edit: what people read is the change, not the note meant for the model
    await ask(page, 'Write "Launch on Monday" to /plans/launch.md')
    await card(page, "Write to /plans/launch.md").get_by_role("button", name="Edit").click()
    await page.get_by_role("dialog").locator("[data-block-id=content]").fill("Launch on Tuesday")
    await page.get_by_role("dialog").get_by_role("button", name="Run edited").click()
    await settled_as(
        page,
        "Launch on Monday",
        "Edited and approved by Alice",
        "✏️ Edited and approved by Alice: write to /plans/launch.md",
    )
    edited = thread_of(page, "Launch on Monday")
    await expect(edited).to_contain_text("I ran write_file as a reviewer edited it")
    await expect(edited).not_to_contain_text("Executed instead")

    # reject with a reason: the reason reaches Riley with the outcome
    await ask(page, "Delete /reports/old.pdf")
    await card(page, "Delete /reports/old.pdf").get_by_role("button", name="Reject").click()
    await page.get_by_role("dialog").locator("[data-block-id=reason]").fill("Keep it for the audit")
    await page.get_by_role("dialog").get_by_role("button", name="Reject").click()
    await settled_as(
        page, "Delete /reports/old.pdf", "Rejected by Alice", "❌ Rejected by Alice: delete /reports/old.pdf"
    )
    await expect(thread_of(page, "Delete /reports/old.pdf")).to_contain_text(
        "Alice said: Keep it for the audit"
    )

    # respond: the reviewer's answer, shown as one (nothing ran), never as a success
    await ask(page, "Delete /drafts/plan.md")
    await card(page, "Delete /drafts/plan.md").get_by_role("button", name="Respond").click()
    await page.get_by_role("dialog").locator("[data-block-id=message]").fill("Moved it to /archive")
    await page.get_by_role("dialog").get_by_role("button", name="Respond").click()
    await settled_as(
        page, "Delete /drafts/plan.md", "Answered instead by Alice", "💬 Answered instead by Alice"
    )
    answered = thread_of(page, "Delete /drafts/plan.md")
    await expect(answered).to_contain_text("a reviewer answered instead: Moved it to /archive")
    await expect(answered).not_to_contain_text("✅ Moved it")

    # expiry: nobody decides within the time limit
    await ask(page, 'Email finance@acme.com "too late"')
    await settled_as(
        page,
        "too late",
        "Expired: no decision in time",
        "⌛ Expired: no decision in time: email finance@acme.com",
    )
    await expect(thread_of(page, "too late")).not_to_contain_text("Do not retry")

    # withdraw: only Riley may; anyone else is told so before any dialog
    await ask(page, 'Email team@acme.com "never mind"')
    mine = card(page, "Email team@acme.com: never mind")
    await mine.get_by_role("button", name="Withdraw my request").click()  # Alice
    await expect(thread_of(page, "never mind").locator(".ephemeral")).to_contain_text(
        "Only @Riley, who asked, may withdraw this request"
    )
    await expect(page.get_by_role("dialog")).to_have_count(0)
    await as_user(page, "U0RILEY")
    await mine.get_by_role("button", name="Withdraw my request").click()
    await confirm(page, "Withdraw")
    await expect(card(page, "Withdrawn by Riley")).to_be_visible()
    await expect(thread_of(page, "never mind")).to_contain_text(
        "Riley withdrew the request; nothing was run."
    )
    await shot(page, "outcomes")

    # Riley's notifications: one per request she did not end herself, each its outcome
    await as_user(page, "U0RILEY")
    heard = await notifications(page)
    assert len(heard) == 6, heard
    assert all("@Riley" in item and not any(s in item for s in ASKING) for item in heard), heard
    for told in ("✅ Approved by Alice:", "Approved by Alice, Dana", "✏️ Edited", "❌ Rejected", "💬", "⌛"):
        assert sum(told in item for item in heard) == 1, (told, heard)
    # and the approvers' lists show each card as it is now: decided, in words
    for person in ("U0ALICE", "U0DANA"):
        await as_user(page, person)
        assert not [item for item in await notifications(page) if any(s in item for s in ASKING)]


@pytest.fixture(params=list(VIEWPORTS))
async def server_demo(request, redis_url):
    async with demo_page(redis_url, request.param, agent_server=True) as page:
        yield page


async def test_on_an_agent_server_the_outcomes_are_told_the_same_way(server_demo):
    page = server_demo
    await ask(page, 'Email finance@acme.com "from the server"')
    await card(page, "Email finance@acme.com: from the server").get_by_role("button", name="Approve").click()
    await confirm(page, "Approve")
    await settled_as(
        page,
        "from the server",
        "Approved by Alice",
        "✅ Approved by Alice: email finance@acme.com: from the server",
    )

    await ask(page, "Delete /reports/server.pdf")
    await card(page, "Delete /reports/server.pdf").get_by_role("button", name="Reject").click()
    await page.get_by_role("dialog").locator("[data-block-id=reason]").fill("Not from here")
    await page.get_by_role("dialog").get_by_role("button", name="Reject").click()
    await settled_as(page, "Delete /reports/server.pdf", "Rejected by Alice", "❌ Rejected by Alice")
    await expect(thread_of(page, "Delete /reports/server.pdf")).to_contain_text("Alice said: Not from here")

    await as_user(page, "U0RILEY")
    heard = await notifications(page)
    assert len(heard) == 2 and not [item for item in heard if any(s in item for s in ASKING)], heard
    await shot(page, "agent-server-outcomes")
