"""Signoff as a WebAuthn relying party (Yubico's `fido2`, its `Fido2Server`): the options a
browser is handed for `navigator.credentials.create` / `.get`, and the checks of what it sends
back.

The relying party id is the host of SIGNOFF_PUBLIC_URL and the only origin taken is that URL's
(scheme, host and port: fido2's own check would take any port, and any subdomain). User
verification is required (a PIN, a fingerprint, a face: the person, not only their device);
attestation is `none` (Signoff does not restrict which authenticators people use). The challenge
is never random here: the caller derives it from what is being approved (`step_up_challenge`),
so an assertion signs exactly that, and a registration's from its link.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from fido2 import cbor
from fido2.cose import CoseKey
from fido2.server import Fido2Server
from fido2.utils import websafe_decode, websafe_encode
from fido2.webauthn import (
    AttestationConveyancePreference,
    AttestedCredentialData,
    AuthenticationResponse,
    PublicKeyCredentialDescriptor,
    PublicKeyCredentialRpEntity,
    PublicKeyCredentialType,
    PublicKeyCredentialUserEntity,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from core.store.passkeys import Link, Passkey, canonical

REQUIRED = UserVerificationRequirement.REQUIRED
TIMEOUT_MS = 120_000  # how long the browser's passkey prompt waits


class NotVerified(ValueError):
    """What the browser sent does not prove what was asked (fido2's reason in the message)."""


def step_up_challenge(link: Link) -> bytes:
    """The WebAuthn challenge of a step-up: a SHA-256 over the approval id, each action's index,
    revision and the hash of its arguments as the card showed them, and the link's one-time
    nonce (used up with the link): an assertion for another call, a later edit, or a second
    time does not fit."""
    bound = {"approval": link.approval_id, "actions": link.actions, "nonce": link.nonce}
    return hashlib.sha256(b"signoff step-up\n" + canonical(bound).encode()).digest()


def enrol_challenge(link: Link) -> bytes:
    """A registration's challenge, from its link's nonce (the link is used up by it)."""
    return hashlib.sha256(b"signoff enrol\n" + canonical([link.user, link.nonce]).encode()).digest()


def confirm_challenge(link: Link) -> bytes:
    """The challenge a person's existing passkey answers to add or remove one (from the link's
    nonce: the link is used up by the change)."""
    return hashlib.sha256(b"signoff confirm\n" + canonical([link.user, link.nonce]).encode()).digest()


def _descriptor(passkey: Passkey) -> PublicKeyCredentialDescriptor:
    return PublicKeyCredentialDescriptor(
        type=PublicKeyCredentialType.PUBLIC_KEY, id=websafe_decode(passkey.credential_id)
    )


def _attested(passkey: Passkey) -> AttestedCredentialData:
    decoded = cbor.decode(websafe_decode(passkey.public_key))
    if not isinstance(decoded, Mapping):
        raise NotVerified("a stored public key that is not a COSE key")
    key = CoseKey.parse(decoded)
    return AttestedCredentialData.create(bytes(16), websafe_decode(passkey.credential_id), key)


def _not_framed(response: Mapping[str, Any]) -> None:
    """Refuses a ceremony a page of another origin framed (clientData's `crossOrigin`, or a
    `topOrigin`): Signoff's pages are never framed (frame-ancestors 'none'), so one is forged."""
    encoded = str(response.get("response", {}).get("clientDataJSON", ""))
    client = json.loads(websafe_decode(encoded)) if encoded else {}
    if client.get("crossOrigin") or client.get("topOrigin"):
        raise ValueError("a ceremony inside another site's frame")


class RelyingParty:
    """Signoff's WebAuthn server, for the origin of its public URL."""

    def __init__(self, public_url: str):
        parts = urlsplit(public_url)
        default = {"https": 443, "http": 80}.get(parts.scheme.lower())
        port = f":{parts.port}" if parts.port and parts.port != default else ""
        self.id = (parts.hostname or "").lower()  # (as a browser writes its origin: https://host[:port])
        self.origin = f"{parts.scheme.lower()}://{self.id}{port}"
        self.server = Fido2Server(
            PublicKeyCredentialRpEntity(id=self.id, name="Signoff"),
            attestation=AttestationConveyancePreference.NONE,
            verify_origin=lambda origin: origin == self.origin,
        )
        self.server.timeout = TIMEOUT_MS  # type: ignore[assignment]  # (fido2 types it as None)

    def creation_options(
        self, user: str, existing: Sequence[Passkey], challenge: bytes, display_name: str = ""
    ) -> dict[str, Any]:
        """`publicKey` for navigator.credentials.create (base64url where WebAuthn wants bytes): the
        passkey is for the Slack user id `user`, shown by their devices as `display_name`."""
        options, _ = self.server.register_begin(
            PublicKeyCredentialUserEntity(id=user.encode(), name=user, display_name=display_name or user),
            credentials=[_descriptor(p) for p in existing],
            resident_key_requirement=ResidentKeyRequirement.PREFERRED,
            user_verification=REQUIRED,
            challenge=challenge,
        )
        return dict(options)["publicKey"]

    def request_options(self, passkeys: Sequence[Passkey], challenge: bytes) -> dict[str, Any]:
        """`publicKey` for navigator.credentials.get: this person's passkeys only."""
        options, _ = self.server.authenticate_begin(
            [_descriptor(p) for p in passkeys], user_verification=REQUIRED, challenge=challenge
        )
        return dict(options)["publicKey"]

    def registered(self, challenge: bytes, response: Mapping[str, Any], label: str, now: float) -> Passkey:
        """The passkey a registration response makes, once checked (NotVerified if not)."""
        state = {"challenge": websafe_encode(challenge), "user_verification": REQUIRED}
        try:
            _not_framed(response)
            auth_data = self.server.register_complete(state, response)
        except Exception as exc:  # fido2 raises ValueError, KeyError, TypeError on what it cannot read
            raise NotVerified(str(exc) or type(exc).__name__) from None
        credential = auth_data.credential_data
        if credential is None:
            raise NotVerified("no credential in the registration")
        return Passkey(
            credential_id=websafe_encode(credential.credential_id),
            public_key=websafe_encode(cbor.encode(dict(credential.public_key))),
            sign_count=auth_data.counter,
            label=label,
            created_at=now,
        )

    def verified(
        self, challenge: bytes, passkeys: Sequence[Passkey], response: Mapping[str, Any]
    ) -> tuple[str, int]:
        """(credential id, its sign count) of an assertion of `challenge` by one of `passkeys`,
        with user verification; NotVerified otherwise."""
        state = {"challenge": websafe_encode(challenge), "user_verification": REQUIRED}
        try:
            _not_framed(response)
            self.server.authenticate_complete(state, [_attested(p) for p in passkeys], response)
            assertion = AuthenticationResponse.from_dict(response)
        except Exception as exc:
            raise NotVerified(str(exc) or type(exc).__name__) from None
        return websafe_encode(assertion.raw_id), assertion.response.authenticator_data.counter
