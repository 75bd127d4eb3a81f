"""Step-up with a passkey, the pure parts: the policy's keys checked at start (one line naming the
file and the rule), SIGNOFF_PUBLIC_URL's shape, the challenge bound to exactly what the card
showed, and the page escaping what an agent wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.passkeys.html import call_html, page
from bot.passkeys.relying_party import step_up_challenge
from core import policy_file
from core.conditions import Call
from core.config import Settings, SettingsError
from core.store.passkeys import Link
from tests.support.files import write_policy

RULE = "[[rules]]\nname = 'Deploys'\ntools = ['deploy']\n"


def refused(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(policy_file.PolicyError) as caught:
        policy_file.load(Path(write_policy(tmp_path, text)))
    return caught.value.problems


def test_step_up_keys_are_checked_in_one_line_naming_the_file_and_the_rule(tmp_path):
    assert any(
        "rules[0] ('Deploys').step_up" in p and "passkey" in p
        for p in refused(tmp_path, RULE + "step_up = 'sms'\n")
    )
    assert any(
        "step_up_trust: only with trust" in p for p in refused(tmp_path, RULE + "step_up_trust = 'passkey'\n")
    )
    assert any(
        "takes no step_up" in p for p in refused(tmp_path, RULE + "decide = 'approve'\nstep_up = 'passkey'\n")
    )
    weaker = (
        "[[rules]]\nname = 'Prod'\ntools = ['deploy']\nwhen = 'args.env == \"prod\"'\nstep_up = 'passkey'\n"
        "[[rules]]\nname = 'Others'\ntools = ['deploy']\n"
    )
    assert any(
        "approves with a click where that rule asks for a passkey" in p for p in refused(tmp_path, weaker)
    )


def test_defaults_and_rules_say_who_steps_up_and_none_is_a_click(tmp_path):
    text = (
        "[defaults]\nstep_up = 'passkey'\n"
        + RULE
        + "step_up = 'none'\n[[rules]]\ntools = ['write']\ntrust = '1h'\n"
    )
    policy = policy_file.load(Path(write_policy(tmp_path, text)))
    assert (policy.route("deploy").step_up, policy.route("write").step_up) == (None, "passkey")
    assert policy.route("write").step_up_trust == "passkey"  # (Approve & trust approves too)
    assert policy.default_route.step_up == "passkey" and policy.steps_up
    assert not policy_file.PolicyFile().steps_up


def test_a_call_a_when_cannot_read_goes_to_the_rule_that_steps_up_when_all_else_is_equal(tmp_path):
    text = (
        "[[rules]]\nname = 'Big'\ntools = ['deploy']\nwhen = 'args.size > 10'\n"
        "[[rules]]\nname = 'Prod'\ntools = ['deploy']\nstep_up = 'passkey'\nfallthrough = 'deliberate'\n"
    )
    policy = policy_file.load(Path(write_policy(tmp_path, text)))
    unread = policy.match(Call("deploy", {"size": "big"}))  # `>` cannot take text and a number
    assert unread.rule == 1 and unread.failed


@pytest.mark.parametrize(
    "url, problem",
    [
        ("http://signoff.example.com", "passkeys need https:// (plain http only for localhost)"),
        ("https://10.0.0.5", "a host name, not an IP address"),
    ],
)
def test_a_public_url_a_browser_would_not_take_passkeys_on_is_refused(url, problem):
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"SIGNOFF_PUBLIC_URL": url})
    assert problem in caught.value.problems[0]
    assert Settings.from_env({"SIGNOFF_PUBLIC_URL": "https://signoff.example.com/"}).public_url == (
        "https://signoff.example.com"
    )


def test_the_challenge_binds_the_approval_each_action_revision_and_arguments_and_the_nonce():
    link = Link(
        kind="step_up", user="U0ALICE", nonce="n1", expires_at=0, approval_id="a1", actions=[(0, 0, "h")]
    )
    others = [
        link.model_copy(update={"approval_id": "a2"}),
        link.model_copy(update={"actions": [(1, 0, "h")]}),
        link.model_copy(update={"actions": [(0, 1, "h")]}),
        link.model_copy(update={"actions": [(0, 0, "other arguments")]}),
        link.model_copy(update={"nonce": "n2"}),
    ]
    challenges = {step_up_challenge(link), *(step_up_challenge(o) for o in others)}
    assert len(challenges) == 6 and all(len(c) == 32 for c in challenges)


def test_the_page_escapes_what_the_agent_wrote():
    shown = call_html("send_email", "Email <b>x</b>", {"body": "</pre><script>alert(1)</script>"})
    assert "<script>" not in shown and "&lt;/pre&gt;&lt;script&gt;" in shown
    text, nonce = page("Approve", shown, {"publicKey": {"note": "</script><script>alert(2)</script>"}})
    assert text.count("<script") == 2 and "alert(2)" in text and "</script><script>alert(2)" not in text
    assert f'<script nonce="{nonce}">' in text


def test_assertions_are_refused_unless_made_on_signoffs_own_page_and_origin_as_browsers_write_it():
    """A red team's forgeries, each signed by the person's own passkey: only the first is taken."""
    import hashlib
    import json

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from fido2.utils import websafe_encode
    from fido2.webauthn import AuthenticatorData, CollectedClientData

    from bot.passkeys.relying_party import NotVerified, RelyingParty
    from tests.support.passkey import FLAG, SoftPasskey

    site = "https://signoff.example.com"
    party = RelyingParty("https://Signoff.Example.com:443/")  # as an operator may write it
    own = SoftPasskey(site, "signoff.example.com")
    enrolled = party.registered(
        b"c" * 32, own.create(party.creation_options("U0ALICE", [], b"c" * 32)), "x", 0
    )
    challenge = hashlib.sha256(b"the call").digest()

    def signed(**client: object) -> dict:
        data = CollectedClientData(
            json.dumps(
                {"type": "webauthn.get", "challenge": websafe_encode(challenge), "origin": site, **client}
            ).encode()
        )
        auth = AuthenticatorData.create(hashlib.sha256(b"signoff.example.com").digest(), FLAG.UP | FLAG.UV, 7)
        signature = own.key.sign(bytes(auth) + data.hash, ec.ECDSA(hashes.SHA256()))
        body = {"clientDataJSON": websafe_encode(data), "authenticatorData": websafe_encode(auth)}
        return {
            "id": own.id,
            "rawId": own.id,
            "type": "public-key",
            "response": {**body, "signature": websafe_encode(signature)},
        }

    assert party.origin == site and party.id == "signoff.example.com"
    assert party.verified(challenge, [enrolled], signed())[1] == 7
    for forged in (
        signed(crossOrigin=True),  # inside another site's frame
        signed(crossOrigin=True, topOrigin="https://evil.example"),
        signed(origin="https://signoff.example.com:8443"),
        signed(origin="https://evil.signoff.example.com"),
    ):
        with pytest.raises(NotVerified):
            party.verified(challenge, [enrolled], forged)


def test_one_time_links_never_reach_a_log_line_but_reach_their_person_in_slack():
    from core.logs import redact, redact_for_logs

    said = "Approve with your passkey: https://signoff.example.com/step-up/q9Zk2mW4rT6yU9aB1cD2eF3gH4"
    assert redact_for_logs(said) == "Approve with your passkey: https://signoff.example.com/step-up/***"
    assert redact(said) == said  # (what the bot sends Slack: the person needs the link)
