"""`make demo`'s page in a real browser: headless Chromium from the distribution, driven by Playwright.

Each flow runs at a desktop and at a phone viewport (390×844) against the real
loop (stand-in page, bot, runner, demo agent); screenshots land in artifacts/.
"""

from __future__ import annotations

import re

import pytest
from playwright.async_api import expect

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
    element_shot,
    passkey_tab,
    shot,
    thread_of,
)

pytestmark = pytest.mark.skipif(not HAS_CHROMIUM, reason="make test installs chromium; run it via make")


@pytest.fixture(params=list(VIEWPORTS))
async def page(request, redis_url):
    async with demo_page(redis_url, request.param) as page:
        yield page


async def test_approve_runs_the_tool_and_the_answer_follows(page):
    await ask(page, 'Email finance@acme.com "Q3 numbers are in"')
    approval = card(page, "Email finance@acme.com: Q3 numbers are in")  # what it does, not its tool
    await expect(approval.get_by_role("button", name="Approve")).to_be_visible()
    await expect(approval.get_by_role("button", name="Reject")).to_be_visible()
    await expect(approval.get_by_role("button", name="Edit")).to_have_count(0)
    await shot(page, "card")
    # Nothing wraps mid-word or spills out of its button, at either size.
    squeezed = await page.evaluate(
        """() => [...document.querySelectorAll('button')].filter(b => b.offsetParent !== null &&
             (b.scrollWidth > b.clientWidth + 1 || b.getBoundingClientRect().height > 52)).map(b => b.textContent)"""
    )
    assert squeezed == []
    await element_shot(page, approval, "card-only")

    await approval.get_by_role("button", name="Approve").click()
    await confirm(page, "Approve")  # destructive: confirmed in a dialog Signoff opens for an approver

    thread = thread_of(page, "Q3 numbers are in")
    await expect(thread).to_contain_text("Approved by @Alice")
    await expect(thread).to_contain_text("✅ Email to finance@acme.com sent: Q3 numbers are in")
    await shot(page, "approved")


async def test_edit_changes_the_path_and_the_edited_call_runs(page):
    await ask(page, 'Write "Launch on Monday" to /plans/launch.md')
    await card(page, "Write to /plans/launch.md").get_by_role("button", name="Edit").click()
    dialog = page.get_by_role("dialog")
    await expect(dialog).to_contain_text("Edit write_file")
    await dialog.locator("[data-block-id=file_path]").fill("   ")  # a required argument, blanked
    await dialog.get_by_role("button", name="Run edited").click()
    await expect(page.get_by_role("alert")).to_have_text("Required: the tool cannot run without it.")
    dialog = page.get_by_role("dialog")
    await dialog.locator("[data-block-id=file_path]").fill("/plans/launch-v2.md")
    await shot(page, "edit-modal")
    await dialog.get_by_role("button", name="Run edited").click()

    thread = thread_of(page, "Launch on Monday")
    await expect(thread).to_contain_text("/plans/launch-v2.md (was /plans/launch.md)")
    await expect(thread).to_contain_text("Updated file /plans/launch-v2.md")


async def test_a_file_edit_card_shows_its_diff_without_a_sideways_scroll(page):
    await ask(page, 'In /plans/launch.md replace "Monday" with "Tuesday"')
    approval = card(page, "/plans/launch.md")
    await expect(approval).to_contain_text("edits /plans/launch.md: +1 −1 lines")
    diff = approval.locator("pre.rich-pre").first
    await expect(diff).to_contain_text("-- Launch on Monday at 10:00 UTC")
    await expect(diff).to_contain_text("+- Launch on Tuesday at 10:00 UTC")
    await approval.evaluate("card => card.scrollIntoView({block: 'center'})")
    # Neither the page nor the diff itself scrolls sideways, at either size.
    assert not await page.evaluate("() => document.documentElement.scrollWidth > window.innerWidth + 1")
    assert await diff.evaluate("pre => pre.scrollWidth <= pre.clientWidth + 1")
    await element_shot(page, approval, "diff-card")

    await approval.get_by_role("button", name="View the whole change").click()
    dialog = page.get_by_role("dialog")
    await expect(dialog).to_contain_text("The whole change")
    await expect(dialog).to_contain_text(" - Watch the error dashboards for an hour")  # whole lines
    await shot(page, "diff-modal")


