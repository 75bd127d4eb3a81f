"""Driving the demo's page in a real browser (headless Chromium from the distribution, through
Playwright): the page fixture's pieces, and what a person does on it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Locator, Page, async_playwright, expect

from signoff_demo.page import POLICY, running_demo
from signoff_demo.redis_server import free_port
from tests.support.paths import ROOT

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = ROOT / "artifacts"
VIEWPORTS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
HAS_CHROMIUM = Path(CHROMIUM).exists()
STICKY_HIDDEN = "header.top, .composer { visibility: hidden !important; }"
# Chromium's DevTools virtual authenticator as a phone's or a laptop's: a platform passkey that
# verifies its user (fingerprint, face, PIN) and keeps discoverable credentials
AUTHENTICATOR = {
    "protocol": "ctap2",
    "transport": "internal",
    "hasResidentKey": True,
    "hasUserVerification": True,
    "isUserVerified": True,
    "automaticPresenceSimulation": True,
}


@contextlib.asynccontextmanager
async def demo_page(
    redis_url: str, viewport: str, agent_server: bool = False, policy: Path = POLICY
) -> AsyncIterator[Page]:
    """The demo (bot, runner or Agent Server, the stand-in page) open in Chromium at `viewport`."""
    prefix = f"browser-{free_port()}"
    async with running_demo(
        redis_url, page_port=free_port(), prefix=prefix, agent_server=agent_server, policy=policy
    ) as demo:
        async with open_in_chromium(demo.url, viewport) as page:
            yield page


@contextlib.asynccontextmanager
async def open_in_chromium(url: str, viewport: str) -> AsyncIterator[Page]:
    """The page at `url` open in Chromium at `viewport` (phone or desktop)."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        context = await browser.new_context(viewport=VIEWPORTS[viewport])
        page = await context.new_page()
        page.set_default_timeout(20_000)
        await page.goto(url)
        page.viewport_name = viewport  # type: ignore[attr-defined]
        try:
            yield page
        finally:
            await browser.close()


async def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"{name}-{page.viewport_name}.png"), full_page=False)  # type: ignore[attr-defined]


async def element_shot(page: Page, element: Locator, name: str) -> None:
    """A screenshot of `element` alone in artifacts/, the page's sticky bar and composer hidden
    (a card taller than a phone's room between them is shot whole); taken again if the page
    re-rendered it meanwhile (the page polls the state)."""
    ARTIFACTS.mkdir(exist_ok=True)
    for attempt in range(3):
        try:
            path = ARTIFACTS / f"{name}-{page.viewport_name}.png"  # type: ignore[attr-defined]
            await element.screenshot(path=str(path), style=STICKY_HIDDEN)
            return
        except PlaywrightError:
            if attempt == 2:
                raise
            await asyncio.sleep(0.3)


async def ask(page: Page, text: str, decider: str = "U0ALICE") -> None:
    """Riley (the requester) writes to the agent and opens the thread (Slack folds it under
    "N replies"); `decider` then takes over the page."""
    await as_user(page, "U0RILEY")
    await page.fill("#compose", f"@signoff {text}")
    await page.click("#send")
    await thread_of(page, text).locator("button.replies").click()
    await as_user(page, decider)


def card(page: Page, title: str):
    return page.locator(".msg", has=page.locator(".blk.header", has_text=title)).last


def thread_of(page: Page, text: str):
    """The conversation Riley started with `text` (not a notice that quotes it, sent to the channel)."""
    asked = page.locator(".msg", has_text=text).filter(has=page.locator(".who", has_text="Riley"))
    return page.locator("section.conversation", has=asked).last


async def as_user(page: Page, user: str) -> None:
    await page.select_option("#user", user)


async def confirm(page: Page, button: str) -> None:
    """Submit the dialog Signoff opened to confirm a tap (a modal: it checked the person first)."""
    await page.get_by_role("dialog").get_by_role("button", name=button, exact=True).click()


async def notifications(page: Page) -> list[str]:
    """What the bell lists for whoever "You are" is, newest first (the list opened and closed)."""
    await page.click("#bell")
    items = await page.locator("#notifications .notification").all_inner_texts()
    await page.keyboard.press("Escape")
    return items


async def with_authenticator(page: Page) -> Page:
    """`page`, with a virtual authenticator of its own (the DevTools protocol: one per tab)."""
    cdp = await page.context.new_cdp_session(page)
    await cdp.send("WebAuthn.enable", {"enableUI": False})
    await cdp.send("WebAuthn.addVirtualAuthenticator", {"options": AUTHENTICATOR})
    return page


async def passkey_tab(page: Page) -> Page:
    """A second tab beside the demo's page, with an authenticator: where people add passkeys and
    approve with one (the links Signoff sends open there)."""
    tab = await with_authenticator(await page.context.new_page())
    tab.set_default_timeout(20_000)
    return tab


async def add_passkey(page: Page, tab: Page, user: str) -> None:
    """`user` types `/signoff passkey` on the demo's page and adds a passkey on the page it links to."""
    await as_user(page, user)
    await page.fill("#compose", "/signoff passkey")
    await page.click("#send")
    link = page.locator(".ephemeral a", has_text="Add a passkey").last
    await tab.goto(str(await link.get_attribute("href")))
    await tab.click("#go")
    await expect(tab.locator("#said")).to_contain_text("Added.")


async def approve_with_passkey(page: Page, tab: Page, approval) -> None:
    """Approve on the card: Signoff answers with a private link; the passkey approves on its page."""
    links = page.locator(".ephemeral a", has_text="Approve with your passkey")
    seen = set(await links.evaluate_all("found => found.map(a => a.href)"))
    await approval.get_by_role("button", name="Approve").click()
    fresh = f"found => found.map(a => a.href).filter(h => !{json.dumps(sorted(seen))}.includes(h))"
    new: list[str] = []
    for _ in range(100):  # (a link this click got, not one seen before it)
        new = await links.evaluate_all(fresh)
        if new:
            break
        await page.wait_for_timeout(100)
    assert new, "no step-up link"
    await tab.goto(new[-1])
    await tab.click("#go")
    await expect(tab.locator("#said")).to_contain_text("Approved with your passkey")
