"""An MCP server's questions, without Slack: the schema read into fields, the modal built from
them, what a person typed read back as typed values and checked against the schema, and the
one resume the round goes out with (every key; never a value the tool would refuse)."""

from __future__ import annotations

import time

import pytest

from bot.views import elicitation as views
from core.elicitation import FormUnsupported, content_problems, fields_of, host_of
from core.protocol import (
    DecisionRefused,
    Elicited,
    PendingRequest,
    RequestKind,
    check_resume,
    decision_payload,
    payload_from_decisions,
)
from core.records import Approval, Decided, Outcome

EVERY_KIND = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name", "minLength": 2, "maxLength": 40},
        "email": {"type": "string", "format": "email", "title": "Email"},
        "docs": {"type": "string", "format": "uri"},
        "day": {"type": "string", "format": "date", "default": "2026-12-24"},
        "at": {"type": "string", "format": "date-time"},
        "ratio": {"type": "number", "minimum": 0, "maximum": 1},
        "count": {"type": "integer", "minimum": 1, "maximum": 9, "default": 3},
        "sure": {"type": "boolean", "default": False},
        "size": {"type": "string", "enum": ["s", "m", "l"], "enumNames": ["Small", "Medium", "Large"]},
        "region": {
            "type": "string",
            "oneOf": [{"const": "eu", "title": "Europe"}, {"const": "us", "title": "US"}],
        },
        "teams": {"type": "array", "items": {"type": "string", "enum": ["web", "api", "ops"]}, "maxItems": 2},
    },
    "required": ["name", "count", "region"],
}


def round_of(*requests: dict, decided: Decided | None = None) -> Approval:
    value = {"type": "mcp_elicitation", "tool_name": "deploy_service", "requests": list(requests)}
    request = PendingRequest.from_interrupt({"value": value, "id": "i1"})
    return Approval(
        approval_id="a1",
        thread_id="t1",
        interrupt_id="i1",
        graph="mcp",
        request=request,
        origin="mcp",
        channel="C1",
        created_at=time.time(),
        decided={0: decided} if decided else {},
    )


def form(schema: dict = EVERY_KIND, key: str = "rollout", message: str = "How should it roll out?") -> dict:
    return {"key": key, "message": message, "mode": "form", "requested_schema": schema}


def url_request(address: str, key: str = "sign_in") -> dict:
    return {"key": key, "message": "Sign in", "mode": "url", "url": address}


def test_every_kind_of_field_becomes_the_slack_input_that_asks_for_it():
    modal = views.answer_modal(round_of(form()), "a1:0").to_dict()
    elements = {b["label"]["text"]: b["element"] for b in modal["blocks"] if b["type"] == "input"}

    assert {label: e["type"] for label, e in elements.items()} == {
        "Name": "plain_text_input",
        "Email": "email_text_input",
        "docs": "url_text_input",
        "day": "datepicker",
        "at": "datetimepicker",
        "ratio": "plain_text_input",  # (number_input renders badly on phones: checked by Signoff)
        "count": "plain_text_input",
        "sure": "radio_buttons",
        "size": "static_select",
        "region": "static_select",
        "teams": "multi_static_select",
    }
    assert (elements["Name"]["min_length"], elements["Name"]["max_length"]) == (2, 40)
    assert elements["ratio"]["placeholder"]["text"] == "A number"
    assert elements["count"]["placeholder"]["text"] == "A whole number"
    assert elements["count"]["initial_value"] == "3" and elements["day"]["initial_date"] == "2026-12-24"
    assert elements["sure"]["initial_option"]["value"] == "false"
    assert [o["text"]["text"] for o in elements["size"]["options"]] == ["Small", "Medium", "Large"]
    assert [o["text"]["text"] for o in elements["region"]["options"]] == ["Europe", "US"]
    assert elements["teams"]["max_selected_items"] == 2
    optional = {b["label"]["text"] for b in modal["blocks"] if b["type"] == "input" and b.get("optional")}
    assert "Name" not in optional and "count" not in optional and "Email" in optional


