"""Hostile and broken input: forged and malformed requests, untrusted text, leaked secrets.

Each test is one way an attacker (or a broken client) was seen to get through:
verified first, refused plainly, nothing leaked, nothing changed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from bot.ingress import Quiet
from bot.views.cards import parse_value
from bot.views.markdown import to_mrkdwn
from bot.views.text import escape, visible
from bot.watch import SECRET_HEADER, WEBHOOK_PATH, webhook_route
from core.logs import get_logger, redact
from core.records import ApprovalStatus
from tests.support.harness import CHANNEL, ROOT, SECRET, Harness, card_text, eventually, start_scene
from tests.support.http import post
from tests.support.paths import LANGGRAPH_JSON
from tests.support.people import ALICE, BOB

DSN = "postgres://app:hunter2@db.internal:5432/books"


@pytest.fixture
async def scene(redis_url, tmp_path, monkeypatch):
    monkeypatch.setenv("SIGNOFF_TEST_FAIL", str(tmp_path / "provider-down"))
    env = {
        "SIGNOFF_API_TOKEN": "s3cret",
        "SIGNOFF_API_REQUESTER": ALICE,  # the token starts runs as Alice, and as nobody else
        "SIGNOFF_STARTERS": json.dumps({CHANNEL: [ALICE, BOB]}),
        "SIGNOFF_CHANNEL_GRAPHS": json.dumps({CHANNEL: ["demo", "memory", "flaky"]}),
    }
    async with start_scene(redis_url, "demo", "memory", "flaky", "question", env=env) as running:
        yield running


async def snapshot(scene: Harness) -> dict[str, object]:
    """Every key under the test's prefix with its content: to show that nothing changed."""
    redis = scene.store.redis
    seen: dict[str, object] = {}
    async for key in redis.scan_iter(match=f"{scene.prefix}*"):
        kind = await redis.type(key)
        if kind == "stream":
            seen[key] = (kind, await redis.xlen(key), await redis.xrevrange(key, count=1))
        elif kind == "hash":
            seen[key] = (kind, await redis.hgetall(key))
        elif kind == "string":
            seen[key] = (kind, await redis.get(key))
        else:
            seen[key] = (kind,)
    return seen


def signed_headers(
    body: bytes | str, content_type: str, stamp: int | None = None, secret: str = SECRET
) -> dict[str, str]:
    stamp = stamp or int(time.time())
    raw = body.encode() if isinstance(body, str) else body
    signature = "v0=" + hmac.new(secret.encode(), f"v0:{stamp}:".encode() + raw, hashlib.sha256).hexdigest()
    return {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": str(stamp),
        "X-Slack-Signature": str(signature),
    }


FORM = "application/x-www-form-urlencoded"
UNSIGNED = [
    (b"{not json", {"Content-Type": "application/json"}),
    (b"payload=not-json", {"Content-Type": FORM}),
    (b"payload=%5B1%5D", {"Content-Type": FORM}),
    (
        b"payload=%7B%7D",
        {"Content-Type": FORM, "X-Slack-Request-Timestamp": "soon", "X-Slack-Signature": "v0=1"},
    ),
    (b'{"type":"event_callback"}', {"Content-Type": "application/json", "X-Slack-Signature": "v0=00"}),
]


async def test_unsigned_requests_get_401_unread_with_one_log_line_and_nothing_changes(redis_url):
    async with Harness(redis_url) as scene:
        process = scene.spawn("bot")
        await scene.wait_healthy(scene.port)
        url = f"http://127.0.0.1:{scene.port}/slack/events"
        before = await snapshot(scene)
        answers = [await post(url, *UNSIGNED[n % len(UNSIGNED)]) for n in range(200)]
        stale = int(time.time()) - 400  # a captured request, signed, replayed after five minutes
        answers.append(await post(url, b"payload=%7B%7D", signed_headers(b"payload=%7B%7D", FORM, stale)))

        assert {status for status, _ in answers} == {401}
        assert {text for _, text in answers} == {""}
        assert await snapshot(scene) == before
        process.terminate()
        process.wait(10)
        log = scene.logs[-1].read_text()
        assert "Traceback" not in log
        assert log.count("slack_request_unsigned") == 1  # 201 refusals from one source: one line


