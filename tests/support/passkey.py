"""A software passkey for tests that need many assertions quickly (the refusals): an ECDSA P-256
key made with `cryptography`, answering WebAuthn's `create` and `get` as a platform
authenticator with user verification does, in the JSON a browser's page sends (base64url). The
browser tests use Chromium's own virtual authenticator instead (`tests.support.browser`)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any

import aiohttp
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from fido2.cose import ES256
from fido2.utils import websafe_decode, websafe_encode
from fido2.webauthn import AttestationObject, AttestedCredentialData, AuthenticatorData, CollectedClientData

from tests.support.harness import eventually

FLAG = AuthenticatorData.FLAG


class SoftPasskey:
    """One credential on one origin; `counter` is its sign count (None: it keeps none, always 0)."""

    def __init__(self, origin: str, rp_id: str, counter: int | None = 0, verified: bool = True):
        self.origin, self.rp_id = origin, rp_id
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.credential_id = os.urandom(32)
        self.counter = counter
        self.verified = verified

    @property
    def id(self) -> str:
        return websafe_encode(self.credential_id)

    def _flags(self, *more: FLAG) -> FLAG:
        flags = FLAG.UP | (FLAG.UV if self.verified else FLAG(0))
        for flag in more:
            flags |= flag
        return flags

    def create(self, options: dict[str, Any]) -> dict[str, Any]:
        """What navigator.credentials.create gives the page, for `options` (its publicKey)."""
        client_data = CollectedClientData.create(
            type="webauthn.create", challenge=websafe_decode(options["challenge"]), origin=self.origin
        )
        public = ES256.from_cryptography_key(self.key.public_key())
        credential = AttestedCredentialData.create(bytes(16), self.credential_id, public)
        rp_hash = hashlib.sha256(options["rp"]["id"].encode()).digest()
        auth_data = AuthenticatorData.create(rp_hash, self._flags(FLAG.AT), self.counter or 0, credential)
        attestation = AttestationObject.create("none", auth_data, {})
        return {
            "id": self.id,
            "rawId": self.id,
            "type": "public-key",
            "response": {
                "clientDataJSON": websafe_encode(client_data),
                "attestationObject": websafe_encode(attestation),
            },
        }

    def get(self, options: dict[str, Any], counter: int | None = None) -> dict[str, Any]:
        """What navigator.credentials.get gives the page (`counter`: a sign count to claim)."""
        if counter is None and self.counter is not None:
            self.counter += 1
        count = counter if counter is not None else (self.counter or 0)
        client_data = CollectedClientData.create(
            type="webauthn.get", challenge=websafe_decode(options["challenge"]), origin=self.origin
        )
        rp_hash = hashlib.sha256(options.get("rpId", self.rp_id).encode()).digest()
        auth_data = AuthenticatorData.create(rp_hash, self._flags(), count)
        signature = self.key.sign(bytes(auth_data) + client_data.hash, ec.ECDSA(hashes.SHA256()))
        return {
            "id": self.id,
            "rawId": self.id,
            "type": "public-key",
            "response": {
                "clientDataJSON": websafe_encode(client_data),
                "authenticatorData": websafe_encode(auth_data),
                "signature": websafe_encode(signature),
            },
        }


LINK = re.compile(r"<(https?://[^|>]+)\|")
OPTIONS = re.compile(r'<script type="application/json" id="options">(.*?)</script>', re.S)


def link_in(text: str) -> str:
    """The one-time link in what Signoff said in Slack."""
    found = LINK.search(text)
    if found is None:
        raise LookupError(f"no link in {text!r}")
    return found.group(1)


async def page_options(url: str, which: str = "publicKey") -> tuple[int, dict[str, Any]]:
    """(status, the WebAuthn options) of a passkey page (`which`: "confirm", the options of the
    assertion an existing passkey gives to change a person's passkeys)."""
    async with aiohttp.ClientSession() as session, session.get(url) as reply:
        text = await reply.text()
    found = OPTIONS.search(text)
    return reply.status, json.loads(found.group(1)).get(which, {}) if found else {}


async def post_json(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as reply:
        return reply.status, await reply.json()


async def enrolled(
    harness: Any, user: str, label: str = "laptop", confirm_with: SoftPasskey | None = None
) -> SoftPasskey:
    """`user` types `/signoff passkey`, opens the link, and registers a new software passkey
    (confirmed with `confirm_with`, one they have, as the page asks once they have one)."""
    url = await enrol_link(harness, user)
    status, options = await page_options(url)
    assert status == 200, status
    passkey = SoftPasskey(harness.public_url, "localhost")
    body = {"credential": passkey.create(options), "label": label, **await confirmation(url, confirm_with)}
    status, answer = await post_json(url, body)
    assert answer["ok"], answer
    return passkey


async def confirmation(url: str, passkey: SoftPasskey | None) -> dict[str, Any]:
    """What the enrolment page adds to a change: `passkey`'s assertion of its confirm options."""
    if passkey is None:
        return {}
    status, options = await page_options(url, "confirm")
    assert options, f"the page asks for no confirmation ({status})"
    return {"confirmation": passkey.get(options)}


async def enrol_link(harness: Any, user: str) -> str:
    """`user` types `/signoff passkey`; the link Signoff answers with, only they see."""
    before = len(harness.standin.ephemerals_for(user))
    assert (await harness.standin.slash(user, str(harness.settings().channel), "passkey")).acked
    said = await eventually(
        lambda: next((t for t in harness.standin.ephemerals_for(user)[before:] if "/passkeys/" in t), None),
        what="the enrolment link",
    )
    return link_in(said)


async def stepped_up(url: str, passkey: SoftPasskey, counter: int | None = None) -> dict[str, Any]:
    """Open a step-up link and answer it with `passkey` (`counter`: a sign count to claim); the
    page's answer."""
    status, options = await page_options(url)
    assert options, f"no options on the page ({status})"
    return (await post_json(url, {"credential": passkey.get(options, counter)}))[1]


async def link_for(harness: Any, user: str, card: Any, action_id: str = "approve:0") -> str:
    """`user` clicks `action_id` on the card; the one-time link Signoff tells them, privately."""
    before = len(harness.standin.ephemerals_for(user))
    assert (await harness.standin.click(user, card, action_id)).acked
    said = await eventually(
        lambda: next((t for t in harness.standin.ephemerals_for(user)[before:] if "/step-up/" in t), None),
        what="the step-up link",
    )
    return link_in(said)