async def test_a_refund_is_decided_in_finance_from_a_notification(page):
    await ask(page, "Refund order 1235 for 5000")
    await page.click("#bell")
    notification = page.locator(".notification", has_text="Riley's agent wants to refund 5,000 on order 1235")
    await expect(notification).to_contain_text("#finance")
    await shot(page, "notification")
    await notification.click()

    await expect(page.locator("#channel-name")).to_have_text("#finance")
    await card(page, "Refund 5,000 on order 1235").get_by_role("button", name="Reject").click()
    dialog = page.get_by_role("dialog")
    await expect(dialog).to_contain_text("the agent is told not to retry")
    await dialog.locator("[data-block-id=reason]").fill("Over the monthly limit")
    await dialog.get_by_role("button", name="Reject").click()
    await expect(card(page, "Rejected by Alice")).to_be_visible()

    await page.click("[data-channel=C0APPROVALS]")
    thread = thread_of(page, "Refund order 1235 for 5000")
    await expect(thread).to_contain_text("❌ Rejected by Alice: refund 5,000 on order 1235")
    await expect(thread).to_contain_text("Alice said: Over the monthly limit")
    await expect(thread).to_contain_text(
        "I did not run issue_refund; the reviewer said: Over the monthly limit"
    )
    await as_user(page, "U0BOB")
    await expect(page.locator("#bell")).to_have_text("🔔")  # Bob may not decide: nobody pinged him


async def test_approve_all_decides_a_batch_in_one_tap(page):
    await ask(page, "Delete /reports/old.pdf and email team@acme.com that the old report is gone")
    batch = card(page, "2 actions need review")
    await batch.get_by_role("button", name="Approve all").click()
    await confirm(page, "Approve all")

    await expect(card(page, "Reviewed: 2 approved")).to_be_visible()
    await expect(thread_of(page, "the old report is gone")).to_contain_text(
        re.compile(r"(✅ Deleted|delete failed: Error)")
    )


async def test_home_shows_the_approver_what_waits_and_the_requester_what_they_asked(page):
    await ask(page, 'Email finance@acme.com "home tab"')
    await expect(card(page, "Email finance@acme.com: home tab")).to_be_visible()
    await page.click("#tab-home")
    home = page.locator("#home-view")
    await expect(home).to_contain_text("Email finance@acme.com: home tab")  # the demo policy's summary
    await expect(home).to_contain_text("asked by @Riley")
    await shot(page, "home-approver")
    await as_user(page, "U0RILEY")
    await page.click("#tab-home")
    await expect(home.locator(".blk", has_text="You asked, waiting on others")).to_be_visible()
    await expect(home).to_contain_text("Email finance@acme.com: home tab")
    await expect(home).to_contain_text("Waiting on @Alice")  # on whom
    await home.get_by_role("button", name="Open").first.click()
    await expect(page.locator(".msg.focused").first).to_contain_text("Email finance@acme.com: home tab")


async def test_respond_answers_in_place_of_the_tool_with_inline_validation(page):
    await ask(page, "Delete /reports/old.pdf")
    await card(page, "Delete /reports/old.pdf").get_by_role("button", name="Respond").click()
    dialog = page.get_by_role("dialog")
    await dialog.locator("[data-block-id=message]").fill("   ")
    await dialog.get_by_role(
        "button", name="Respond"
    ).click()  # blank: Slack keeps the modal open with the error
    await expect(page.get_by_role("alert")).to_have_text(
        "Write what the agent should get as the tool's result."
    )
    await expect(page.get_by_role("dialog").locator("[data-block-id=message]")).to_have_value("   ")
    await page.get_by_role("dialog").locator("[data-block-id=message]").fill("Archived it instead.")
    await page.get_by_role("dialog").get_by_role("button", name="Respond").click()

    thread = thread_of(page, "Delete /reports/old.pdf")  # nothing ran: not shown as a success
    await expect(thread).to_contain_text(
        "💬 I did not run delete; a reviewer answered instead: Archived it instead."
    )
    await expect(card(page, "Answered instead by Alice")).to_be_visible()