def test_refusals_from_a_source_log_one_line_a_minute_and_the_next_says_how_many_were_muted(capfd):
    now = 1_000.0
    quiet = Quiet(get_logger("ingress"), clock=lambda: now)
    for _ in range(50):  # a burst from one source
        quiet.note("203.0.113.9", "slack_request_unsigned")
    quiet.note("198.51.100.7", "slack_request_unsigned")  # another source: a line of its own
    now += 59
    quiet.note("203.0.113.9", "slack_request_unsigned")  # still within the minute: muted
    now += 1
    quiet.note("203.0.113.9", "slack_request_unsigned")

    lines = [line for line in capfd.readouterr().err.splitlines() if "slack_request_unsigned" in line]
    said = [re.search(r"source='([^']+)' muted_since_last=(\d+)", line).groups() for line in lines]
    assert said == [("203.0.113.9", "0"), ("198.51.100.7", "0"), ("203.0.113.9", "50")]


async def test_a_fresh_request_signed_with_another_secret_gets_401_and_changes_nothing(scene):
    url = f"http://127.0.0.1:{scene.port}/slack/events"
    command = urlencode(
        {
            "team_id": scene.standin.team_id,
            "channel_id": CHANNEL,
            "user_id": ALICE,
            "command": "/signoff",
            "text": "use memory remember pears",
            "response_url": f"{scene.standin.base_url}/response/forged",
            "trigger_id": "1.2.forged",
        }
    )
    forged = signed_headers(command, FORM, secret="not-the-signing-secret")
    before = await snapshot(scene)

    status, text = await post(url, command, forged)

    assert (status, text) == (401, "")
    assert await snapshot(scene) == before


async def test_signed_but_unreadable_bodies_are_refused_without_a_500(scene):
    url = f"http://127.0.0.1:{scene.port}/slack/events"
    before = await snapshot(scene)
    for body in (b"payload=not-json", b"payload=%5B1%5D", b"\xff\xfe", b'{"type": "block_actions"}'):
        status, _ = await post(url, body, signed_headers(body, FORM))
        assert status < 500
    assert await snapshot(scene) == before


async def test_a_button_without_a_value_is_acked_and_refused(scene):
    thread_id = await scene.ask('Email finance@acme.com "numbers"')
    card = await scene.card(thread_id)
    payload = scene.standin.block_action_payload(ALICE, card, "approve:0")
    del payload["actions"][0]["value"]

    interaction = await scene.standin.send(payload)

    assert interaction.acked
    refusal = await eventually(lambda: scene.standin.ephemerals_for(ALICE), what="the refusal")
    assert refusal == ["This approval no longer exists."]
    approval = (await scene.store.approvals.pending_in())[0]
    assert approval.decided == {} and approval.status is ApprovalStatus.PENDING


async def test_a_form_aimed_at_an_action_that_is_not_there_is_an_inline_error(scene):
    thread_id = await scene.ask('Email finance@acme.com "numbers"')
    card = await scene.card(thread_id)
    modal = await scene.open_modal(ALICE, card, "reject:0")
    approval_id = modal["private_metadata"].split("\n")[0].rpartition(":")[0]  # (then the click's reply)

    out_of_range = await scene.standin.submit(ALICE, {**modal, "private_metadata": f"{approval_id}:7"}, {})

    assert out_of_range.acked
    assert out_of_range.json()["response_action"] == "errors"
    assert "does not match the approval" in next(iter(out_of_range.json()["errors"].values()))
    assert (await scene.store.approvals.get(approval_id)).decided == {}


async def test_an_edit_aimed_at_a_question_is_an_inline_error(scene):
    thread_id = await scene.ask("go", graph="question")
    card = await scene.card(thread_id)
    modal = await scene.open_modal(ALICE, card, "answer:0")
    approval_id = modal["private_metadata"].split("\n")[0].rpartition(":")[0]

    forged = await scene.standin.submit(ALICE, {**modal, "callback_id": "edit"}, {"answer": "1000"})

    assert forged.acked
    assert forged.json()["response_action"] == "errors"
    assert (await scene.store.approvals.get(approval_id)).decided == {}


async def test_an_answer_holding_nuls_and_digits_is_posted(scene):
    thread_id = await scene.ask("keep \x0012\x00 and \x000\x00 as they are", graph="memory")

    answer = await scene.answer(thread_id)

    assert answer == "You said: keep 12 and 0 as they are"


