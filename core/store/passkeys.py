"""People's passkeys and the one-time links to Signoff's pages (a step-up, an enrolment): the
Store's `passkeys` room.

A person's passkeys are one hash per Slack user id (`Keys.passkeys`): credential id (base64url)
-> JSON of what WebAuthn needs to check an assertion later and nothing more: the public key (COSE,
base64url), the sign count, a label, when it was added. Each key is used alone (one per command),
so it may live in any slot of a cluster.

A link's token is random (256 bits) and travels only in the link; Redis keeps its SHA-256 as the
key's name (`Keys.link`), with the link's record and a time to live. `take` reads and deletes it
in one step (GETDEL): whatever races, one request gets it.

A sign count only moves up (`counted`, in one script): an assertion whose count is not above the
stored one is refused (a cloned authenticator), except 0 on both sides, which is what an
authenticator that keeps no counter sends (WebAuthn §6.1.1).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any

from pydantic import BaseModel, ConfigDict

from core.keys import Keys


class Passkey(BaseModel):
    """One registered passkey of one person: what an assertion is checked against."""

    model_config = ConfigDict(extra="ignore")

    credential_id: str  # base64url
    public_key: str  # the COSE key, base64url
    sign_count: int = 0
    label: str = ""
    created_at: float = 0.0


class Link(BaseModel):
    """What a one-time link is for: a step-up (`approval_id`, its `actions` as [index, revision,
    hash of the arguments shown], what the click was: approve, trust or approve_all) or an
    enrolment; whose it is; a random `nonce` the WebAuthn challenge is derived from."""

    model_config = ConfigDict(extra="ignore")

    kind: str  # "step_up" | "enrol"
    user: str
    nonce: str
    expires_at: float
    approval_id: str = ""
    actions: list[tuple[int, int, str]] = []
    what: str = "approve"
    channel: str | None = None


# Move a passkey's sign count up to ARGV[2], or say why not.
COUNTED = """
local passkeys = KEYS[1]
local id, count = ARGV[1], tonumber(ARGV[2])
local stored = redis.call('HGET', passkeys, id)
if not stored then return 'missing' end
local passkey = cjson.decode(stored)
local before = tonumber(passkey['sign_count']) or 0
if count == 0 and before == 0 then return 'ok' end
if count <= before then return 'regressed' end
passkey['sign_count'] = count
redis.call('HSET', passkeys, id, cjson.encode(passkey))
return 'ok'
"""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Passkeys:
    """People's passkeys, and one-time links."""

    def __init__(self, redis: Any, keys: Keys):
        self.redis, self.keys = redis, keys
        self._counted = redis.register_script(COUNTED)

    async def of(self, user: str) -> list[Passkey]:
        """`user`'s passkeys, oldest first."""
        stored = await self.redis.hgetall(self.keys.passkeys(user))
        found = [Passkey.model_validate_json(value) for value in stored.values()]
        return sorted(found, key=lambda p: p.created_at)

    async def add(self, user: str, passkey: Passkey) -> bool:
        """Keep a new passkey of `user`; False if that credential is registered already."""
        return bool(
            await self.redis.hsetnx(
                self.keys.passkeys(user), passkey.credential_id, passkey.model_dump_json()
            )
        )

    async def remove(self, user: str, credential_id: str) -> bool:
        return bool(await self.redis.hdel(self.keys.passkeys(user), credential_id))

    async def counted(self, user: str, credential_id: str, count: int) -> str:
        """ "ok" once the sign count moved to `count`; "regressed" when it is not above the
        stored one (0 and 0 excepted); "missing" when the passkey was removed meanwhile."""
        return str(await self._counted(keys=[self.keys.passkeys(user)], args=[credential_id, count]))

    async def issue(self, link: Link, ttl_s: int) -> str:
        """A new one-time link's token (kept hashed, for `ttl_s` seconds)."""
        token = secrets.token_urlsafe(32)
        await self.redis.set(self.keys.link(token_hash(token)), link.model_dump_json(), ex=ttl_s)
        return token

    async def peek(self, token: str) -> Link | None:
        """The link's record while it is valid, without using it."""
        stored = await self.redis.get(self.keys.link(token_hash(token)))
        return Link.model_validate_json(stored) if stored else None

    async def take(self, token: str) -> Link | None:
        """The link's record, used up (one request gets it, whatever races)."""
        stored = await self.redis.getdel(self.keys.link(token_hash(token)))
        return Link.model_validate_json(stored) if stored else None


def new_nonce() -> str:
    return secrets.token_urlsafe(24)


def canonical(value: Any) -> str:
    """JSON with sorted keys and no spaces: what a hash of arguments is taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