def test_what_slack_sends_back_is_typed_as_the_schema_says():
    approval = round_of(form())
    fields = fields_of(EVERY_KIND)
    block = {f.name: f"0.{n}" for n, f in enumerate(fields)}
    state = {
        block["name"]: {"value": "checkout"},
        block["at"]: {"selected_date_time": 1_796_000_000},
        block["ratio"]: {"value": "0.25"},
        block["count"]: {"value": "7"},
        block["sure"]: {"selected_option": {"value": "true"}},
        block["region"]: {"selected_option": {"value": "1"}},
        block["teams"]: {"selected_options": [{"value": "0"}, {"value": "2"}]},
    }

    answer = views.read_answer(approval, state)

    assert answer == Elicited(
        action="accept",
        content={
            "rollout": {
                "name": "checkout",
                "at": "2026-11-30T00:53:20Z",
                "ratio": 0.25,
                "count": 7,
                "sure": True,
                "region": "us",
                "teams": ["web", "ops"],
            }
        },
    )
    resume = check_resume(
        approval.request, payload_from_decisions(approval.request, [decision_payload(answer)])
    )
    assert resume["responses"]["rollout"]["content"]["count"] == 7


@pytest.mark.parametrize(
    ("field", "state", "said"),
    [
        ("count", {"value": "12"}, "At most 9."),
        ("count", {"value": "2.5"}, "A whole number."),
        ("count", {"value": "NaN"}, "A number."),
        ("name", {"value": "x"}, "At least 2 characters."),
        ("email", {"value": "not an address"}, "Not a valid email."),
        ("region", {"selected_option": {"value": "7"}}, "Not one of the choices."),
        (
            "teams",
            {"selected_options": [{"value": "0"}, {"value": "1"}, {"value": "2"}]},
            "Choose at most 2.",
        ),
        ("sure", {"selected_option": {"value": "yes"}}, "Yes or No."),
    ],
)
def test_a_value_that_does_not_fit_is_an_error_on_its_own_field(field, state, said):
    approval = round_of(form())
    block = {f.name: f"0.{n}" for n, f in enumerate(fields_of(EVERY_KIND))}
    filled = {
        block["name"]: {"value": "checkout"},
        block["count"]: {"value": "3"},
        block["region"]: {"selected_option": {"value": "0"}},
    }

    answer = views.read_answer(approval, {**filled, block[field]: state})

    assert answer == {block[field]: said}


def test_a_required_field_left_empty_is_named_and_nothing_is_sent():
    approval = round_of(form())
    block = {f.name: f"0.{n}" for n, f in enumerate(fields_of(EVERY_KIND))}

    assert views.read_answer(approval, {block["name"]: {"value": "checkout"}}) == {
        block["count"]: "Required.",
        block["region"]: "Required.",
    }


def test_a_resume_is_refused_unless_every_key_has_a_fitting_answer():
    approval = round_of(form(key="rollout"), url_request("https://auth.example.com/x"))
    request = approval.request
    good = {"action": "accept", "content": {"name": "web", "count": 2, "region": "eu"}}

    assert check_resume(request, {"responses": {"rollout": good, "sign_in": {"action": "accept"}}})
    refusals = {
        "a key missing": {"responses": {"rollout": good}},
        "a key not asked": {
            "responses": {"rollout": good, "sign_in": {"action": "accept"}, "x": {"action": "accept"}}
        },
        "an action MCP does not know": {
            "responses": {"rollout": {"action": "approve"}, "sign_in": {"action": "accept"}}
        },
        "a number sent as text": {
            "responses": {
                "rollout": {**good, "content": {**good["content"], "count": "2"}},
                "sign_in": {"action": "accept"},
            }
        },
        "values with a decline": {
            "responses": {
                "rollout": {"action": "decline", "content": {"count": 2}},
                "sign_in": {"action": "decline"},
            }
        },
        "values for a URL": {
            "responses": {"rollout": good, "sign_in": {"action": "accept", "content": {"a": "b"}}}
        },
        "a bare list": [good],
        "HITL decisions": {"decisions": [{"type": "approve"}]},
    }
    for why, payload in refusals.items():
        with pytest.raises(DecisionRefused):
            check_resume(request, payload)
            pytest.fail(why)