async def test_the_runs_api_takes_only_slack_ids_and_applies_the_allow_lists(scene):
    url = f"http://127.0.0.1:{scene.port}/runs"
    bearer = {"Authorization": "Bearer s3cret", "Content-Type": "application/json"}

    async def start(headers: dict[str, str] = bearer, **body: object) -> tuple[int, dict[str, object]]:
        status, text = await post(url, json.dumps({"task": "hello", "channel": CHANNEL, **body}), headers)
        return status, json.loads(text)

    before = await snapshot(scene)
    forged = "U0ALICE> <!channel> <https://evil.example|Approve here"
    status, said = await start(requester=forged)
    assert status == 400 and "requester" in str(said["error"])
    status, said = await start(requester="U0MALLORY")  # the token is Alice's: it names nobody else
    assert (status, said["error"]) == (
        403,
        "requester: this token starts runs as U0ALICE only (SIGNOFF_API_REQUESTER), not as U0MALLORY",
    )
    status, said = await start(graph="per_call")  # a graph not enabled here
    assert status == 403 and "not enabled in this channel" in str(said["error"])
    status, said = await start(channel="general")
    assert status == 400 and "channel" in str(said["error"])
    assert await snapshot(scene) == before

    keyed = {**bearer, "Idempotency-Key": "nightly-2026-12-03"}
    first = await start(keyed, requester=ALICE, graph="memory")
    again = await start(keyed, requester=ALICE, graph="memory")
    assert first[0] == 202 and again[0] == 200
    assert first[1]["thread_id"] == again[1]["thread_id"]
    await scene.answer(str(first[1]["thread_id"]))
    assert len([m for m in scene.standin.messages if m.kind == "run"]) == 1


async def test_a_run_the_api_starts_is_its_own_and_names_no_requester(redis_url):
    env = {"SIGNOFF_API_TOKEN": "s3cret", "SIGNOFF_STARTERS": json.dumps({CHANNEL: [ALICE]})}
    async with start_scene(redis_url, "memory", env=env) as scene:
        url = f"http://127.0.0.1:{scene.port}/runs"
        bearer = {"Authorization": "Bearer s3cret", "Content-Type": "application/json"}
        before = await snapshot(scene)
        named = await post(url, json.dumps({"task": "hi", "channel": CHANNEL, "requester": ALICE}), bearer)
        assert named == (
            403,
            json.dumps(
                {"ok": False, "error": "requester: this token starts runs as the API only, not as U0ALICE"}
            ),
        )
        unnamed = await post(url, json.dumps({"task": "hi", "channel": CHANNEL, "graph": "memory"}), bearer)
        # (who may start runs here is limited, and the API is nobody on that list)
        assert unnamed[0] == 403 and "not on the list of people who may start runs here" in unnamed[1]
        assert await snapshot(scene) == before


async def test_a_task_is_at_most_20000_characters_on_post_runs(scene):
    url = f"http://127.0.0.1:{scene.port}/runs"
    bearer = {"Authorization": "Bearer s3cret", "Content-Type": "application/json"}
    before = await snapshot(scene)

    def body(task: str) -> str:
        return json.dumps({"task": task, "channel": CHANNEL, "requester": ALICE, "graph": "memory"})

    too_long = await post(url, body("x" * 20_001), bearer)
    assert too_long[0] == 400 and "task: String should have at most 20000 characters" in too_long[1]
    assert await snapshot(scene) == before
    status, _ = await post(url, body("x" * 20_000), bearer)
    assert status == 202
    assert await started_tasks(scene) == ["x" * 20_000]


async def test_an_idempotency_key_reused_with_another_body_is_refused(scene):
    url = f"http://127.0.0.1:{scene.port}/runs"
    keyed = {"Authorization": "Bearer s3cret", "Content-Type": "application/json", "Idempotency-Key": "k-1"}
    asked = {"task": "remember pears", "channel": CHANNEL, "requester": ALICE, "graph": "memory"}

    first = await post(url, json.dumps(asked), keyed)
    # the same request, its fields in another order and spaced otherwise: the same body
    again = await post(url, json.dumps(dict(reversed(asked.items())), indent=1), keyed)
    other = await post(url, json.dumps({**asked, "task": "remember apples"}), keyed)

    assert first[0] == 202 and again[0] == 200
    thread_id = json.loads(first[1])["thread_id"]
    assert json.loads(again[1])["thread_id"] == thread_id
    assert other[0] == 422
    assert json.loads(other[1])["error"] == (
        f"Idempotency-Key 'k-1' was first used with another request (its run: {thread_id}); "
        "a new request needs a new key"
    )
    assert await scene.answer(thread_id) == "You said: remember pears"
    assert await started_tasks(scene) == ["remember pears"]  # nothing of the other one was written
    assert "remember apples" not in json.dumps(await snapshot(scene))
    assert len([m for m in scene.standin.messages if m.kind == "run"]) == 1


