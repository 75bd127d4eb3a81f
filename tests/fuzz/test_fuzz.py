"""Hostile and broken input (issue 10): every kind of request the bot takes, signed and unsigned,
built by Hypothesis from realistic ones and mutated (fields missing or added, wrong types, huge
strings, NULs, bidi overrides, mentions, forged ids), sent to a real `signoff bot` over HTTP.

For every case: an answer within Slack's 3 s and never a 5xx, and no traceback or error line in the
bot's log. Unsigned and forged requests, and POST /runs without the token, get 401 (413 for a body
over the server's 1 MiB) and change no key in Redis. Signed input the bot has to refuse (another
workspace, a user or channel that is not an id, a form answered with inline errors, a command that
started nothing) changes no record, and what it accepts leaves consistent records: a decision only
of a type its action allows, by someone allowed to take it, of this workspace, on an action that
exists, that the protocol and the form's bounds accept, resumed once; a run in a Slack conversation
for a Slack user, of what was asked, with its start command.

Every text the bot sends Slack (each Web API call's `text`, each mrkdwn text object in the blocks
and views the stand-in received) holds no markup Signoff did not write itself: no broadcast, no
mention of anyone who never used Slack with it, no group it was not configured with, no channel
its runs are not in, no link other than a permalink Slack gave it. Checked after every family,
and after a run of hostile text through every way a decision reaches Slack (agent text on cards
and in the review modal, an edit, a reason, a response, an answer, a withdraw).

The bot runs once for the module, as its own process (its log is scanned); Slack is the stand-in,
on an event loop in a background thread that every example borrows. Approvals are written to Redis
as the runner writes them (no agent runs, so nothing moves unless a request moves it).
`SIGNOFF_FUZZ_CASES` is the budget for the module (default 300, what `make test` runs; 10,000 for
the full run), shared across the families by weight.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import hmac
import html
import json
import os
import re
import string
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard, TypeVar
from urllib.parse import quote, urlencode

import aiohttp
import pytest
from hypothesis import HealthCheck, currently_in_test_context, given, note, settings
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from core.messages import Malformed, Resume, StartRun, decode_command
from core.protocol import (
    ActionReview,
    DecisionRefused,
    PendingRequest,
    RequestKind,
    check_answer,
    check_decision,
)
from core.records import ApprovalStatus, Outcome, Run, RunState, approval_for
from slack_standin import Call, Message
from slack_standin.people import view_submission
from slack_standin.streaming import markdown_html
from tests.support.harness import LANGGRAPH_JSON, SECRET, Harness, card_text, eventually
from tests.support.people import ALICE, BOB, RILEY  # Riley starts the runs; only Alice may send email

T = TypeVar("T")
Where = tuple[str | int, ...]

CASES = int(os.environ.get("SIGNOFF_FUZZ_CASES", "300"))
WEIGHTS = {"unsigned": 15, "garbage": 10, "runs": 10, "clicks": 20, "views": 20, "commands": 10, "events": 15}

TOKEN = "fuzz-api-token"
USERS = [ALICE, BOB, RILEY, "U0MALLORY", "W0ENTERPRISE"]
APPROVERS = {"send_email": [ALICE]}  # the bot's approver lists (users; groups start with S)
JSON_GRAPHS = {"demo", "memory", "flaky", "per_call"}  # tests/support/langgraph.json
ACK_S = 3.0  # Slack shows an error when an answer takes longer
MAX_BODY = 1024**2  # aiohttp's client_max_size: a longer body gets 413
FORM_MAX = 3_000  # plain_text_input's max_length in every modal: no decision text can be longer
USER_ID = re.compile(r"[UW][A-Z0-9]{2,32}")
CHANNEL_ID = re.compile(r"[CDG][A-Z0-9]{2,32}")  # a conversation: channel, private group or DM
SLACK_TS = re.compile(r"\d{1,12}(\.\d{1,9})?")
DELIVERY = ("rate:", "refresh:", "posts:", "slackthread:")  # written while posting earlier runs to Slack


def fuzz_settings(family: str) -> settings:
    """This family's share of SIGNOFF_FUZZ_CASES, reproducible, with no example database."""
    share = CASES * WEIGHTS[family] // sum(WEIGHTS.values())
    return settings(
        max_examples=max(10, share),
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=False,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
            HealthCheck.filter_too_much,
        ],
    )


# hostile values -------------------------------------------------------------------------------

BIDI = ["\u202e", "\u202d", "\u202a", "\u202b", "\u2066", "\u2067", "\u2068", "\u2069", "\u200f", "\u061c"]
NASTY = [
    *["", " ", "\x00", "a\x00b", "\r\n", "\t", "\\", '"', "%00", "null", "None", "true", "0", "-1", "1e309"],
    *["²", "١٢", "NaN", "\ufeff", "\u200b", "\U000e0041", "😀", "e\u0301", "\u202eetadpu\u202c", *BIDI],
    *["<!channel>", "<!here>", "<!everyone>", "<@U0ALICE>", "<@U0BOSS>", "<#C0GENERAL>", "&lt;!channel&gt;"],
    "<!subteam^S0ADMINS>",
    *["<https://evil.example|your bank>", "redis://:secret@10.0.0.1:6379", "{{7*7}}", "${jndi:ldap://x}"],
    *["../../etc/passwd", "'; DROP TABLE runs; --", "9" * 5000],
]


class Huge(str):
    """A long string that prints as its unit times its length, so a failing example stays readable."""

    def __repr__(self) -> str:
        return f"Huge({self[:1]!r} * {len(self)})"


