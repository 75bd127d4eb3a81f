"""The README's own-agent steps at phone size, as a newcomer follows them: myagent.py and my.toml
copied from the README into a folder of their own, the README's `signoff try` run there, the
page clicked through in Chromium: Riley asks, the card asks @finance and @security (the page's
user groups), Alice and Bob approve, the refund runs."""

from __future__ import annotations

import asyncio

import pytest
from playwright.async_api import expect

from signoff_demo.redis_server import free_port
from tests.support.browser import HAS_CHROMIUM, as_user, ask, card, confirm, open_in_chromium, shot, thread_of
from tests.support.commands import launch, line_with, newcomer_env, stop
from tests.support.own_agent import own_agent_folder, try_command

pytestmark = pytest.mark.skipif(not HAS_CHROMIUM, reason="make test installs chromium; run it via make")


async def test_the_readmes_own_agent_and_policy_run_on_the_page_at_phone_size(tmp_path):
    folder = own_agent_folder(tmp_path.resolve())
    port = free_port()
    process = launch([*try_command(), "--port", str(port)], folder, newcomer_env())
    said = ""
    try:
        said = await asyncio.to_thread(line_with, process, "Open http", 120)
        assert f"graph myagent:build (from {folder})" in said
        assert f"Policy: {folder / 'my.toml'}" in said
        async with open_in_chromium(f"http://127.0.0.1:{port}/", "phone") as page:
            await ask(page, "Refund order 1235 for 5000")  # the fake model asks for its refund
            refund = card(page, "Refund 5,000 on order 1,235")
            await expect(refund).to_contain_text("@finance")
            await expect(refund).to_contain_text("@security")
            await shot(page, "try-card")
            await refund.get_by_role("button", name="Approve").click()
            await confirm(page, "Approve")
            await as_user(page, "U0BOB")
            await refund.get_by_role("button", name="Approve").click()
            await confirm(page, "Approve")
            thread = thread_of(page, "Refund order 1235 for 5000")
            await expect(thread).to_contain_text("Refunded 5000 on order 1235", timeout=60_000)
    finally:
        code, out = stop(process)
    assert code == 0, said + out