async def started_tasks(scene: Harness) -> list[str]:
    """The task of every start command on the commands streams."""
    commands = [json.loads(f["command"]) for _, f in await scene.store.queue.entries(lambda p: p.commands)]
    return [c["text"] for c in commands if c["type"] == "start"]


THREAD = "0b8e1a52-4c1e-4d5c-9a3e-2f1d7c6b5a49"


class Reconciles:
    """The webhook's reconciler, recording which threads it was asked to read."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    async def reconcile(self, thread_id: str) -> None:
        self.threads.append(thread_id)


async def test_the_agent_server_webhook_mutes_refusals_and_answers_odd_bodies_400(capfd):
    secret = "webhook-secret-of-the-test"
    reconciler = Reconciles()
    app = web.Application()
    app.router.add_post(WEBHOOK_PATH, webhook_route(secret, reconciler))  # type: ignore[arg-type]
    right = {SECRET_HEADER: secret, "Content-Type": "application/json"}
    odd = [
        b"[" * 100_000,  # deeper than the JSON parser goes
        b'{"thread_id": "%s", "x": %s}' % (THREAD.encode(), b"[" * 100_000),
        b"[]",
        b"null",
        b'{"thread_id": 7}',
        b"\xff\xfe",
        b'{"run_id": "no thread"}',
    ]

    async with TestServer(app) as server:
        url = str(server.make_url(WEBHOOK_PATH))
        refused = [
            await post(url, json.dumps({"thread_id": THREAD}), {SECRET_HEADER: "guess"}) for _ in range(200)
        ]
        answered = [await post(url, body, right) for body in odd]
        taken = await post(url, json.dumps({"thread_id": THREAD}), right)

    assert {status for status, _ in refused} == {401}
    assert [status for status, _ in answered] == [400] * len(odd)
    assert {text for _, text in answered} == {
        json.dumps({"ok": False, "error": "thread_id: a thread's UUID"})
    }
    assert taken[0] == 200 and reconciler.threads == [THREAD]
    logged = capfd.readouterr().err
    assert logged.count("webhook_refused") == 1  # 200 refusals from one source: one line
    assert "Traceback" not in logged


async def test_bidi_characters_in_an_argument_are_shown_not_obeyed(scene):
    hidden = "pay attacker\u202emoc.emca@ecnanif"
    thread_id = await scene.ask(f'Write "{hidden}" to /plans/pay.md')
    card = await scene.card(thread_id)

    assert "\u202e" not in card_text(card)
    assert "pay attacker⟨U+202E⟩moc.emca@ecnanif" in card_text(card)
    modal = await scene.open_modal(ALICE, card, "edit:0")
    inputs = [b["block_id"] for b in modal["blocks"] if b["type"] == "input"]
    assert inputs == ["file_path"]  # the content cannot be edited blind: it is kept as is
    assert "hidden characters" in json.dumps(modal["blocks"])


@pytest.mark.parametrize(
    ("task", "graph", "button"),
    [("Refund order 1234 for 5000", "demo", "reject:0"), ("go", "question", "answer:0")],
)
async def test_free_text_longer_than_the_modal_allows_is_refused(scene, task, graph, button):
    thread_id = await scene.ask(task, graph=graph)
    card = await scene.card(thread_id)
    modal = await scene.open_modal(ALICE, card, button)
    block = next(b["block_id"] for b in modal["blocks"] if b["type"] == "input")

    sent = await scene.standin.submit(ALICE, modal, {block: "x" * 100_000})

    assert sent.acked
    assert sent.json() == {
        "response_action": "errors",
        "errors": {block: "At most 3,000 characters (100,000 given)."},
    }
    assert (await scene.store.approvals.pending_in())[0].decided == {}


async def test_a_replayed_slash_command_starts_one_run(scene):
    first = await scene.standin.slash(ALICE, CHANNEL, "use memory remember pears")
    captured = scene.standin.captured[-1]
    replays = [await scene.standin.send_raw(*captured) for _ in range(2)]

    assert first.said.startswith("Started *memory*")
    assert [r.said for r in replays] == ["This command was received already; it was not run again."] * 2
    await eventually(lambda: [m for m in scene.standin.messages if m.kind == "answer"], what="the answer")
    assert len([m for m in scene.standin.messages if m.kind == "run"]) == 1


async def test_a_click_from_another_workspace_is_refused(scene):
    thread_id = await scene.ask('Email finance@acme.com "numbers"')
    card = await scene.card(thread_id)
    partner = scene.standin.block_action_payload(ALICE, card, "approve:0")
    partner["user"]["team_id"] = "T0PARTNER"  # a Slack Connect partner's user, with a listed id

    interaction = await scene.standin.send(partner)

    assert interaction.acked
    refusal = await eventually(lambda: scene.standin.ephemerals_for(ALICE), what="the refusal")
    assert refusal[0].startswith("This Signoff serves one workspace")
    approval = (await scene.store.approvals.pending_in())[0]
    assert approval.decided == {}

    await scene.standin.click(ALICE, card, "approve:0")  # from the workspace itself: taken, team recorded

    async def decided():
        return (await scene.store.approvals.get(approval.approval_id)).decided

    assert (await eventually(decided, what="the decision"))[0].team == scene.standin.team_id


async def test_credentials_in_errors_and_answers_never_reach_slack(scene, capfd):
    Path(os.environ["SIGNOFF_TEST_FAIL"]).write_text(f"could not connect to {DSN}")
    await scene.standin.slash(ALICE, CHANNEL, "use flaky sync the books")
    error = await eventually(lambda: [m for m in scene.standin.messages if m.kind == "error"], what="error")
    ref = re.fullmatch(
        r"⚠️ The run failed: RuntimeError — details in the logs, ref ([0-9a-f]{8})", error[0].text
    )
    assert ref

    thread_id = await scene.ask(f"connect with {DSN}", graph="memory")
    answer = await scene.answer(thread_id)
    assert answer == "You said: connect with postgres://***@db.internal:5432/books"

    everything = json.dumps([(m.text, m.blocks) for m in scene.standin.messages])
    assert "hunter2" not in everything
    logged = "".join(capfd.readouterr())
    failed = next(line for line in logged.splitlines() if ref.group(1) in line)
    assert "run_failed" in failed and "could not connect to postgres://***@db.internal" in failed
    assert "hunter2" not in logged


def test_signoff_run_never_prints_a_redis_password(tmp_path):
    env = {
        **os.environ,
        "REDIS_URL": "redis://:hunter2@127.0.0.1:1/0",
        "SIGNOFF_GRAPHS_FILE": str(LANGGRAPH_JSON),
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-m", "signoff", "run", "--channel", CHANNEL, "hello"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2
    assert "cannot reach Redis at redis://***@127.0.0.1:1/0" in done.stderr
    assert "hunter2" not in done.stdout + done.stderr


# the text rules, one by one ------------------------------------------------------------


def test_text_is_made_safe_once_controls_removed_hidden_characters_shown():
    assert visible("a\x00b\x07c\td\ne\r") == "abc\td\ne"
    assert visible("x\u202ey\u200bz\U000e0041") == "x⟨U+202E⟩y⟨U+200B⟩z⟨U+E0041⟩"
    assert visible("👩\u200d💻 a\u200db") == "👩\u200d💻 a⟨U+200D⟩b"  # an emoji's joiner is kept
    assert visible("❤️ a\u3164b\ufe01c\u2800d\ue000") == "❤️ a⟨U+3164⟩b⟨U+FE01⟩c⟨U+2800⟩d⟨U+E000⟩"
    assert escape("<!channel> & <https://evil|ok>") == "&lt;!channel&gt; &amp; &lt;https://evil|ok&gt;"


def test_markdown_links_show_where_they_point_and_mentions_stay_text():
    shown = to_mrkdwn("[Approve here](https://evil.example) <!channel> <@U0ALICE> **x\u202e**")

    assert shown == "Approve here (https://evil.example) &lt;!channel&gt; &lt;@U0ALICE&gt; *x⟨U+202E⟩*"


def test_secrets_in_connection_strings_and_slack_tokens_are_redacted_too():
    assert redact("postgres://user:p@ss@db/x") == "postgres://***@db/x"  # a password holding "@"
    assert redact("host=db password=hunter2 user=app") == "host=db password=*** user=app"
    assert redact("token xoxb-1234567890-abcdef") == "token xoxb-***"
    assert redact("Top secret: the Q3 plan") == "Top secret: the Q3 plan"


def test_urls_lose_their_credentials_and_nothing_else():
    assert (
        redact(f"{DSN} and redis://:pw@h:6379/0")
        == "postgres://***@db.internal:5432/books and redis://***@h:6379/0"
    )
    assert (
        redact("mail finance@acme.com, see https://acme.com/a@b")
        == "mail finance@acme.com, see https://acme.com/a@b"
    )


def test_a_forged_action_index_names_no_approval():
    assert parse_value("a1b2:3") == ("a1b2", 3)
    assert [parse_value(v) for v in ("a1b2:²", "a1b2:" + "9" * 5000, "a1b2:-1", "a1b2", "")] == [("", 0)] * 5
