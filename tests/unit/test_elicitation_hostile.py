"""An MCP server's questions from a hostile server, without Slack: numbers no checkpoint holds,
`$ref`s and patterns at any depth, host names a browser reads otherwise, rounds that would break
Slack's limits, typed choices a title could steal. Found by a red-team pass; each failed before."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from bot.views import elicitation as views
from core.elicitation import content_problems, fields_of, host_of, https_url
from slack_standin.blockkit import message_problem, view_problems
from tests.support.paths import ROOT
from tests.unit.test_elicitation import form, round_of, url_request

NUMBER = {"type": "object", "properties": {"n": {"type": "integer", "title": "N"}}, "required": ["n"]}


# 1. Integers LangGraph's checkpointer cannot store -------------------------------------------


@pytest.mark.parametrize("typed", ["99999999999999999999", "1e20", "-1e19", "1e5000"])
def test_an_integer_the_checkpointer_cannot_store_is_refused_on_its_field(typed):
    """ormsgpack (LangGraph's serde) refuses ints outside 64 bits; json.dumps refuses >4300
    digits. The form must refuse them, not record them and fail the run after the tool acted."""
    answer = views.read_answer(round_of(form(NUMBER)), {"0.0": {"value": typed}})
    assert isinstance(answer, dict), f"{typed!r} accepted as {answer}"


def test_a_short_exponent_does_not_hang_the_bot():
    """'1e9999999' is 9 characters (the input allows 40); Decimal -> int builds every digit on
    the bot's event loop. 1e1000000 takes ~27 s here; each extra digit of exponent is worse."""
    code = (
        "from bot.views import elicitation as v\n"
        "try:\n    v._parsed_number('1e1000000', whole=True)\nexcept ValueError:\n    pass\n"
    )
    started = time.monotonic()
    try:
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=3, check=True)
    except subprocess.TimeoutExpired:
        pytest.fail("parsing the number '1e1000000' took more than 3 s (the event loop is blocked)")
    assert time.monotonic() - started < 3


# 2. Server-sent schema keywords that run in Signoff ------------------------------------------


def test_a_server_regex_inside_oneof_never_runs_in_signoff():
    """The docstring and docs/policy.md promise no server regex runs in the bot; `checked_schema`
    strips keywords only at the property level, so `pattern` inside oneOf/anyOf/items.anyOf runs."""
    slow = {
        "type": "object",
        "properties": {
            "x": {"type": "string", "oneOf": [{"const": "a" * 26 + "!", "title": "A", "pattern": "^(a+)+$"}]}
        },
    }
    started = time.monotonic()
    views.read_answer(round_of(form(slow)), {"0.0": {"selected_option": {"value": "0"}}})
    assert time.monotonic() - started < 0.5  # 26 a's: ~1.5 s; each more doubles it


@pytest.mark.parametrize("ref", ["https://example.com/s.json", "#/nope", "#/properties/x"])
def test_a_ref_inside_oneof_is_an_error_not_an_exception(ref):
    schema = {
        "type": "object",
        "properties": {"x": {"type": "string", "oneOf": [{"const": "a", "$ref": ref}]}},
    }
    answer = views.read_answer(round_of(form(schema)), {"0.0": {"selected_option": {"value": "0"}}})
    assert isinstance(answer, dict) or answer.content == {"rollout": {"x": "a"}}


def test_a_server_ref_makes_the_bot_fetch_no_url():
    """jsonschema 4.26's default registry still retrieves remote $refs (urlopen, no timeout) on the
    bot's event loop: a hostile MCP server makes the bot request any address it can reach (cloud
    metadata, internal services), and a server that never answers hangs the bot."""
    import http.server
    import threading

    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        ref = f"http://127.0.0.1:{httpd.server_port}/latest/meta-data/iam"
        schema = {
            "type": "object",
            "properties": {"x": {"type": "string", "oneOf": [{"const": "a", "$ref": ref}]}},
        }
        try:
            views.read_answer(round_of(form(schema)), {"0.0": {"selected_option": {"value": "0"}}})
        except Exception:
            pass
    finally:
        httpd.shutdown()
    assert hits == [], f"the bot fetched {hits} for the server"


def test_a_forged_date_time_out_of_range_is_an_error_not_an_exception():
    schema = {"type": "object", "properties": {"at": {"type": "string", "format": "date-time"}}}
    answer = views.read_answer(round_of(form(schema)), {"0.0": {"selected_date_time": 10**30}})
    assert answer == {"0.0": "Not a valid date and time."}


# 3. A typed choice (more than 100) taken for another ------------------------------------------


def test_a_typed_value_is_never_taken_for_another_choice_whose_title_spells_it():
    """The hint lists the choices' values; a person types `keep`, and gets `delete_all`, whose
    title (enumNames) the server spelled `keep`. The card then says they answered *keep*."""
    values = ["delete_all", "keep"] + [f"v{i}" for i in range(100)]
    names = ["keep", "Keep everything"] + [f"V{i}" for i in range(100)]
    schema = {
        "type": "object",
        "properties": {"what": {"type": "string", "enum": values, "enumNames": names}},
    }
    assert fields_of(schema)[0].typed
    hint = views.answer_modal(round_of(form(schema)), "a1:0").to_dict()["blocks"][2]["hint"]["text"]
    assert "One of: delete_all, keep" in hint

    answer = views.read_answer(round_of(form(schema)), {"0.0": {"value": "keep"}})

    assert answer.content == {"rollout": {"what": "keep"}}, answer


