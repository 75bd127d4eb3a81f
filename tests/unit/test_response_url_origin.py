"""A click's response_url is answered only when it is Slack's: the bot POSTs the card (its
approvers, the call's arguments) there, so a URL pointing anywhere else gets nothing (the card
changes through chat.update instead: tests/e2e/test_live_cards_e2e.py)."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.io import SlackIO
from core.store import Store

SLACK_API = "https://slack.com/api/"
STANDIN_API = "http://127.0.0.1:4567/api/"  # the Slack the bot talks to in the tests and the demo


def slack_io(api: str) -> SlackIO:
    """The bot's Slack side talking to the Web API at `api` (its Redis is never reached here)."""
    return SlackIO(AsyncWebClient(token="xoxb-test", base_url=api), Store(aioredis.Redis(), "t", 1))


@pytest.mark.parametrize("api", [SLACK_API, STANDIN_API])
@pytest.mark.parametrize(
    ("url", "answered"),
    [
        ("https://hooks.slack.com/actions/T0AAA/1234/abcdef", True),
        ("http://hooks.slack.com/actions/T0AAA/1234/abcdef", False),  # not over TLS
        ("https://evilhooks.slack.com/actions/T0AAA/1234/abcdef", False),
        ("https://xslack.com/actions/T0AAA/1234/abcdef", False),
        ("https://hooks.slack.com.evil.example/actions/T0AAA/1234/abcdef", False),
        ("https://hooks.slack.com:8443/actions/T0AAA/1234/abcdef", False),  # another port
        ("https://someone@hooks.slack.com/actions/T0AAA/1234/abcdef", False),
        ("https://evil.example/actions/T0AAA/1234/abcdef", False),
        ("http://127.0.0.1:4568/response/abcdef", False),  # the stand-in's host, another port
        ("https://127.0.0.1:4567/response/abcdef", False),  # the stand-in's port, another scheme
        ("http://localhost:4567/response/abcdef", False),
        ("ftp://hooks.slack.com/actions/T0AAA/1234/abcdef", False),
        ("//hooks.slack.com/actions/T0AAA/1234/abcdef", False),
        ("", False),
    ],
)
def test_a_response_url_is_answered_only_when_it_is_slack_s(api, url, answered):
    assert slack_io(api).answerable(url) is answered


def test_the_stand_in_s_response_urls_are_answered_only_by_a_bot_talking_to_that_stand_in():
    url = "http://127.0.0.1:4567/response/abcdef"

    assert slack_io(STANDIN_API).answerable(url) is True
    assert slack_io(SLACK_API).answerable(url) is False
    assert slack_io("http://127.0.0.1:4568/api/").answerable(url) is False