def test_a_server_regex_never_runs_in_signoff():
    slow = {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(a+)+$"}}}

    started = time.monotonic()
    assert content_problems(slow, {"x": "a" * 40 + "!"}) == {}  # the server checks its own pattern
    assert time.monotonic() - started < 1


def test_a_form_slack_cannot_ask_offers_only_decline_and_cancel():
    nested = {"type": "object", "properties": {"address": {"type": "object", "properties": {}}}}
    approval = round_of(form(nested))

    with pytest.raises(FormUnsupported):
        fields_of(nested)
    assert views.not_acceptable(approval.request) is not None
    assert [e.action_id for e in views.round_buttons(approval).elements] == [
        "elicit_decline",
        "elicit_cancel",
    ]


@pytest.mark.parametrize(
    ("address", "linked", "host"),
    [
        ("https://auth.example.com/connect", True, "auth.example.com"),
        ("http://auth.example.com/connect", False, "auth.example.com"),
        ("javascript:alert(1)", False, ""),
        ("https://example.com@evil.example/login", False, "evil.example"),  # user info: never linked
        ("https://xn--pple-43d.com/", True, "xn--pple-43d.com"),
        ("https://аpple.com/", True, "xn--pple-43d.com"),  # a Cyrillic а: shown as what it is
    ],
)
def test_a_url_is_linked_only_over_https_and_named_by_the_host_it_opens(address, linked, host):
    approval = round_of(url_request(address))
    blocks = [b.to_dict() for b in views.card_blocks(approval)]
    links = [b["accessory"]["url"] for b in blocks if b.get("accessory", {}).get("url")]

    assert links == ([address] if linked else [])
    assert host_of(address) == host
    texts = " ".join(b.get("text", {}).get("text", "") for b in blocks)
    assert (f"Opens *{host}*" in texts) is linked
    assert not any(b["type"] == "input" for b in blocks)
    done = "elicit_done" in [e["action_id"] for e in blocks[-1]["elements"]]
    assert done is linked


def test_server_text_is_escaped_and_its_hidden_characters_shown():
    sneaky = {
        "type": "object",
        "properties": {
            "ok": {"type": "boolean", "title": "Approve\u202e<!channel>", "description": "<@U0BOSS> said so"}
        },
    }
    approval = round_of(form(sneaky, message="Click <https://evil.example|here> \u200b now"))

    card = str([b.to_dict() for b in views.card_blocks(approval)])
    assert (
        "<!channel>" not in card
        and "<https://evil" not in card
        and "&lt;https://evil.example|here&gt;" in card
    )
    assert "⟨U+200B⟩" in card and "⟨U+202E⟩" in card
    modal = views.answer_modal(approval, "a1:0").to_dict()
    label = next(b["label"]["text"] for b in modal["blocks"] if b["type"] == "input")
    assert label == "Approve⟨U+202E⟩<!channel>"  # plain text: shown, never parsed


def test_the_answer_is_told_in_words_and_an_expiry_cancels():
    answered = Decided(
        decision={
            "type": "elicit",
            "action": "accept",
            "content": {"rollout": {"name": "web", "count": 2, "region": "eu"}},
        },
        user="U0ALICE",
        at=time.time(),
    )
    approval = round_of(form(), decided=answered)

    said = views.outcome_sentence(approval, "Riley's agent", "Alice")
    assert said.startswith("💬 Riley's agent asked `deploy_service` for *Name*, *Email*,")
    assert said.endswith("Alice answered *Name* web · *count* 2 · *region* Europe")
    expired = Decided(
        decision={"type": "elicit", "action": "cancel"},
        user="signoff",
        at=time.time(),
        outcome=Outcome.EXPIRED,
    )
    assert "Signoff cancelled the call" in views.outcome_sentence(
        round_of(form(), decided=expired), "An agent", ""
    )


def test_a_malformed_round_is_not_taken_for_one():
    for value in (
        {"type": "mcp_elicitation", "tool_name": "x", "requests": []},
        {
            "type": "mcp_elicitation",
            "tool_name": "x",
            "requests": [{"key": "k", "mode": "sms", "message": ""}],
        },
        {"type": "mcp_elicitation", "tool_name": "x", "requests": [form(key="k"), form(key="k")]},
    ):
        assert PendingRequest.from_interrupt({"value": value, "id": "i"}).kind is RequestKind.QUESTION