async def test_a_batch_takes_mixed_decisions(page):
    await ask(page, "Delete /reports/old.pdf and email team@acme.com that the old report is gone")
    batch = card(page, "2 actions need review")
    await expect(batch).to_contain_text("0 of 2 decided")
    await shot(page, "batch")
    await batch.locator("[data-action-id='approve:0']").click()
    await confirm(page, "Approve")
    await expect(batch).to_contain_text("1 of 2 decided")
    await batch.locator("[data-action-id='reject:1']").click()
    await page.get_by_role("dialog").get_by_role("button", name="Reject").click()

    thread = thread_of(page, "the old report is gone")
    await expect(thread).to_contain_text("I did not run send_email")
    await expect(thread).to_contain_text(re.compile(r"(✅ Deleted|delete failed: Error)"))


async def test_a_non_approvers_click_and_the_requesters_own_are_refused(page):
    await ask(page, 'Email finance@acme.com "who decides"', decider="U0BOB")
    approval = card(page, "Email finance@acme.com: who decides")
    await approval.get_by_role("button", name="Approve").click()  # no dialog first: told at once

    thread = thread_of(page, "who decides")
    await expect(thread.locator(".ephemeral")).to_contain_text(
        "You are not on the approver list for send_email. Approvers: @Alice."
    )
    await shot(page, "refused")
    await as_user(page, "U0RILEY")
    await expect(page.get_by_role("dialog")).to_have_count(0)
    await approval.get_by_role("button", name="Approve").click()
    await expect(thread.locator(".ephemeral")).to_contain_text("someone else has to decide")
    await expect(page.get_by_role("dialog")).to_have_count(0)
    await expect(approval.get_by_role("button", name="Approve")).to_be_visible()


async def test_a_notification_opens_the_card_and_each_approver_confirms_with_a_passkey(page):
    tab = await passkey_tab(page)  # where the links Signoff sends open, with a platform passkey
    for person in ("U0ALICE", "U0DANA"):
        await add_passkey(page, tab, person)
    await ask(page, "Refund order 77 for 2500 now")
    await page.click("#bell")
    await page.locator(".notification", has_text="refund 2,500 on order 77").click()
    await expect(page.locator(".msg.focused")).to_contain_text("Refund 2,500 on order 77")  # the card
    await shot(page, "opened-from-notification")

    # Refunds over 1,000 need two approvers, each with a passkey (the demo's policy): a click
    # answers with a private link to Signoff's page; Alice's counts, Dana's decides.
    refund = card(page, "Refund 2,500 on order 77")
    await expect(refund).to_contain_text("🔑 Approve needs a passkey")
    await approve_with_passkey(page, tab, refund)
    await page.bring_to_front()
    await expect(refund).to_contain_text("1 of 2 approvals: @Alice")
    await expect(refund).to_contain_text("May still approve: @Dana")
    await as_user(page, "U0DANA")
    await approve_with_passkey(page, tab, refund)
    await page.bring_to_front()

    await expect(card(page, "Approved by Alice, Dana")).to_be_visible()
    await page.click("[data-channel=C0APPROVALS]")
    thread = thread_of(page, "Refund order 77 for 2500 now")
    await expect(thread).to_contain_text("✅ Approved by Alice, Dana: refund 2,500 on order 77")  # both
    await expect(thread).to_contain_text("✅ Refunded 2500 on order 77")


async def test_approve_and_trust_lets_the_same_write_run_unasked_and_slash_trust_revokes_it(page):
    await ask(page, 'Write "Launch on Monday" to /plans/launch.md')
    write = card(page, "Write to /plans/launch.md")
    await write.get_by_role("button", name="Approve & trust for 1h").click()
    await expect(page.get_by_role("dialog")).to_contain_text("runs without a card for 1h")
    await shot(page, "trust-confirm")
    await confirm(page, "Approve & trust")
    await expect(thread_of(page, "Launch on Monday")).to_contain_text("@Alice trusted write_file")

    await ask(page, 'Write "Launch on Tuesday" to /plans/launch.md')
    tuesday = thread_of(page, "Launch on Tuesday")
    await expect(tuesday).to_contain_text("Approved under @Alice's trust (Writes)")
    await expect(tuesday.locator(".msg", has=page.locator(".blk.header"))).to_have_count(0)  # no card

    await page.fill("#compose", "/signoff trust")  # as Alice: she granted it, so she may revoke it
    await page.click("#send")
    listed = page.locator(".msg.ephemeral", has_text="Live trust grants (1)")
    await expect(listed).to_contain_text("write_file")
    await shot(page, "trust-list")
    await listed.get_by_role("button", name="Revoke").click()
    await expect(page.locator(".msg.ephemeral", has_text="Revoked")).to_have_count(1)