def huge() -> SearchStrategy[str]:
    """Strings of 1 kB to 100 kB: plain, NULs, bidi overrides, accents, emoji, mentions, zero widths."""
    units = st.sampled_from(["A", "\x00", "\u202e", "é", "😀", "<!channel> ", "\u200b"])
    return st.builds(lambda unit, size: Huge(unit * (size // len(unit))), units, st.integers(1_000, 100_000))


def texts(surrogates: bool = True) -> SearchStrategy[str]:
    """Hostile text; lone surrogates only where the text travels as JSON (a form cannot carry them)."""
    choices = [
        st.sampled_from(NASTY),
        st.text(max_size=40),
        st.builds(lambda a, b: a + b, st.sampled_from(NASTY), st.text(max_size=20)),
        huge(),
    ]
    if surrogates:
        choices.append(st.sampled_from(["\ud800", "a\udfffb"]))
    return st.one_of(choices)


FORM_TEXTS = texts(surrogates=False)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    texts(),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
TEAMS = st.one_of(st.sampled_from(["T0OTHER", "", "t0standin", "T0STANDIN\x00", "T0STANDIN "]), VALUES)
FORGED_USERS = st.one_of(
    st.sampled_from(
        ["U0ALICE\u202e", "", "USLACKBOT", "u0alice", "<@U0ALICE>", "U0ALICE|alice", "U0SIGNOFF"]
    ),
    VALUES,
)
FORGED_CHANNELS = st.one_of(st.sampled_from(["C0OTHER", "", "#general", "<#C0FUZZ00>", "c0fuzz00"]), VALUES)
HEADER_TEXT = st.text(alphabet=string.ascii_letters + string.digits + string.punctuation + " ", max_size=40)
CONTENT_TYPES = st.sampled_from(
    [
        "application/x-www-form-urlencoded",
        "application/json",
        "text/plain",
        "multipart/form-data; boundary=x",
        "application/x-www-form-urlencoded; charset=latin-1",
        None,
    ]
)


def forged_values(approval_ids: list[str], thread_ids: list[str]) -> SearchStrategy[Any]:
    """What a button value or modal's private_metadata (`<approval id>:<index>`) could be forged to."""
    real = st.sampled_from(approval_ids)
    suffixes = [":", ":99", ":-1", ":1:0", ":²", ":١", ":0\x00", "\u202e:0", ":" + "9" * 5000, ":007", ": 1"]
    return st.one_of(
        st.sampled_from(["xyz", ":", "::", "", "appr:999", "0", ":0", "-1"]),
        st.builds(lambda a, s: a + s, real, st.sampled_from(suffixes)),
        st.builds(lambda a, i: f"{a}:{i}", real, st.integers(0, 20)),
        st.sampled_from(thread_ids),
        VALUES,
    )


# mutations ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutation:
    """One change to a JSON request: `value` set at `path` (a missing last key is added), or dropped."""

    path: Where
    value: Any = None
    drop: bool = False

    def apply(self, doc: Any) -> Any:
        if not self.path:
            return {} if self.drop else copy.deepcopy(self.value)
        parent = doc
        for step in self.path[:-1]:
            try:
                parent = parent[step]
            except (KeyError, IndexError, TypeError):
                return doc  # an earlier mutation took this path away
        last = self.path[-1]
        if isinstance(parent, dict):
            if self.drop:
                parent.pop(last, None)
            else:
                parent[last] = copy.deepcopy(self.value)
        elif isinstance(parent, list) and isinstance(last, int) and last < len(parent):
            if self.drop:
                del parent[last]
            else:
                parent[last] = copy.deepcopy(self.value)
        return doc


OPAQUE = {"blocks"}  # Block Kit the bot sent itself: mutated as a whole, not element by element


def paths(doc: Any, prefix: Where = ()) -> list[Where]:
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += [(*prefix, key)] if key in OPAQUE else paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            found += paths(value, (*prefix, index))
    return found


def at(doc: Any, path: Where) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def mutations(template: Any, aimed: dict[Where, SearchStrategy[Any]]) -> SearchStrategy[list[Mutation]]:
    """Up to three changes: any field dropped, set to a hostile value of any type, an extra field
    added; and the fields an attacker would aim at, set to forgeries."""
    where = paths(template)
    objects = [p for p in where if isinstance(at(template, p), dict)]
    one = st.one_of(
        st.builds(Mutation, st.sampled_from(where), st.none(), st.just(True)),
        st.builds(Mutation, st.sampled_from(where), VALUES),
        st.builds(
            lambda p, k, v: Mutation((*p, k), v), st.sampled_from(objects), st.text(max_size=12), VALUES
        ),
        *[st.builds(Mutation, st.just(path), values) for path, values in aimed.items()],
    )
    return st.lists(one, max_size=3)


def mutated(doc: Any, changes: list[Mutation]) -> Any:
    """A copy of `doc` with `changes` (a payload shares its card's blocks and options)."""
    doc = copy.deepcopy(doc)
    for change in changes:
        doc = change.apply(doc)
    return doc


@dataclass(frozen=True)
class FormEdit:
    """One change to a form body: every `key` dropped (value None), set to `value`, or sent twice."""

    key: str
    value: str | None = None
    again: bool = False

    def apply(self, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
        if self.value is None:
            return [(k, v) for k, v in pairs if k != self.key]
        if self.again or all(k != self.key for k, _ in pairs):
            return [*pairs, (self.key, self.value)]
        return [(k, self.value if k == self.key else v) for k, v in pairs]


def json_bytes(value: Any, raw_utf8: bool = False) -> bytes:
    """JSON as Slack sends it (UTF-8), or ASCII with escapes (the only way to carry a lone surrogate)."""
    if raw_utf8:
        try:
            return json.dumps(value, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            pass
    return json.dumps(value).encode()


def form_payload(payload: Any) -> bytes:
    return urlencode({"payload": json.dumps(payload)}).encode()


def brief(body: bytes) -> str:
    return repr(body[:600]) + (f"… ({len(body):,} bytes)" if len(body) > 600 else "")


# signing and headers --------------------------------------------------------------------------


def sign(body: bytes, stamp: str, secret: str = SECRET) -> str:
    """X-Slack-Signature as Slack computes it (what slack_sdk's SignatureVerifier computes over text;
    this signs bodies that are not UTF-8 too)."""
    digest = hmac.new(secret.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    return f"v0={digest}"


def signed(body: bytes, content_type: str | None, stamp: str | None = None) -> dict[str, str]:
    stamp = stamp or str(int(time.time()))
    headers = {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": sign(body, stamp)}
    return {**headers, "Content-Type": content_type} if content_type else headers


@dataclass(frozen=True)
class Forgery:
    """How a request fails to be Slack's: a header missing or malformed, a replay, a wrong signature."""

    kind: str
    detail: str | int = ""

    def headers(self, body: bytes, content_type: str | None) -> dict[str, str]:
        now = str(int(time.time()))
        good = signed(body, content_type, now)
        match self.kind:
            case "no signature":
                del good["X-Slack-Signature"]
            case "no timestamp":
                del good["X-Slack-Request-Timestamp"]
            case "neither":
                del good["X-Slack-Signature"], good["X-Slack-Request-Timestamp"]
            case "timestamp":
                good["X-Slack-Request-Timestamp"] = str(self.detail)
                good["X-Slack-Signature"] = sign(body, str(self.detail))
            case "stale" | "future":
                stamp = str(int(now) + (-1 if self.kind == "stale" else 1) * int(self.detail))
                good = signed(body, content_type, stamp)
            case "wrong secret":
                good["X-Slack-Signature"] = sign(body, now, "not-the-secret")
            case "other body":
                good["X-Slack-Signature"] = sign(body + b" ", now)
            case "v1":
                good["X-Slack-Signature"] = "v1=" + good["X-Slack-Signature"][3:]
            case "truncated":
                good["X-Slack-Signature"] = good["X-Slack-Signature"][:-1]
            case "signature":
                good["X-Slack-Signature"] = str(self.detail)
        return good


FORGERIES = st.one_of(
    st.sampled_from(
        [Forgery(k) for k in ("no signature", "no timestamp", "neither", "wrong secret", "other body", "v1")]
        + [Forgery("truncated")]
    ),
    st.builds(Forgery, st.just("timestamp"), HEADER_TEXT.map(str.strip)),
    st.builds(Forgery, st.sampled_from(["stale", "future"]), st.integers(301, 10**9)),
    st.builds(Forgery, st.just("signature"), HEADER_TEXT.map(str.strip)),
)


def garbage() -> SearchStrategy[bytes]:
    """Bodies that are no request at all: random bytes, broken JSON and forms, JSON of any shape."""
    fixed = [
        b"payload=not-json",
        b"payload=[1]",
        b"payload=",
        b"payload=null",
        b"payload=%7B",
        b'payload="x"',
        b"payload=" + quote('{"type": "block_actions"}').encode(),
        b"payload=" + quote('{"type": "view_submission", "view": 1}').encode(),
        b"{",
        b"[1]",
        b"null",
        b'"x"',
        b"{}",
        b'{"type": "event_callback"}',
        b'{"type": "event_callback", "event": "app_mention"}',
        b'{"type": "url_verification", "challenge": "c"}',
        b'{"a": ' + b"9" * 5000 + b"}",
        b"command=/signoff&text=hi",
        b"\xff\xfe\x00",
        "\u202e".encode() * 30_000,
    ]
    return st.one_of(
        st.sampled_from(fixed),
        st.binary(max_size=512),
        st.text(max_size=200).map(str.encode),
        VALUES.map(json_bytes),
        st.dictionaries(FORM_TEXTS, FORM_TEXTS, max_size=4).map(lambda d: urlencode(d).encode()),
        VALUES.map(lambda v: b"payload=" + quote(json.dumps(v)).encode()),
    )


# the running bot ------------------------------------------------------------------------------


# what Signoff itself writes in mrkdwn --------------------------------------------------------------

MARKUP = re.compile(r"<[^<>]*>?")  # Slack reads `<…>` as a mention, a broadcast or a link
DRAWN_LINK = re.compile(r'<a href="([^"]*)"[^>]*>(.*?)</a>', re.S)  # a Markdown link, as drawn
SLACK_DATE = re.compile(r"!date\^\d{1,12}\^\{date_short_pretty\} \{time\}\|\d{1,12}")


@dataclass(frozen=True)
class Known:
    """What Signoff may name in markup: the people who used Slack with it, its configured groups,
    the channels its runs are in, and permalinks Slack gave it (`<permalink|label>`), dates."""

    people: frozenset[str]
    groups: frozenset[str]
    channels: frozenset[str]
    permalink: re.Pattern[str]

    def foreign(self, text: str) -> list[str]:
        """The markup in `text` Signoff did not write: a broadcast (`<!channel>`), a mention of
        anyone else, another group or channel, a disguised link, or a `<` that opens nothing."""
        found = []
        for match in MARKUP.finditer(text):
            token = match.group(0)
            inner = token[1:-1]
            url, bar, _ = inner.partition("|")
            ours = token.endswith(">") and bool(
                SLACK_DATE.fullmatch(inner)
                or (inner[:1] == "@" and inner[1:] in self.people)
                or (inner.startswith("!subteam^") and inner[9:] in self.groups)
                or (inner[:1] == "#" and inner[1:] in self.channels)
                or (bar and self.permalink.fullmatch(url))
            )
            if not ours:
                found.append(token[:80])
        return found


def mrkdwn_texts(call: Call) -> Iterator[tuple[str, str]]:
    """(where, text) of everything in a Web API call that Slack reads as mrkdwn: its `text`, and
    every mrkdwn text object in its blocks, view or attachments (plain_text is never parsed), and
    a streamed message's Markdown (`markdown_text`, markdown_text chunks: mentions are read there)."""
    for key in ("text", "markdown_text"):
        if isinstance(call.args.get(key), str):
            yield key, call.args[key]

    def walk(node: Any, where: str) -> Iterator[tuple[str, str]]:
        if isinstance(node, dict):
            if node.get("type") in ("mrkdwn", "markdown_text") and isinstance(node.get("text"), str):
                yield where, node["text"]
            for key, value in node.items():
                yield from walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                yield from walk(value, f"{where}[{index}]")

    for key in ("blocks", "view", "attachments", "chunks"):
        yield from walk(call.args.get(key), key)


class Driver:
    """One event loop in a background thread: the stand-in, the Redis client and the HTTP session
    live there for the module, and each example runs one coroutine on it."""

    def __init__(self) -> None:
        self.aio = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.aio.run_forever, name="fuzz-loop", daemon=True)
        self.thread.start()

    def run(self, work: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.aio).result(timeout)

    def close(self) -> None:
        self.aio.call_soon_threadsafe(self.aio.stop)
        self.thread.join(10)
        self.aio.close()


def log_problems(text: str) -> list[str]:
    """Tracebacks, and JSON lines at level error or critical or carrying an exception, in a few words."""
    lines = text.splitlines()
    found: list[str] = []
    for n, line in enumerate(lines):
        try:
            record = json.loads(line) if line.startswith("{") else None
        except ValueError:
            record = None
        if isinstance(record, dict):
            if record.get("level") in ("error", "critical") or "exception" in record:
                record.pop("timestamp", None)
                exception = str(record.pop("exception", "")).strip().splitlines()
                found.append(json.dumps(record)[:400] + (f" {exception[-1]}" if exception else ""))
        elif line.startswith("Traceback"):
            error = next((x for x in lines[n + 1 :] if x and not x.startswith(" ")), "?")
            found.append(f"{lines[n - 1] if n else ''} -> {error}"[:600])
    return list(dict.fromkeys(found))


class LogWatch:
    """The bot's log, read on from where the last look stopped."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0

    def skip(self) -> None:
        self.offset = self.path.stat().st_size

    def problems(self) -> list[str]:
        with self.path.open("rb") as log:
            log.seek(self.offset)
            chunk = log.read()
        complete = chunk.rfind(b"\n") + 1
        self.offset += complete
        return log_problems(chunk[:complete].decode("utf-8", "replace"))


@dataclass
class Snapshot:
    """Every key's type and content; `expiring` keys have a TTL (a rate limiter may lapse meanwhile)."""

    contents: dict[str, tuple[str, Any]]
    expiring: set[str]

    def changes(self, after: Snapshot) -> list[str]:
        changed = []
        for key in sorted(self.contents.keys() | after.contents.keys()):
            if key not in after.contents and key in self.expiring:
                continue
            was, now = self.contents.get(key), after.contents.get(key)
            if was != now:
                changed.append(f"{key}: {str(was)[:200]} -> {str(now)[:200]}")
        return changed

    def without_delivery(self, prefix: str) -> Snapshot:
        """Less what the bot writes on its own while it posts runs accepted earlier to Slack: limiter
        and refresh bookkeeping, post claims, thread bindings, a run's root ts and status line."""
        kept: dict[str, tuple[str, Any]] = {}
        for key, (kind, content) in self.contents.items():
            name = re.sub(r"^\{[^}]*\}:", "", key.removeprefix(f"{prefix}:"))  # less a partition's tag
            if name.startswith(DELIVERY):
                continue
            if name.startswith("run:") and kind == "string":
                content = {k: v for k, v in json.loads(content).items() if k != "thread_ts"}
            elif name.startswith("runstate:") and kind == "hash":
                content = {k: v for k, v in content.items() if k != "status_ts"}
            kept[key] = (kind, content)
        return Snapshot(kept, self.expiring)


@dataclass(frozen=True)
class Answer:
    status: int
    body: str
    seconds: float

    @property
    def said(self) -> str:
        """A command's answer as Slack shows it (JSON `text`, or the plain body)."""
        try:
            reply = json.loads(self.body)
        except ValueError:
            return self.body
        return str(reply.get("text", "")) if isinstance(reply, dict) else self.body


@dataclass
class Click:
    """A control on a real card (or in the review modal of one), and the payload Slack sends for
    it (the shape mutations aim at)."""

    card: Message
    action_id: str
    selected: str | None
    template: dict[str, Any]
    view: dict[str, Any] | None = None  # the review modal it is in, if it is in one


@dataclass
class Fuzz:
    scene: Harness
    driver: Driver
    session: aiohttp.ClientSession
    logs: LogWatch
    approval_ids: list[str]
    thread_ids: list[str]
    roots: list[tuple[str, str]]  # (channel, ts) of each run's Slack thread
    clicks: list[Click]
    views: list[dict[str, Any]]
    realistic: list[bytes]  # a real click, submission, command, mention and run request
    notes: list[str] = field(default_factory=list)  # what the running example has to say
    people: set[str] = field(default_factory=lambda: {*USERS, "U0SIGNOFF"})  # who used Slack with it
    inspected: int = 0  # the stand-in's calls whose texts were checked already

    @property
    def team(self) -> str:
        return self.scene.standin.team_id

    @property
    def redis(self) -> Any:
        return self.scene.store.redis

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run `work` on the event loop; what it `say`s is noted on the Hypothesis example, if any."""
        self.notes = []
        try:
            return self.driver.run(work)
        finally:
            if currently_in_test_context():
                for text in self.notes:
                    note(text)

    def say(self, text: str) -> None:
        self.notes.append(text)

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> Answer:
        """POST to the bot; no answer within Slack's 3 s fails the example."""
        started = time.perf_counter()
        skip = () if "Content-Type" in headers else ("Content-Type",)
        try:
            async with self.session.post(
                f"http://127.0.0.1:{self.scene.port}{path}",
                data=body,
                headers=headers,
                skip_auto_headers=skip,
                timeout=aiohttp.ClientTimeout(total=ACK_S),
            ) as reply:
                text = await reply.text(errors="replace")
                answer = Answer(reply.status, text, time.perf_counter() - started)
        except TimeoutError:
            raise AssertionError(f"no answer within {ACK_S} s") from None
        self.say(f"answer: HTTP {answer.status} in {answer.seconds * 1000:.0f} ms: {answer.body[:300]!r}")
        return answer

    def expect_sane(self, answer: Answer) -> None:
        """No 5xx, and nothing in the bot's log that input should never cause."""
        problems = self.logs.problems()
        assert answer.status < 500, f"HTTP {answer.status} {answer.body[:200]!r}; log: {problems}"
        assert not problems, "the bot logged:\n" + "\n".join(problems)

    def assert_quiet(self) -> None:
        """What work after the acks logged, once it had a moment to run; and what it sent Slack."""
        time.sleep(1.0)
        problems = self.logs.problems()
        assert not problems, "after the acks, the bot logged:\n" + "\n".join(problems)
        self.assert_inert()

    def met(self, user: Any) -> None:
        """`user` used Slack with the bot (a signed request said so): Signoff may mention them."""
        if matches(user, USER_ID):
            self.people.add(user)

    def assert_inert(self) -> None:
        """No text the bot sent Slack since the last look holds markup Signoff did not write."""
        problems = self.run(self.foreign_markup())
        assert not problems, "Signoff sent Slack markup it did not write:\n" + "\n".join(problems[:20])

    async def foreign_markup(self) -> list[str]:
        calls = self.scene.standin.calls[self.inspected :]
        self.inspected += len(calls)
        known = await self.known()
        found = [
            f"{call.method} {where}: {token!r} in {text[:300]!r}"
            for call in calls
            for where, text in mrkdwn_texts(call)
            for token in known.foreign(text)
        ]
        return found + [  # a streamed answer's Markdown, drawn: no link whose label hides its address
            f"{call.method} markdown: a link {label!r} to {href!r}"
            for call in calls
            if call.method.startswith("chat.") and call.method.endswith("Stream")
            for _, text in mrkdwn_texts(call)
            for href, label in DRAWN_LINK.findall(markdown_html(text))
            if html.unescape(label) != html.unescape(href)
        ]

    async def known(self) -> Known:
        """Who and where Signoff may name now: people who used Slack with it and requesters of its
        runs and the approvers its policy names, its groups, the channels of its runs, its permalinks."""
        named = {i for ids in APPROVERS.values() for i in ids}
        people, channels = self.people | {i for i in named if not i.startswith("S")}, set()
        for key in await self.keys(f"{self.scene.prefix}:*:run:*"):
            raw = await self.redis.get(key) if await self.redis.type(key) == "string" else None
            run = json.loads(raw) if raw else {}
            people.add(str(run.get("requester")))
            channels.add(str(run.get("channel")))
        root = re.escape(self.scene.standin.base_url.removesuffix("api/"))
        return Known(
            frozenset(people),
            frozenset(i for i in named if i.startswith("S")),
            frozenset(channels),
            re.compile(rf"{root}archives/[CDG][A-Z0-9]+/p\d+"),
        )

    # Redis ----------------------------------------------------------------------------------

    async def keys(self, pattern: str) -> list[str]:
        return sorted([key async for key in self.redis.scan_iter(match=pattern, count=1000)])

    async def snapshot(self, keys: list[str] | None = None) -> Snapshot:
        keys = await self.keys(f"{self.scene.prefix}:*") if keys is None else keys
        async with self.redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.type(key)
                pipe.pttl(key)
            found = await pipe.execute()
        kinds, ttls = found[::2], found[1::2]
        async with self.redis.pipeline(transaction=False) as pipe:
            for key, kind in zip(keys, kinds, strict=True):
                if kind == "string":
                    pipe.get(key)
                elif kind == "hash":
                    pipe.hgetall(key)
                elif kind == "list":
                    pipe.lrange(key, 0, -1)
                elif kind == "set":
                    pipe.smembers(key)
                elif kind == "zset":
                    pipe.zrange(key, 0, -1, withscores=True)
                elif kind == "stream":
                    pipe.xinfo_stream(key)
                else:
                    pipe.exists(key)
            contents = await pipe.execute(raise_on_error=False)
        digest: dict[str, tuple[str, Any]] = {}
        for key, kind, content in zip(keys, kinds, contents, strict=True):
            if kind == "none" or isinstance(content, Exception) or content in (None, {}, [], 0):
                continue  # gone between the two reads (a lease or a rate limiter lapsed)
            if kind == "stream":
                content = (content["length"], content["last-generated-id"])
            elif kind == "set":
                content = sorted(content)
            digest[key] = (kind, content)
        return Snapshot(digest, {k for k, ttl in zip(keys, ttls, strict=True) if ttl > 0})

    async def records(self) -> Snapshot:
        """What a decision or a started run writes: approvals, their decisions, the three streams."""
        streams = [s for p in self.scene.store.keys.partitions for s in (p.commands, p.audit, p.events)]
        approvals = await self.keys(f"{self.scene.prefix}:*:approval:*")
        return await self.snapshot([*approvals, *streams])

    async def settle(
        self, measure: Callable[[], Awaitable[Any]] | None = None, quiet: float = 1.0, timeout: float = 30
    ) -> None:
        """Until what `measure` reads (by default every key but those that lapse) stays the same for
        `quiet` seconds: the work earlier requests set off is done."""
        read = measure or self.lasting
        deadline = time.monotonic() + timeout
        last, since = await read(), time.monotonic()
        while time.monotonic() - since < quiet:
            assert time.monotonic() < deadline, f"Redis still changing after {timeout} s"
            await asyncio.sleep(0.1)
            now = await read()
            if now != last:
                last, since = now, time.monotonic()

    async def lasting(self) -> dict[str, tuple[str, Any]]:
        snapshot = await self.snapshot()
        return {k: v for k, v in snapshot.contents.items() if k not in snapshot.expiring}

    # consistency ------------------------------------------------------------------------------

    async def inconsistencies(self) -> list[str]:
        """Every approval as the decide script promises to keep it: decisions only on actions that
        exist, of a type each allows, by someone allowed to decide, of this workspace (the decision
        carries it), that the protocol and the form's bounds accept, mirrored in the resume payload;
        closed (resuming) exactly when every action is decided."""
        problems: list[str] = []
        store = self.scene.store
        ids = self.approval_ids
        records = await asyncio.gather(*(store.approvals.get(i) for i in ids), return_exceptions=True)
        payloads = await asyncio.gather(*(self.redis.hgetall(store.keys.decisions(i)) for i in ids))
        for approval_id, approval, raw in zip(ids, records, payloads, strict=True):
            if isinstance(approval, BaseException):
                problems.append(f"{approval_id}: the record no longer reads: {approval!r}"[:500])
                continue
            if approval is None:
                problems.append(f"{approval_id}: the record is gone")
                continue
            actions = approval.request.actions
            if {int(i) for i in raw if i.isdigit()} != set(approval.decided) or len(raw) != len(
                approval.decided
            ):
                problems.append(
                    f"{approval_id}: decisions {sorted(raw)} vs decided {sorted(approval.decided)}"
                )
            for index, decided in approval.decided.items():
                where = f"{approval_id}[{index}] {decided.decision!r} by {decided.user!r}"[:400]
                if not 0 <= index < approval.size:
                    problems.append(f"{where}: no such action")
                    continue
                if json.loads(raw.get(str(index), "null")) != decided.decision:
                    problems.append(f"{where}: the resume payload holds {raw.get(str(index))!r}"[:500])
                if not USER_ID.fullmatch(str(decided.user)):
                    problems.append(f"{where}: decided by something that is not a Slack user id")
                if decided.team != self.team:
                    problems.append(f"{where}: carries workspace {decided.team!r}, not this one")
                if decided.outcome is Outcome.WITHDRAWN:  # the requester's Withdraw: theirs alone
                    if decided.user != approval.requester:
                        problems.append(f"{where}: withdrawn by someone who did not ask")
                else:
                    if decided.user == approval.requester:
                        problems.append(f"{where}: decided by the requester")
                    if actions and actions[index].name == "send_email" and decided.user != ALICE:
                        problems.append(f"{where}: send_email decided by someone not on its approver list")
                problems += [
                    f"{where}: {p}" for p in decision_problems(approval.request, index, decided.decision)
                ]
            complete = len(approval.decided) >= approval.size
            expected = ApprovalStatus.RESUMING if complete else ApprovalStatus.PENDING
            if approval.status is not expected:
                problems.append(
                    f"{approval_id}: {len(approval.decided)}/{approval.size} decided, {approval.status}"
                )
        return problems

    async def stream_inconsistencies(self) -> list[str]:
        """One resume command per complete approval, carrying its decisions in order; one audit entry
        per decision, saying what the record says."""
        store, problems = self.scene.store, []
        resumes: dict[str, list[Resume]] = {}
        for _, fields in await store.queue.entries(lambda p: p.commands):
            try:
                command = decode_command(fields)
            except Malformed as exc:
                problems.append(f"a command no runner can read: {exc}"[:300])
                continue
            if isinstance(command, Resume):
                resumes.setdefault(command.approval_id, []).append(command)
        audit: dict[str, list[dict[str, Any]]] = {}
        for entry in await store.audit.entries():
            audit.setdefault(entry["approval_id"], []).append(entry)
        for approval_id in self.approval_ids:
            approval = await store.approvals.get(approval_id)
            if approval is None:
                continue
            complete = len(approval.decided) >= approval.size
            found = resumes.get(approval_id, [])
            if len(found) != (1 if complete else 0):
                problems.append(f"{approval_id}: {len(found)} resume commands, complete={complete}")
            ordered = [approval.decided[i].decision for i in range(approval.size) if i in approval.decided]
            if found and found[0].decisions != ordered:
                problems.append(f"{approval_id}: resumed with {found[0].decisions!r}"[:400])
            said = sorted(
                (e["index"], e["user"], json.dumps(e["decision"])) for e in audit.get(approval_id, [])
            )
            kept = sorted((i, d.user, json.dumps(d.decision)) for i, d in approval.decided.items())
            if said != kept:
                problems.append(f"{approval_id}: audit {said!r} vs record {kept!r}"[:500])
        return problems


def decision_problems(request: PendingRequest, index: int, decision: dict[str, Any]) -> list[str]:
    """Why the protocol (or the form that took it) would not have this decision."""
    try:
        if request.kind is RequestKind.QUESTION:
            if decision.get("type") != "answer":
                return ["a question answered with a decision"]
            check_answer(request, decision.get("answer"))
        else:
            check_decision(request.actions[index], decision)
    except DecisionRefused as refused:
        return [f"the protocol refuses it: {refused}"[:300]]
    edited = (decision.get("edited_action") or {}).get("args") or {}
    typed = [decision.get("message"), decision.get("answer"), *edited.values()]
    if any(isinstance(t, str) and len(t) > FORM_MAX for t in typed):
        return [f"text longer than the form's {FORM_MAX:,} characters"]
    return []


# the fixture ----------------------------------------------------------------------------------


def pause_requests() -> list[PendingRequest]:
    """The pauses the demo agent makes: a batch, a per-call approval, two questions, a batch of 16,
    and one of 45 (bigger than a card: some of it is seen and decided in the review modal)."""
    email = ActionReview(
        name="send_email",
        args={"to": "finance@acme.com", "subject": "Q3", "body": "numbers"},
        description="Tool execution requires approval",
        allowed_decisions=("approve", "reject"),
    )
    file_schema = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    }
    write = ActionReview(
        name="write_file",
        args={"path": "/tmp/report.md", "content": "# Q3\n"},
        allowed_decisions=("approve", "edit", "reject"),
        args_schema=file_schema,
    )
    delete = ActionReview(
        name="delete",
        args={"path": "/tmp/old"},
        allowed_decisions=("approve", "edit", "reject", "respond"),
        args_schema={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    )

    def refund(order: int) -> ActionReview:
        return ActionReview(
            name="issue_refund",
            args={"order_id": str(order), "amount": 50},
            allowed_decisions=("approve", "reject"),
        )

    def new() -> str:
        return uuid.uuid4().hex

    return [
        PendingRequest(interrupt_id=new(), kind=RequestKind.BATCHED, actions=(email, refund(1235), write)),
        PendingRequest(interrupt_id=new(), kind=RequestKind.PER_CALL, actions=(delete,)),
        PendingRequest(
            interrupt_id=new(), kind=RequestKind.QUESTION, question="Which account pays the refund?"
        ),
        PendingRequest(
            interrupt_id=new(),
            kind=RequestKind.QUESTION,
            question={"ask": "How many units?"},
            answer_schema={"type": "integer", "minimum": 1},
        ),
        PendingRequest(
            interrupt_id=new(), kind=RequestKind.BATCHED, actions=tuple(refund(n) for n in range(16))
        ),
        PendingRequest(
            interrupt_id=new(), kind=RequestKind.BATCHED, actions=tuple(refund(n) for n in range(45))
        ),
    ]


def controls(card: Message | dict[str, Any]) -> list[tuple[str, str | None]]:
    """(action_id, overflow option) of every button and menu option on the card (or view)."""
    found: list[tuple[str, str | None]] = []
    for block in card.blocks if isinstance(card, Message) else card["blocks"]:
        elements = list(block.get("elements", [])) if block.get("type") == "actions" else []
        if block.get("accessory"):
            elements.append(block["accessory"])
        for element in elements:
            if element.get("type") == "button" and "url" not in element:
                found.append((element["action_id"], None))
            elif element.get("type") == "overflow":
                found += [(element["action_id"], option["value"]) for option in element["options"]]
    return found


def submission(team: str, user: str, view: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """The view_submission Slack sends for `view` (as the stand-in's people send it)."""
    return view_submission(team, user, view, values, f"{int(time.time())}.{uuid.uuid4().hex[:12]}")


def slash_form(team: str, user: str, channel: str, text: str) -> list[tuple[str, str]]:
    """The form Slack posts for `/signoff text` (as the stand-in's people send it)."""
    return [
        ("token", "legacy-verification-token"),
        ("team_id", team),
        ("team_domain", "standin"),
        ("channel_id", channel),
        ("channel_name", channel.lower()),
        ("user_id", user),
        ("user_name", user.lower()),
        ("command", "/signoff"),
        ("text", text),
        ("api_app_id", "A0SIGNOFF"),
        ("response_url", f"http://127.0.0.1/response/{uuid.uuid4().hex}"),
        ("trigger_id", f"{int(time.time())}.{uuid.uuid4().hex[:12]}"),
    ]


COPIES = 2  # of each pause, each in a channel of its own (Slack posts about one message a second per channel)
FORMS = ("edit", "reject", "respond", "answer")


async def start(scene: Harness, driver: Driver) -> Fuzz:
    """The bot as a process; five kinds of pause, twice, with their cards posted; their modals opened."""
    scene.spawn("bot")
    await scene.wait_healthy(scene.port)
    thread_ids = []
    for copy_number in range(COPIES):
        for n, request in enumerate(pause_requests()):
            run = Run(
                thread_id=f"fuzz-{uuid.uuid4().hex[:12]}",
                graph="demo",
                channel=f"C0FUZZ{copy_number}{n}",
                requester=RILEY,
                task="Refund order 1235 for 5000",
            )
            await scene.store.runs.save(run)
            await scene.store.runs.set_state(run.thread_id, RunState.WAITING)
            await scene.store.approvals.create(approval_for(request, run, "demo"))
            thread_ids.append(run.thread_id)
    cards, approval_ids, roots = [], [], []
    for thread_id in thread_ids:
        cards.append(copy.deepcopy(await scene.card(thread_id, timeout=60)))
        approval_ids += [a.approval_id for a in await scene.store.approvals.of_thread(thread_id)]
        posted = await scene.store.runs.get(thread_id)
        assert posted is not None and posted.thread_ts is not None
        roots.append((posted.channel, posted.thread_ts))
    clicks = [
        Click(card, action_id, selected, scene.standin.block_action_payload(ALICE, card, action_id, selected))
        for card in cards
        for action_id, selected in controls(card)
        if not re.fullmatch(r"choose:([2-9]|\d\d+)", action_id)  # a big batch's rows: two stand for all
    ]
    for card in cards[: len(cards) // COPIES]:  # inside the review modal of a batch bigger than a card
        if ("review", None) in controls(card):
            review = copy.deepcopy(await scene.open_modal(ALICE, card, "review"))
            clicks += [
                Click(
                    card, action_id, None, scene.standin.view_action_payload(ALICE, review, action_id), review
                )
                for action_id, _ in controls(review)
                if not re.fullmatch(r"\w+:([2-9]|\d\d+)", action_id) or action_id.startswith("page:")
            ]
    views = []
    for card in cards[: len(cards) // COPIES]:
        for action_id, selected in controls(card):
            if selected is None and action_id.partition(":")[0] in FORMS:
                views.append(copy.deepcopy(await scene.open_modal(ALICE, card, action_id)))
    team = scene.standin.team_id
    mention = scene.standin.message_event(
        scene.standin.write(ALICE, "C0FUZZ99", "<@U0SIGNOFF> Refund order 7 for 700"), "app_mention"
    )
    fuzz = Fuzz(
        scene=scene,
        driver=driver,
        session=aiohttp.ClientSession(),
        logs=LogWatch(scene.logs[0]),
        approval_ids=approval_ids,
        thread_ids=thread_ids,
        roots=roots,
        clicks=clicks,
        views=views,
        realistic=[
            form_payload(clicks[0].template),
            form_payload(submission(team, ALICE, views[0], {})),
            urlencode(slash_form(team, ALICE, "C0FUZZ99", "Refund order 8 for 80")).encode(),
            json_bytes(mention),
            json_bytes({"task": "Refund order 9 for 90", "channel": "C0FUZZ99"}),
        ],
    )
    await fuzz.settle()
    return fuzz


@pytest.fixture(scope="module")
def fuzz(redis_url: str) -> Iterator[Fuzz]:
    driver = Driver()
    env = {
        "SIGNOFF_API_TOKEN": TOKEN,
        "SIGNOFF_APPROVERS": json.dumps(APPROVERS),
        "SIGNOFF_REQUESTER_CANNOT_APPROVE": "1",
        "SIGNOFF_GRAPHS_FILE": str(LANGGRAPH_JSON),
    }

    async def opened() -> Harness:
        return await Harness(redis_url, env=env).__aenter__()

    scene = driver.run(opened())
    ready: Fuzz | None = None
    try:
        ready = driver.run(start(scene, driver), timeout=180)
        yield ready
    finally:
        if ready is not None:
            driver.run(ready.session.close())
        driver.run(scene.__aexit__(None, None, None))
        driver.close()


# 1. unsigned and forged ---------------------------------------------------------------------


@pytest.mark.fuzz
def test_unsigned_or_forged_requests_get_401_and_change_nothing(fuzz: Fuzz) -> None:
    """Whatever the body, even a real click, command or event: without Slack's valid, fresh signature
    the bot answers 401 (or 413 for a body over the server's limit, refused unread just the same)
    and no key in Redis changes."""
    fuzz.run(fuzz.settle())
    fuzz.logs.skip()

    prefix = fuzz.scene.prefix

    async def case(body: bytes, content_type: str | None, forgery: Forgery) -> None:
        # (less what the bot writes on its own for runs accepted earlier: a waiting DM's status
        # is set again every 100 s, its lane's bookkeeping with it)
        before = (await fuzz.snapshot()).without_delivery(prefix)
        answer = await fuzz.post("/slack/events", body, forgery.headers(body, content_type))
        changed = before.changes((await fuzz.snapshot()).without_delivery(prefix))
        fuzz.expect_sane(answer)
        too_big = answer.status == 413 and len(body) > MAX_BODY
        assert answer.status == 401 or too_big, f"HTTP {answer.status} {answer.body[:200]!r}"
        assert not changed, "Redis changed:\n" + "\n".join(changed)

    @fuzz_settings("unsigned")
    @given(
        body=st.one_of(st.sampled_from(fuzz.realistic), garbage()),
        content_type=CONTENT_TYPES,
        forgery=FORGERIES,
    )
    def unsigned(body: bytes, content_type: str | None, forgery: Forgery) -> None:
        note(f"body: {brief(body)}")
        fuzz.run(case(body, content_type, forgery))

    unsigned()
    fuzz.assert_quiet()


# 2. signed garbage ----------------------------------------------------------------------------


@pytest.mark.fuzz
def test_signed_garbage_is_answered_without_a_5xx_and_changes_nothing(fuzz: Fuzz) -> None:
    """A correct signature over a body that is no request (bytes that are not UTF-8, broken JSON or
    forms, JSON of any shape): the bot answers it without crashing and changes no key in Redis."""
    fuzz.run(fuzz.settle())
    fuzz.logs.skip()

    async def case(body: bytes, content_type: str | None) -> None:
        before = (await fuzz.snapshot()).without_delivery(fuzz.scene.prefix)  # (as for unsigned)
        answer = await fuzz.post("/slack/events", body, signed(body, content_type))
        changed = before.changes((await fuzz.snapshot()).without_delivery(fuzz.scene.prefix))
        fuzz.expect_sane(answer)
        assert not changed, "Redis changed:\n" + "\n".join(changed)

    @fuzz_settings("garbage")
    @given(body=garbage(), content_type=CONTENT_TYPES)
    def signed_garbage(body: bytes, content_type: str | None) -> None:
        note(f"body: {brief(body)}")
        fuzz.run(case(body, content_type))

    signed_garbage()
    fuzz.assert_quiet()


# 3. POST /runs --------------------------------------------------------------------------------

AUTHS = [
    None,
    "",
    "Bearer",
    f"Bearer {TOKEN[:-1]}",
    f"Bearer {TOKEN}x",
    TOKEN,
    f"Token {TOKEN}",
    f"Bearer  {TOKEN}",
    f"Bearer {TOKEN.upper()}",
    f"Bearer {TOKEN}\u202e",
    "Bearer tokén",
    "Basic dXNlcjpmdXp6LWFwaS10b2tlbg==",
]
RUN_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "task": st.one_of(
            st.sampled_from(["Refund order 1235 for 5000", "Email finance@acme.com Q3"]), VALUES
        ),
        "channel": st.one_of(st.from_regex(r"C0[A-Z0-9]{8}", fullmatch=True), VALUES),
        "graph": st.one_of(st.sampled_from(["demo", "per_call", "memory", "nope", ""]), VALUES),
        "requester": st.one_of(st.sampled_from([ALICE, BOB]), VALUES),
    },
)
RUN_BODIES = st.one_of(
    st.builds(
        lambda fields, extra, raw: json_bytes({**extra, **fields}, raw),
        RUN_FIELDS,
        st.dictionaries(st.text(max_size=8), VALUES, max_size=2),
        st.booleans(),
    ),
    garbage(),
)


async def newest_starts(fuzz: Fuzz, count: int = 10) -> list[StartRun]:
    entries = (await fuzz.scene.store.queue.entries(lambda p: p.commands, newest=count))[:count]
    commands = []
    for _, fields in entries:
        try:
            commands.append(decode_command(fields))
        except Malformed:
            continue
    return [c for c in commands if isinstance(c, StartRun)]


def run_problems(run: Run | None, thread_id: str, starts: list[StartRun]) -> list[str]:
    """A started run as it has to be: it talks in a Slack channel, for a Slack user (or for nobody),
    with a graph that exists and something to do, and its start command carries that task."""
    if run is None:
        return [f"{thread_id}: started, but there is no run record"]
    what = f"run {thread_id} (channel {run.channel!r}, requester {run.requester!r})"[:300]
    problems = []
    if not CHANNEL_ID.fullmatch(run.channel):
        problems.append(f"{what}: its channel is not a Slack channel id")
    if run.requester is not None and not USER_ID.fullmatch(run.requester):
        problems.append(f"{what}: its requester is not a Slack user id")
    if run.graph not in JSON_GRAPHS:
        problems.append(f"{what}: no graph {run.graph!r}")
    if not run.task.strip():
        problems.append(f"{what}: nothing to do (task {run.task!r})")
    if not any(s.thread_id == thread_id and s.text == run.task for s in starts):
        problems.append(f"{what}: no start command carries its task")
    return problems


@pytest.mark.fuzz
def test_runs_api_refuses_without_a_change_and_records_what_it_accepts(fuzz: Fuzz) -> None:
    """POST /runs with any bearer and any body: without the exact token, 401; any answer but 202
    changes nothing (the bot's Slack bookkeeping for runs accepted earlier aside); a 202 is a run of
    exactly the task, channel, graph and requester asked for, with its start command queued."""
    fuzz.logs.skip()
    prefix = fuzz.scene.prefix

    async def case(body: bytes, auth: str | None, key: str | None) -> None:
        headers = {"Content-Type": "application/json"}
        if auth is not None:
            headers["Authorization"] = auth
        if key is not None:
            headers["Idempotency-Key"] = key
        before = (await fuzz.snapshot()).without_delivery(prefix)
        answer = await fuzz.post("/runs", body, headers)
        changed = before.changes((await fuzz.snapshot()).without_delivery(prefix))
        fuzz.expect_sane(answer)
        if auth != f"Bearer {TOKEN}":
            assert answer.status == 401, f"HTTP {answer.status} without the token: {answer.body[:200]!r}"
        if answer.status != 202:
            assert not changed, f"HTTP {answer.status}, yet Redis changed:\n" + "\n".join(changed)
            return
        try:
            asked = json.loads(body)
        except ValueError:
            asked = None
        assert isinstance(asked, dict), "accepted a body that is not a JSON object"
        reply = json.loads(answer.body)
        run = await fuzz.scene.store.runs.get(reply["thread_id"])
        problems = run_problems(run, reply["thread_id"], await newest_starts(fuzz))
        if run is not None:
            got = (run.task, run.channel, run.graph, run.requester)
            wanted = (asked.get("task"), asked.get("channel"), reply["graph"], asked.get("requester"))
            if got != wanted:
                problems.append(f"recorded {got!r}, asked {wanted!r}"[:500])
        assert not problems, "\n".join(problems)

    @fuzz_settings("runs")
    @given(
        body=RUN_BODIES,
        auth=st.one_of(st.just(f"Bearer {TOKEN}"), st.sampled_from(AUTHS), HEADER_TEXT.map(str.strip)),
        key=st.one_of(st.none(), HEADER_TEXT.map(str.strip)),
    )
    def runs(body: bytes, auth: str | None, key: str | None) -> None:
        note(f"body: {brief(body)}")
        fuzz.run(case(body, auth, key))

    runs()
    fuzz.assert_quiet()


# 4. clicks ------------------------------------------------------------------------------------


def matches(value: Any, pattern: re.Pattern[str]) -> TypeGuard[str]:
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def ours(holder: Any, field: str, team: str) -> bool:
    """Whether `holder` names no workspace in `field`, or this one."""
    named = holder.get(field) if isinstance(holder, dict) else None
    return named is None or named == team


def must_refuse(payload: Any, team: str) -> bool:
    """Whether the bot has to refuse a signed click or submission: not an object, not by a Slack
    user id, or naming a workspace or organisation (the payload's or the person's) not this one."""
    if not isinstance(payload, dict) or not isinstance(payload.get("user"), dict):
        return True
    named = [payload.get("team"), payload.get("enterprise")]
    return (
        not matches(payload["user"].get("id"), USER_ID)
        or not ours(payload["user"], "team_id", team)
        or any(t is not None and not (isinstance(t, dict) and t.get("id") == team) for t in named)
    )


# The fields of a click or submission that say who and where.
INTERACTION_AIMS: dict[Where, SearchStrategy[Any]] = {
    ("team", "id"): TEAMS,
    ("user", "id"): FORGED_USERS,
    ("user",): VALUES,
    ("trigger_id",): texts(),
    ("type",): st.sampled_from(["block_actions", "view_submission", "view_closed", "shortcut", ""]),
}


@pytest.mark.fuzz
async def interact(fuzz: Fuzz, payload: dict[str, Any], refused: Callable[[Answer], bool]) -> None:
    """Send a signed interaction; a refused one changes no record, and every approval stays consistent."""
    body = form_payload(payload)
    if isinstance(payload, dict) and isinstance(payload.get("user"), dict):
        fuzz.met(payload["user"].get("id"))
    fuzz.say(f"payload: {brief(json_bytes(payload, raw_utf8=True))}")
    before = await fuzz.records()
    answer = await fuzz.post("/slack/events", body, signed(body, "application/x-www-form-urlencoded"))
    changed = before.changes(await fuzz.records())
    fuzz.expect_sane(answer)
    if refused(answer):
        assert not changed, "refused, yet recorded:\n" + "\n".join(changed)
    problems = await fuzz.inconsistencies()
    assert not problems, "\n".join(problems)


def test_signed_clicks_never_break_an_approval(fuzz: Fuzz) -> None:
    """Clicks on the buttons and menus of real cards, by anyone, mutated and forged: after each one
    every approval is consistent; a click that does not come from a user of this workspace records
    nothing; at the end the resume commands and the audit agree with the records."""
    fuzz.logs.skip()
    forged = forged_values(fuzz.approval_ids, fuzz.thread_ids)
    kinds = st.sampled_from(["approve", "reject", "edit", "respond", "answer", "view_args", "nope", ""])
    action_ids = [
        "approve",
        "approve:0",
        "edit:2",
        "reject:1",
        "respond:0",
        "answer:0",
        "view_args:0",
        "choose:3",
    ]
    aimed = {
        **INTERACTION_AIMS,
        ("actions", 0, "value"): forged,
        ("actions", 0, "action_id"): st.one_of(st.sampled_from([*action_ids, "retry", "open:x"]), texts()),
        ("actions", 0, "selected_option", "value"): st.builds(lambda k, v: f"{k}:{v}", kinds, forged),
        ("actions",): VALUES,
        ("channel", "id"): FORGED_CHANNELS,
        ("container",): VALUES,
        ("container", "type"): st.sampled_from(["view", "message", ""]),
        ("view", "private_metadata"): forged,
        ("view", "id"): st.one_of(st.sampled_from(["V0NOSUCHVIEW", "", "v0lower"]), texts()),
        ("view", "hash"): st.one_of(st.just("1.stale"), texts()),
        ("view", "callback_id"): st.sampled_from(["review", "edit", ""]),
    }
    changes_for = [mutations(click.template, aimed) for click in fuzz.clicks]

    async def case(click: Click, user: str, changes: list[Mutation]) -> None:
        standin = fuzz.scene.standin
        shown = (
            standin.view_action_payload(user, click.view, click.action_id)
            if click.view
            else standin.block_action_payload(user, click.card, click.action_id, click.selected)
        )
        payload = mutated(shown, changes)
        await interact(fuzz, payload, lambda answer: must_refuse(payload, fuzz.team))

    @fuzz_settings("clicks")
    @given(data=st.data())
    def clicks(data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(fuzz.clicks) - 1))
        click = fuzz.clicks[index]
        where = f"{click.card.channel}{' (in its review)' if click.view else ''}"
        note(f"click: {click.action_id} {click.selected or ''} on {where}")
        user = data.draw(st.sampled_from(USERS), label="user")
        changes = data.draw(changes_for[index], label="changes")
        fuzz.run(case(click, user, changes))

    clicks()
    fuzz.assert_quiet()
    problems = fuzz.run(fuzz.stream_inconsistencies())
    assert not problems, "\n".join(problems)


# 5. modal submissions -------------------------------------------------------------------------

FIELD_VALUES = st.one_of(
    st.sampled_from(
        ["", " ", "0", "42", "-1", "1e309", '"x"', "{}", "[]", "null", "true", '{"a": 1}', "9" * 5000]
    ),
    texts(),
    VALUES,
)


def inline_errors(answer: Answer) -> bool:
    try:
        reply = json.loads(answer.body)
    except ValueError:
        return False
    return isinstance(reply, dict) and reply.get("response_action") == "errors"


@pytest.mark.fuzz
def test_signed_modal_submissions_never_break_an_approval(fuzz: Fuzz) -> None:
    """Edit, reject, respond and answer forms submitted with anything in any field (up to 100 kB,
    wrong types, JSON that is not JSON) and forged metadata: a submission answered with inline
    errors, or not from a user of this workspace, records nothing; every approval stays consistent;
    at the end the resume commands and the audit agree with the records."""
    fuzz.logs.skip()
    aimed = {
        **INTERACTION_AIMS,
        ("view", "private_metadata"): forged_values(fuzz.approval_ids, fuzz.thread_ids),
        ("view", "callback_id"): st.one_of(st.sampled_from([*FORMS, "view_args", "nope", ""]), texts()),
        ("view", "state"): VALUES,
        ("view", "state", "values"): VALUES,
        ("view", "team_id"): TEAMS,
        ("view",): VALUES,
    }
    changes_for = [mutations(submission(fuzz.team, ALICE, view, {}), aimed) for view in fuzz.views]
    inputs = [[b["block_id"] for b in view["blocks"] if b.get("type") == "input"] for view in fuzz.views]

    async def case(view: dict[str, Any], user: str, values: dict[str, Any], changes: list[Mutation]) -> None:
        payload = mutated(submission(fuzz.team, user, view, values), changes)
        await interact(fuzz, payload, lambda answer: inline_errors(answer) or must_refuse(payload, fuzz.team))

    @fuzz_settings("views")
    @given(data=st.data())
    def submissions(data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(fuzz.views) - 1))
        view = fuzz.views[index]
        note(f"modal: {view['callback_id']} for {view['private_metadata']}")
        user = data.draw(st.sampled_from(USERS), label="user")
        fields = (
            st.dictionaries(st.sampled_from(inputs[index]), FIELD_VALUES) if inputs[index] else st.just({})
        )
        values = data.draw(fields, label="values")
        changes = data.draw(changes_for[index], label="changes")
        fuzz.run(case(view, user, values, changes))

    submissions()
    fuzz.assert_quiet()
    problems = fuzz.run(fuzz.stream_inconsistencies())
    assert not problems, "\n".join(problems)


# 6. slash commands ----------------------------------------------------------------------------

SLASH_KEYS = [key for key, _ in slash_form("T", "U", "C", "")]
SLASH_TEXTS = st.one_of(
    st.sampled_from(
        [
            "",
            "help",
            "pending",
            "  pending  ",
            "PENDING",
            "use",
            "use demo",
            "use nope do it",
            "use per_call x",
        ]
        + ["use demo Refund order 1 for 10", "Refund order 2 for 20", "payload"]
    ),
    FORM_TEXTS,
    FORM_TEXTS.map(lambda t: f"use demo {t}"),
)
SLASH_EDITS = st.lists(
    st.one_of(
        st.builds(FormEdit, st.sampled_from(SLASH_KEYS)),
        st.builds(FormEdit, st.sampled_from(SLASH_KEYS), FORM_TEXTS),
        st.builds(FormEdit, st.sampled_from(SLASH_KEYS), FORM_TEXTS, st.just(True)),
        st.builds(FormEdit, st.text(max_size=10), FORM_TEXTS),
        st.builds(FormEdit, st.just("team_id"), st.sampled_from(["T0OTHER", "", "t0standin", "T0STANDIN "])),
        st.builds(
            FormEdit, st.just("user_id"), st.sampled_from(["", "U0ALICE\u202e", "<@U0ALICE>", "u0alice"])
        ),
        st.builds(
            FormEdit, st.just("channel_id"), st.sampled_from(["", "#general", "C0FUZZ00\x00", "<#C0X>"])
        ),
        st.builds(FormEdit, st.just("command"), st.sampled_from(["/SIGNOFF", "/other", "signoff", ""])),
    ),
    max_size=3,
)
SLASH_CHANNELS = ["C0FUZZ00", "C0FUZZ12", "C0SLASH1", "C0SLASH2", "D0ALICE", "G0PRIVATE"]


def form_values(pairs: list[tuple[str, str]], key: str) -> list[str]:
    return [v for k, v in pairs if k == key]


def slack_sent(pairs: list[tuple[str, str]], team: str) -> bool:
    """Whether a command form is one the bot may act on, read as forms are (the last value of a field
    wins): `/signoff`, in this workspace, by a Slack user id, in a conversation id."""
    form = dict(pairs)
    return (
        form.get("command") == "/signoff"
        and form.get("team_id") == team
        and ours(form, "enterprise_id", team)
        and matches(form.get("user_id"), USER_ID)
        and matches(form.get("channel_id"), CHANNEL_ID)
    )


@pytest.mark.fuzz
def test_signed_slash_commands_start_runs_only_when_they_say_so(fuzz: Fuzz) -> None:
    """`/signoff` forms with any text (help, pending, use, hostile, 100 kB) and fields dropped, sent
    twice, or forged: a command that did not answer "Started" changes no record, a form Slack
    would never send starts nothing, and a started run is the one asked for, with its start command."""
    fuzz.logs.skip()

    async def case(pairs: list[tuple[str, str]]) -> None:
        body = urlencode(pairs).encode()
        for user in form_values(pairs, "user_id"):
            fuzz.met(user)
        before = await fuzz.records()
        answer = await fuzz.post("/slack/events", body, signed(body, "application/x-www-form-urlencoded"))
        changed = before.changes(await fuzz.records())
        fuzz.expect_sane(answer)
        started = answer.status == 200 and answer.said.startswith("Started")
        if not slack_sent(pairs, fuzz.team):
            assert not started and not changed, "a form Slack never sends started a run:\n" + "\n".join(
                changed
            )
        if not started:
            assert not changed, "nothing started, yet Redis changed:\n" + "\n".join(changed)
            return
        starts = await newest_starts(fuzz, 1)
        assert starts, "answered Started, but queued no start command"
        run = await fuzz.scene.store.runs.get(starts[0].thread_id)
        problems = run_problems(run, starts[0].thread_id, starts)
        if run is not None:
            if run.channel not in form_values(pairs, "channel_id"):
                problems.append(f"started in {run.channel!r}, asked in {form_values(pairs, 'channel_id')!r}")
            if run.requester not in form_values(pairs, "user_id"):
                problems.append(f"started for {run.requester!r}, asked by {form_values(pairs, 'user_id')!r}")
            if not any(run.task.strip() in text for text in form_values(pairs, "text")):
                problems.append(f"started with {run.task[:100]!r}, not what was asked")
        assert not problems, "\n".join(problems)

    @fuzz_settings("commands")
    @given(
        user=st.sampled_from(USERS),
        channel=st.sampled_from(SLASH_CHANNELS),
        text=SLASH_TEXTS,
        edits=SLASH_EDITS,
    )
    def commands(user: str, channel: str, text: str, edits: list[FormEdit]) -> None:
        pairs = slash_form(fuzz.team, user, channel, text)
        for edit in edits:
            pairs = edit.apply(pairs)
        fuzz.run(case(pairs))

    commands()
    fuzz.assert_quiet()


# 7. Events API --------------------------------------------------------------------------------

SHAPES = ["app_mention", "message", "im", "reply", "app_home_opened", "url_verification", "reaction_added"]
EVENT_CHANNELS = [f"C0EVENT{n}" for n in range(10)]
BAD_TS = st.one_of(st.sampled_from(["", "abc", "1.2.3", "-1.0", "1e9", "1700000000.000001\u202e"]), VALUES)


async def envelope(fuzz: Fuzz, shape: str, user: str, channel: str, text: str, root: int) -> dict[str, Any]:
    """The Events API envelope Slack sends when `user` does `shape` (the stand-in builds it)."""
    standin = fuzz.scene.standin
    if shape == "url_verification":
        return {"token": "legacy-verification-token", "challenge": text, "type": "url_verification"}
    if shape == "app_home_opened":
        event = {"type": "app_home_opened", "user": user, "channel": f"D{user[1:]}", "tab": "home"}
        return {
            "token": "legacy-verification-token",
            "team_id": fuzz.team,
            "api_app_id": "A0SIGNOFF",
            "type": "event_callback",
            "event_id": f"Ev{uuid.uuid4().hex[:12].upper()}",
            "event_time": int(time.time()),
            "event": {**event, "event_ts": f"{time.time():.6f}"},
        }
    thread_ts = None
    if shape == "reply":
        channel, thread_ts = fuzz.roots[root]
    elif shape == "im":
        channel = f"D{user[1:]}"
    words = f"<@U0SIGNOFF> {text}" if shape == "app_mention" else text
    message = standin.write(user, channel, words, thread_ts)
    kind = shape if shape in ("app_mention", "reaction_added") else "message"
    return standin.message_event(message, kind, channel_type="im" if shape == "im" else "channel")


def may_start(doc: Any, team: str) -> tuple[str, str, str] | None:
    """(channel, thread root, user) of the run a message event may start: a message or mention of
    this workspace, with an event id, by a Slack user id, in a conversation id, at Slack ts's;
    None when it may start none."""
    if not isinstance(doc, dict) or doc.get("type") != "event_callback" or doc.get("team_id") != team:
        return None
    event = doc.get("event")
    if not isinstance(event, dict) or event.get("type") not in ("app_mention", "message"):
        return None
    if not (
        ours(doc, "enterprise_id", team) and ours(event, "team", team) and ours(event, "user_team", team)
    ):
        return None
    user, channel, ts, root = (event.get(k) for k in ("user", "channel", "ts", "thread_ts"))
    if not (matches(user, USER_ID) and matches(channel, CHANNEL_ID) and matches(ts, SLACK_TS)):
        return None
    if root is not None and not matches(root, SLACK_TS):
        return None
    if (
        not isinstance(doc.get("event_id"), str)
        or not doc["event_id"]
        or not isinstance(event.get("text", ""), str)
    ):
        return None
    return (channel, root or ts, user)


@pytest.mark.fuzz
def test_signed_events_start_runs_only_for_real_messages(fuzz: Fuzz) -> None:
    """Mentions, messages, DMs, thread replies, Home tab opens, URL verifications and other events,
    mutated (another team, no event, ids that are not ids, hostile or 100 kB text, retries): each is
    acked in time without a 5xx; afterwards every run they started was started by a well-formed
    message of a user of this workspace, is bound to that Slack thread, and has its start command."""
    fuzz.logs.skip()
    store = fuzz.scene.store
    runs_before = set(fuzz.run(fuzz.keys(f"{fuzz.scene.prefix}:*:run:*")))
    last_command = fuzz.run(store.queue.entries(lambda p: p.commands, newest=1))[:1]
    aimed: dict[Where, SearchStrategy[Any]] = {
        ("team_id",): TEAMS,
        ("event",): VALUES,
        ("event", "user"): FORGED_USERS,
        ("event", "channel"): FORGED_CHANNELS,
        ("event", "ts"): BAD_TS,
        ("event", "thread_ts"): BAD_TS,
        ("event", "text"): st.one_of(texts(), VALUES),
        ("event", "type"): st.sampled_from(
            ["app_mention", "message", "app_home_opened", "reaction_added", ""]
        ),
        ("event", "subtype"): st.one_of(st.sampled_from(["bot_message", "message_changed"]), VALUES),
        ("event", "bot_id"): VALUES,
        ("event_id",): VALUES,
        ("type",): st.sampled_from(["event_callback", "url_verification", "app_rate_limited", ""]),
        ("authorizations",): VALUES,
    }
    templates = {
        shape: fuzz.run(envelope(fuzz, shape, ALICE, EVENT_CHANNELS[0], "hi", 0)) for shape in SHAPES
    }
    changes_for = {shape: mutations(template, aimed) for shape, template in templates.items()}
    allowed: set[tuple[str, str, str]] = set()

    async def case(
        shape: str, user: str, channel: str, text: str, root: int, changes: list[Mutation], retry: str | None
    ) -> None:
        doc = mutated(await envelope(fuzz, shape, user, channel, text, root), changes)
        event = doc.get("event") if isinstance(doc, dict) else None
        fuzz.met(event.get("user") if isinstance(event, dict) else None)
        body = json_bytes(doc, raw_utf8=True)
        headers = signed(body, "application/json")
        if retry is not None:
            headers.update({"X-Slack-Retry-Num": retry, "X-Slack-Retry-Reason": "http_timeout"})
        fuzz.say(f"envelope: {brief(body)}")
        answer = await fuzz.post("/slack/events", body, headers)
        fuzz.expect_sane(answer)
        start = may_start(doc, fuzz.team)
        if start:
            allowed.add(start)

    @fuzz_settings("events")
    @given(
        shape=st.sampled_from(SHAPES),
        user=st.sampled_from(USERS),
        channel=st.sampled_from(EVENT_CHANNELS),
        text=st.one_of(st.sampled_from(["Refund order 3 for 30", "remember apples"]), texts()),
        root=st.integers(0, len(fuzz.roots) - 1),
        retry=st.sampled_from([None, "1", "2", "abc"]),
        data=st.data(),
    )
    def events(
        shape: str, user: str, channel: str, text: str, root: int, retry: str | None, data: st.DataObject
    ) -> None:
        changes = data.draw(changes_for[shape], label="changes")
        fuzz.run(case(shape, user, channel, text, root, changes, retry))

    async def started_runs() -> list[str]:
        """Once no run has been started for a second: what runs were, and what is wrong with them."""
        await fuzz.settle(lambda: store.queue.length(lambda p: p.commands))
        since = f"({last_command[0][0]}" if last_command else "-"
        starts = []
        for _, fields in await store.queue.entries(lambda p: p.commands, since=since):
            command = decode_command(fields)
            if isinstance(command, StartRun):
                starts.append(command)
        problems = []
        new = {key.rpartition(":run:")[2] for key in await fuzz.keys(f"{fuzz.scene.prefix}:*:run:*")}
        new -= {key.rpartition(":run:")[2] for key in runs_before}
        for thread_id in sorted(new | {s.thread_id for s in starts}):
            run = await fuzz.scene.store.runs.get(thread_id)
            problems += run_problems(run, thread_id, starts)
            if run is None:
                continue
            if (run.channel, run.thread_ts, run.requester) not in allowed:
                asked = f"run {thread_id} for {run.requester!r} in {run.channel!r} at {run.thread_ts!r}"
                problems.append(f"{asked[:300]}: no well-formed message of a user here asked for it")
            bound = await fuzz.scene.slack_state.thread_for(run.channel, run.thread_ts or "")
            if bound != thread_id:
                problems.append(f"run {thread_id}: its Slack thread is bound to {bound!r}")
        return problems

    events()
    fuzz.assert_quiet()
    problems = fuzz.run(started_runs())
    assert not problems, "\n".join(problems)


# 8. hostile text down every path to Slack ---------------------------------------------------------

HOSTILE = "<!channel> <!here> <@U0BOSS> <#C0GENERAL> <!subteam^S0ADMINS> <https://evil.example|your bank>"
ALL = ("approve", "edit", "reject", "respond")


def hostile_action(name: str, allowed: tuple[str, ...], **args: Any) -> ActionReview:
    return ActionReview(name=name, args=args, description=f"Wants to: {HOSTILE}", allowed_decisions=allowed)


async def paused(fuzz: Fuzz, channel: str, request: PendingRequest) -> tuple[str, Message]:
    """A run of Riley's paused on `request` (written as the runner writes it), and its card."""
    scene = fuzz.scene
    run = Run(thread_id=f"fuzz-{uuid.uuid4().hex[:12]}", graph="demo", channel=channel, requester=RILEY)
    await scene.store.runs.save(run)
    await scene.store.runs.set_state(run.thread_id, RunState.WAITING)
    await scene.store.approvals.create(approval_for(request, run, "demo"))
    return run.thread_id, await scene.card(run.thread_id, timeout=60)


async def every_path(fuzz: Fuzz) -> None:
    """Agent text and people's text, hostile, through each way a decision reaches Slack."""
    scene, standin, new = fuzz.scene, fuzz.scene.standin, lambda: uuid.uuid4().hex
    # An edit (the card then shows the value now beside the old one), a response, an approval.
    edits, edited = await paused(
        fuzz,
        "C0HOSTILE1",
        PendingRequest(
            interrupt_id=new(),
            kind=RequestKind.BATCHED,
            actions=(
                hostile_action("write_file", ("approve", "edit", "reject"), path="/plans/a.md", content="x"),
                hostile_action("delete", ALL, path=HOSTILE),
                hostile_action("send_email", ("approve", "reject"), to=HOSTILE, subject=HOSTILE, body="b"),
            ),
        ),
    )
    form = await scene.open_modal(BOB, edited, "edit:0")
    await standin.submit(BOB, form, {"path": HOSTILE, "content": f"{HOSTILE} & more"})
    form = await scene.open_modal(BOB, edited, "respond:1")
    await standin.submit(BOB, form, {"message": HOSTILE})
    await standin.click(ALICE, edited, "approve:2")
    # A withdraw after a partial approval: the thread names the tools (agent text).
    withdrawn, withdrawing = await paused(
        fuzz,
        "C0HOSTILE2",
        PendingRequest(
            interrupt_id=new(),
            kind=RequestKind.BATCHED,
            actions=(hostile_action(f"wipe {HOSTILE}", ("approve", "reject")), hostile_action("audit", ALL)),
        ),
    )
    await standin.click(BOB, withdrawing, "approve:0")
    await scene.card_shows(withdrawing, "1 of 2 decided")
    await scene.confirm(RILEY, scene.fresh(withdrawing), "withdraw")
    # A batch bigger than a card: its review modal, a reject with a reason pushed over it, its
    # pages, then Reject all… with a reason.
    batch, big = await paused(
        fuzz,
        "C0HOSTILE3",
        PendingRequest(
            interrupt_id=new(),
            kind=RequestKind.BATCHED,
            actions=tuple(hostile_action("audit", ALL, note=f"{n} {HOSTILE}") for n in range(45)),
        ),
    )
    review = await scene.open_modal(BOB, big, "review")
    await standin.click_in_view(BOB, review, "page:20")
    review = await view_on_screen(fuzz, BOB, lambda view: "*Actions 21–40" in str(view["blocks"]))
    await standin.click_in_view(BOB, review, "reject:20")
    form = await view_on_screen(fuzz, BOB, lambda view: view["callback_id"] == "reject")
    await standin.submit(BOB, form, {"reason": HOSTILE})
    review = await view_on_screen(fuzz, BOB, lambda view: view["callback_id"] == "review")
    standin.close_view(BOB, review)
    form = await scene.open_modal(BOB, scene.fresh(big), "reject_all")
    await standin.submit(BOB, form, {"reason": HOSTILE})
    # A question, answered.
    question, asked = await paused(
        fuzz, "C0HOSTILE4", PendingRequest(interrupt_id=new(), kind=RequestKind.QUESTION, question=HOSTILE)
    )
    form = await scene.open_modal(ALICE, asked, "answer:0")
    await standin.submit(ALICE, form, {"answer": HOSTILE})
    # Every path has reached Slack.
    for thread_id, said in [
        (edits, "answered instead: "),  # the outcome line, with what people wrote
        (withdrawn, "withdrew the request:"),
        (batch, "rejected `audit`: &lt;!channel&gt;"),  # while the rest waited
        (batch, "`audit` ×45: Bob said: &lt;!channel&gt;"),  # the outcome: one line for the same reason
        (question, "answered:"),
    ]:
        await eventually(lambda t=thread_id, w=said: scene.says(t, w), what=said, timeout=120)
    for card, shows in [
        (edited, "Edited by"),
        (withdrawing, "Withdrawn by"),
        (big, "Reviewed: 45 rejected"),
        (asked, "Answered by"),
    ]:  # (a card refresh waits its turn behind the other families' at chat.update's rate)
        await eventually(lambda c=card, t=shows: t in card_text(scene.fresh(c)), what=shows, timeout=120)


async def view_on_screen(fuzz: Fuzz, user: str, showing: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The view on `user`'s screen, once it is the one `showing` says."""

    def seen() -> dict[str, Any] | None:
        view = fuzz.scene.standin.on_screen(user)
        return view if view and showing(view) else None

    return await eventually(seen, what="the view")


@pytest.mark.fuzz
def test_hostile_text_down_every_path_reaches_slack_inert(fuzz: Fuzz) -> None:
    """Broadcasts, mentions, group and channel links and disguised links, written by the agent (tool
    names, arguments, descriptions, a question) and by people (an edited value, a reason, a response,
    an answer), shown on cards, in the review modal and the forms, said in the thread after an
    edit, a withdraw, a reject pushed over the review modal and Reject all: none of it is markup."""
    fuzz.logs.skip()
    fuzz.run(every_path(fuzz))
    fuzz.assert_quiet()
