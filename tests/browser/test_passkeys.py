"""Step-up approval with a passkey in a real browser: headless Chromium (Playwright) with the
DevTools virtual authenticator (ctap2, internal transport, user verification on), at a desktop
and a phone viewport. Alice adds a passkey on Signoff's page from `/signoff passkey`'s link, then
approves a `step_up` call on the page her Approve click links to: the tool runs once and the
audit, which verifies, keeps the passkey's proof. Screenshots of the step-up page go to
artifacts/ (docs/step-up-*.png are copies)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Page, async_playwright, expect

from tests.support.browser import ARTIFACTS, CHROMIUM, FLAGS, HAS_CHROMIUM, VIEWPORTS, with_authenticator
from tests.support.files import lines, write_policy
from tests.support.harness import eventually, signoff, start_scene
from tests.support.passkey import enrol_link, link_in
from tests.support.people import ALICE, RILEY

pytestmark = pytest.mark.skipif(not HAS_CHROMIUM, reason="make test installs chromium; run it via make")

PASSKEY_POLICY = (
    "[defaults]\napprovers = ['U0ALICE']\n"
    "[[rules]]\nname = 'Mail'\ntools = ['send_email']\nstep_up = 'passkey'\ntimeout = '1h'\n"
    "summary = 'Email {to}: {subject}'\n"
)


@contextlib.asynccontextmanager
async def browser_with_passkeys(viewport: str) -> AsyncIterator[Page]:
    """Chromium at `viewport`, with a platform authenticator that verifies its user (as a phone's
    or a laptop's fingerprint reader does), added through the DevTools protocol."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        context = await browser.new_context(viewport=VIEWPORTS[viewport])
        page = await with_authenticator(await context.new_page())
        page.set_default_timeout(20_000)
        try:
            yield page
        finally:
            await browser.close()


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
async def test_enrol_then_approve_with_a_passkey_in_chromium(viewport, redis_url, tmp_path, monkeypatch):
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(tmp_path / "ledger.txt"))
    policy = write_policy(tmp_path, PASSKEY_POLICY)
    async with (
        start_scene(redis_url, "ledger", policy=policy) as scene,
        browser_with_passkeys(viewport) as page,
    ):
        await page.goto(await enrol_link(scene, ALICE))
        await expect(page.locator("h1")).to_have_text("Your passkeys")
        await page.fill("#label", "Alice's laptop")
        await page.click("#go")
        await expect(page.locator("#said")).to_contain_text("Added.")

        thread_id = await scene.ask("send", graph="ledger", requester=RILEY)
        card = await scene.card(thread_id)
        assert (await scene.standin.click(ALICE, card, "approve:0")).acked
        said = await eventually(
            lambda: next((t for t in scene.standin.ephemerals_for(ALICE) if "/step-up/" in t), None),
            what="the step-up link",
        )
        await page.goto(link_in(said))
        await expect(page.locator("h1")).to_have_text("Approve with your passkey")
        await expect(page.locator(".call")).to_contain_text("a@acme.com")
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / f"step-up-{viewport}.png"
        await page.screenshot(path=str(shot))
        await page.click("#go")
        await expect(page.locator("#said")).to_contain_text("Approved with your passkey")

        await scene.answer(thread_id)
        assert lines(tmp_path / "ledger.txt") == ["a@acme.com"]
        entry = next(e for e in await scene.store.audit.entries() if e["outcome"] == "decided")
        passkeys = await scene.store.passkeys.of(ALICE)
        assert (entry["step_up"], entry["credential"]) == ("passkey", passkeys[0].credential_id)
        assert passkeys[0].label == "Alice's laptop" and passkeys[0].sign_count >= 1
        checked = await signoff(scene, "audit", "verify")
        assert checked.returncode == 0, checked.stderr
        await page.reload()  # the link was used: the page says so, and nothing more runs
        await expect(page.locator("main")).to_contain_text("expired or was used already")
        assert lines(tmp_path / "ledger.txt") == ["a@acme.com"]

        # removing it is confirmed with it (the page asks the browser first): then it is gone
        await page.goto(await enrol_link(scene, ALICE))
        await page.get_by_role("button", name="Remove").click()
        await expect(page.locator("#said")).to_contain_text("Removed.")
        assert await scene.store.passkeys.of(ALICE) == []