async def test_the_runs_plan_shows_the_call_waiting_for_approval_and_links_to_its_card(page):
    await ask(page, 'Email finance@acme.com "Q3 numbers are in"')
    thread = thread_of(page, "Q3 numbers are in")
    waiting = thread.locator(".blk.plan .task.pending", has_text="Waiting for approval by")
    await expect(waiting).to_contain_text("send email: to finance@acme.com")
    await expect(thread.locator(".plan-title")).to_contain_text("Waiting for approval · 0 of 1 done")
    link = waiting.get_by_role("link", name="open the card")
    await expect(link).to_be_visible()
    await waiting.evaluate("task => task.scrollIntoView({block: 'center'})")
    wide = await page.evaluate("() => document.documentElement.scrollWidth > window.innerWidth + 1")
    assert not wide  # nothing of the plan spills sideways, at either size
    await shot(page, "plan")

    await link.click()  # lands on the card, which keeps the buttons
    await expect(page.locator(".msg.focused .blk.header").first).to_contain_text("Email finance@acme.com")


async def test_the_messages_tab_offers_prompts_and_answers_what_waits_for_you(page):
    await ask(page, 'Email finance@acme.com "Q3 numbers are in"')  # Alice takes over the page
    await page.click("#tab-messages")  # Slack's agent view: the app's DM, prompts at its top
    await expect(page.locator("#channel-name")).to_have_text("Messages · signoff")
    prompts = page.locator(".tab-prompts")
    await expect(prompts.get_by_role("button")).to_have_text(
        ["What is waiting for me?", "My requests", "Use demo"]
    )
    await expect(page.locator(".composer")).to_be_visible()  # each message there is its own thread
    await prompts.get_by_role("button", name="What is waiting for me?").click()
    listed = page.locator(".msg", has_text="Waiting for your decision (1)")
    await expect(listed).to_contain_text("Email finance@acme.com: Q3 numbers are in")
    await shot(page, "messages-tab")
    await listed.get_by_role("link").first.click()  # lands on the card in #approvals
    await expect(page.locator(".msg.focused .blk.header").first).to_contain_text("Email finance@acme.com")


async def test_an_mcp_servers_question_is_answered_in_a_form_of_its_own_fields(page):
    await ask(page, "Deploy checkout to staging")
    asked = card(page, "Deploy service asks")
    await expect(asked).to_contain_text("It asks for Replicas, Strategy and Tell #deploys (optional)")
    await asked.get_by_role("button", name="Answer…").click()
    dialog = page.get_by_role("dialog")
    await expect(dialog).to_contain_text("Deploying checkout to staging: how should it roll out?")
    await expect(dialog.get_by_label("Replicas")).to_have_value("2")  # the server's default
    await dialog.get_by_label("Replicas").fill("30")
    await dialog.get_by_role("button", name="Send").click()
    await expect(page.get_by_role("alert")).to_have_text("At most 20.")  # Signoff checks it: the schema's

    dialog = page.get_by_role("dialog")
    await dialog.get_by_label("Replicas").fill("4")
    await dialog.get_by_label("Strategy").select_option(label="Canary (10% first)")
    await dialog.get_by_role("radio", name="No").check()
    await shot(page, "mcp-form")
    await dialog.get_by_role("button", name="Send").click()

    thread = thread_of(page, "Deploy checkout to staging")
    await expect(thread).to_contain_text('Deployed checkout to staging with {"notify": false, "replicas": 4')
    await expect(thread).to_contain_text("Answered by @Alice")