# 4. The host the card names is not the host the button opens ----------------------------------


@pytest.mark.parametrize(
    "address",
    [
        'https://evil.example\\"@good.example/',  # WHATWG (browsers): host evil.example
        "https://evil.example\\`@good.example/",
        "https://evil.example\\\t@good.example/",
    ],
)
def test_the_host_said_is_the_host_a_browser_opens(address):
    """urlsplit reads `\\` as part of the userinfo; browsers end the authority there. The stand-in
    / Slack client's credential redaction happens to rewrite `\\@` but not `\\"@`, `\\`@`, `\\<tab>@`."""
    from core.logs import redact

    sent = redact(address)  # what bot.slack.clients sends Slack as the button's url
    assert not (https_url(sent) and host_of(sent) == "good.example"), (sent, host_of(sent))


def test_an_address_whose_host_cannot_be_said_is_not_linked():
    address = "https://" + "a" * 64 + ".evil.example/login"  # a 64-letter label: IDNA refuses it
    assert host_of(address) == ""
    blocks = [b.to_dict() for b in views.card_blocks(round_of(url_request(address)))]
    assert not any(b.get("accessory", {}).get("url") for b in blocks), (
        "linked, 'Opens an address with no host'"
    )


# 5. Slack's limits, with a hostile round ------------------------------------------------------


def card_problems(approval) -> object:
    try:
        blocks = [b.to_dict() for b in views.card_blocks(approval)]
    except Exception as exc:  # slack_sdk refuses to build it
        return repr(exc)
    return message_problem({"blocks": blocks, "text": "x"})


def modal_problems(approval) -> object:
    try:
        return view_problems(views.answer_modal(approval, "a1:0").to_dict()) or None
    except Exception as exc:
        return repr(exc)


HOSTILE_CARDS = {
    "a URL request's message of 2,500 '<'": round_of(
        url_request("https://auth.example.com/x") | {"message": "<" * 2500}
    ),
    "a URL request's message of 1,200 lines": round_of(
        url_request("https://auth.example.com/x") | {"message": "a\n" * 1200}
    ),
    "a non-https URL request's message of '&'": round_of(
        url_request("http://a.example/") | {"message": "&" * 2500}
    ),
    "an unsupported form's field named 3,000 x": round_of(
        form({"type": "object", "properties": {"x" * 3000: {"type": "object"}}})
    ),
    "49 URL requests": round_of(
        *[url_request(f"https://auth.example.com/{i}", key=f"k{i}") for i in range(49)]
    ),
}


@pytest.mark.parametrize("why", list(HOSTILE_CARDS))
def test_a_hostile_round_still_gets_a_card_slack_accepts(why):
    """Else the card is never posted (the events stream gives up: `stream_entry_dead`) and the
    run waits with no card, no Decline, no Cancel."""
    assert card_problems(HOSTILE_CARDS[why]) is None


TEXT = {"type": "object", "properties": {"n": {"type": "string", "title": "N"}}}
HOSTILE_MODALS = {
    "a form message of 1,500 '&'": round_of(form(TEXT, message="&" * 1500)),
    "a URL message of 1,500 '<' beside a form": round_of(
        form(TEXT), url_request("https://auth.example.com/x") | {"message": "<" * 1500}
    ),
    "a field named '' with no title": round_of(
        form({"type": "object", "properties": {"": {"type": "string"}}})
    ),
    "a date default Python reads (ISO week)": round_of(
        form(
            {
                "type": "object",
                "properties": {"d": {"type": "string", "format": "date", "default": "2026-W01-1"}},
            }
        )
    ),
    "a number default of 1e300": round_of(
        form({"type": "object", "properties": {"n": {"type": "number", "default": 1e300}}})
    ),
}


@pytest.mark.parametrize("why", list(HOSTILE_MODALS))
def test_an_acceptable_round_opens_a_modal_slack_accepts(why):
    approval = HOSTILE_MODALS[why]
    assert views.not_acceptable(approval.request) is None  # Answer… is offered…
    assert modal_problems(approval) is None  # …so its modal must open


# 6. Lesser: spellings a check lets through, choices that can never be sent --------------------


@pytest.mark.parametrize(
    ("fmt", "value"),
    [("date", "2026-W01-1"), ("date-time", "20260101T1000+0100")],
)
def test_a_date_is_checked_as_rfc_3339_not_as_python_reads_it(fmt, value):
    """`date.fromisoformat` (3.11) reads ISO week and compact forms; JSON Schema's date and
    date-time are RFC 3339. (Reachable by a forged datepicker value or a resume given whole.)"""
    schema = {"type": "object", "properties": {"d": {"type": "string", "format": fmt}}}
    assert content_problems(schema, {"d": value}), value


def test_choices_that_can_never_be_sent_are_not_offered_as_answerable():
    """`enum: [1, 2]` (no type): the select offers "1" and "2", every submission is refused
    ("Not one of the choices."), yet the card offers Answer…."""
    schema = {"type": "object", "properties": {"n": {"enum": [1, 2], "title": "N"}}, "required": ["n"]}
    approval = round_of(form(schema))
    answer = views.read_answer(approval, {"0.0": {"selected_option": {"value": "0"}}})
    assert not isinstance(answer, dict) or views.not_acceptable(approval.request) is not None
