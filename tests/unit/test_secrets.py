"""Finding a tool call's secrets (by name, by shape, by the policy's `redact`), masking them, and
putting them back only where the real value must act."""

from __future__ import annotations

import pytest

from core.secrets import Redaction, conceal, fingerprint, mask, mask_text, masked_at, restored, secret_name

GITHUB = "ghp_" + "a1B2" * 9
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
SLACK = "xoxb-1234567890-1234567890-abcdefghijklmnopqrstuvwx"
OPENAI = "sk-proj-" + "Z9y8X7w6" * 4


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "api_key",
        "apiKey",
        "X-Api-Key",
        "Authorization",
        "client_secret",
        "accessToken",
        "Set-Cookie",
        "pin",
    ],
)
def test_a_key_that_names_a_secret_is_one(key):
    assert secret_name(key)


@pytest.mark.parametrize(
    "key",
    ["author", "max_tokens", "passenger", "tokens", "secretary", "spinner", "to", "token_count", "auth_type"],
)
def test_a_key_that_only_looks_like_one_is_not(key):
    assert not secret_name(key)


def test_secrets_are_found_by_name_shape_and_policy_and_the_rest_is_kept():
    args = {
        "to": "finance@acme.com",
        "api_key": "abc123",
        "max_tokens": 1000,  # a count under a secret-sounding name is no secret
        "headers": [{"name": "Authorization", "value": f"Bearer {JWT}"}, {"name": "Accept", "value": "json"}],
        "body": f"Use {GITHUB} to push, then post with {SLACK}.",
        "customer": {"card_number": 4111111111111111, "name": "Ada"},
        "url": "https://bob:hunter2@db.example.com/prod",
        "model_key": OPENAI,
    }

    shown, hidden = conceal(args, [Redaction.parse("args.customer.card_number")])

    assert (
        shown["to"] == "finance@acme.com"
        and shown["max_tokens"] == 1000
        and shown["customer"]["name"] == "Ada"
    )
    assert shown["api_key"] == "••••"
    assert shown["headers"][0]["value"].startswith("••••") and shown["headers"][1]["value"] == "json"
    assert shown["body"].startswith("Use ••••") and "to push, then post with ••••" in shown["body"]
    assert shown["customer"]["card_number"] == "••••"  # a number too, when the policy lists it
    assert shown["url"] == "https://••••@db.example.com/prod"
    assert set(hidden) == {
        "/api_key",
        "/headers/0/value",
        "/body",
        "/customer/card_number",
        "/url",
        "/model_key",
    }
    flat = repr(shown)
    for secret in ("abc123", JWT, GITHUB, SLACK, "4111111111111111", "hunter2", OPENAI):
        assert secret not in flat
    assert restored(shown, hidden) == args


def test_an_edit_that_leaves_a_secret_alone_sends_the_original_and_a_new_value_is_taken():
    args = {"api_key": "abc123", "token": "t" * 30, "note": "hi"}
    shown, hidden = conceal(args)
    edited = {**shown, "token": "typed-new-token", "note": "hello"}

    assert restored(edited, hidden, shown) == {
        "api_key": "abc123",
        "token": "typed-new-token",
        "note": "hello",
    }


def test_a_redact_path_covers_list_elements_and_any_key():
    args = {"cards": [{"number": "4111", "cvc": 123}, {"number": "5500"}], "billing": {"home": {"zip": "1"}}}
    rules = [Redaction.parse("args.cards[].number"), Redaction.parse("args.billing.*.zip")]

    shown, hidden = conceal(args, rules)

    assert set(hidden) == {
        "/cards/0/number",
        "/cards/1/number",
        "/billing/home/zip",
        "/cards/0/cvc",
    }  # (cvc: a name)
    with pytest.raises(ValueError):
        Redaction.parse("customer.card")
    with pytest.raises(ValueError):
        Redaction.parse("args.a..b")


def test_masks_show_at_most_the_last_four_of_a_long_value():
    assert mask("short") == "••••"
    assert mask("x" * 20 + "WXYZ") == "••••WXYZ"


def test_free_text_is_masked_by_shape_and_for_the_values_a_run_carried():
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----"
    said = f"Done. I used the key abc123xyz and {SLACK}; {pem}"

    masked = mask_text(said, known=["abc123xyz"])

    assert "abc123xyz" not in masked and SLACK not in masked and "MIIE" not in masked
    assert masked.startswith("Done. I used the key ••••")


def test_an_edits_new_secret_is_masked_where_it_is_shown():
    assert masked_at({"api_key": "typed", "to": "a"}, ["/api_key"]) == {"api_key": "••••", "to": "a"}


def test_a_fingerprint_tells_two_values_apart_and_shows_neither():
    key = b"k" * 32
    one, two = fingerprint("abc123", key), fingerprint("abc124", key)
    assert one != two and one == fingerprint("abc123", key)
    assert "abc" not in one and one.startswith("fp:")
    assert fingerprint("abc123", b"other") != one  # keyed: not a lookup table away
