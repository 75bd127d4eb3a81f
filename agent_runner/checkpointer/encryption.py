"""Checkpoints encrypted at rest: LangGraph's own `EncryptedSerializer` with AES-256-GCM under
`SIGNOFF_CHECKPOINT_KEY`, reading what keys being rotated out sealed too
(`SIGNOFF_CHECKPOINT_OLD_KEYS`).

The cipher writes what LangGraph's `EncryptedSerializer.from_pycryptodome_aes(key=…,
mode=AES.MODE_GCM)` writes, byte for byte (cipher name `aes`; a 16-byte nonce, the 16-byte tag,
the ciphertext: each reads the other's, `tests/unit/test_checkpoint_encryption.py`), through
`cryptography`'s AESGCM (OpenSSL) rather than pycryptodome: about 1.5 µs a value here against
40 µs, which is most of what encryption costs a run (bench/README.md, "Checkpoints encrypted").

Every value the saver stores as `<serde type>\\0<bytes>` (`slots`: a checkpoint without its
channel values, its metadata, each channel value, each pending write's value) is stored as
`<serde type>+aes\\0<nonce><tag><ciphertext>` instead: what `EncryptedSerializer.dumps_typed`
gives, a fresh 16-byte nonce each time, the 16-byte GCM tag checked on every read. The names
around them stay in the clear: thread ids, namespaces, checkpoint ids and their parents', channel
names and versions, task ids and paths, the serde type (docs/security.md says it all).

A value without `+aes` (written before the key was set) is read as it is, as
`EncryptedSerializer.loads_typed` does: turning the key on loses no paused run, and
`signoff migrate --rekey` (`reseal`) encrypts what was written before. A value no key opens is
never read as something else: `CheckpointKeyError` says which settings to look at.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from langgraph.checkpoint.redis.jsonplus_redis import JsonPlusRedisSerializer
from langgraph.checkpoint.serde.base import CipherProtocol, SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from core.config import Settings

CIPHER = "aes"  # the cipher's name in a stored type (`msgpack+aes`), as LangGraph's AES cipher names it
KEY_BYTES = 32
NONCE_BYTES = TAG_BYTES = 16  # as LangGraph's AES cipher lays them out
SEP = b"\x00"


class CheckpointKeyError(ValueError):
    """A stored checkpoint that cannot be read with the keys this process was given."""


def unopened(kind: str) -> CheckpointKeyError:
    """What a process without any key says of an encrypted value."""
    return CheckpointKeyError(
        f"a stored checkpoint is encrypted ({kind}) and SIGNOFF_CHECKPOINT_KEY is not set: "
        "set it to the key it was written under (or list that key in SIGNOFF_CHECKPOINT_OLD_KEYS)"
    )


def msgpack_dumps(serde: SerializerProtocol, value: Any) -> tuple[str, bytes]:
    """`serde.dumps_typed`, as msgpack for the stock Redis serializer (its JSON form exists for
    RediSearch, which nothing here uses): what `InMemorySaver` stores."""
    if isinstance(serde, JsonPlusRedisSerializer):
        return JsonPlusSerializer.dumps_typed(serde, value)
    return serde.dumps_typed(value)


class Msgpack(SerializerProtocol):
    """The saver's serializer as the layout stores values (`msgpack_dumps`): what
    `EncryptedSerializer` encrypts and decrypts around."""

    def __init__(self, serde: SerializerProtocol):
        self.serde = serde

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return msgpack_dumps(self.serde, obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return self.serde.loads_typed(data)


class Aes256Gcm(CipherProtocol):
    """One key's AES-256-GCM, laid out as LangGraph's AES cipher lays it out: a fresh random
    nonce, the tag, then the ciphertext."""

    def __init__(self, key: bytes):
        self._aead = AESGCM(key)

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, plaintext, None)  # the ciphertext, then the tag
        return CIPHER, nonce + sealed[-TAG_BYTES:] + sealed[:-TAG_BYTES]

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        nonce, tag = ciphertext[:NONCE_BYTES], ciphertext[NONCE_BYTES : NONCE_BYTES + TAG_BYTES]
        return self._aead.decrypt(nonce, ciphertext[NONCE_BYTES + TAG_BYTES :] + tag, None)


class CheckpointKeys(CipherProtocol):
    """AES-256-GCM under `current`, opening what `current` or any of `old` sealed. Without a
    `current` key nothing is encrypted (the old keys only read): how encryption is turned off."""

    def __init__(self, current: bytes | None, old: Sequence[bytes] = ()):
        keys = list(dict.fromkeys([*([current] if current else []), *old]))
        if not keys:
            raise ValueError("no checkpoint key: pass `current` or `old` keys")
        for key in keys:
            if len(key) != KEY_BYTES:
                raise ValueError(f"a checkpoint key is {KEY_BYTES} bytes, not {len(key)}")
        self.encrypts = current is not None
        self._ciphers = [Aes256Gcm(key) for key in keys]

    @classmethod
    def of(cls, current: bytes | None, old: Sequence[bytes] = ()) -> CheckpointKeys | None:
        """The keys to give a saver, or None when there are none (nothing changes)."""
        return cls(current, old) if current or old else None

    @classmethod
    def from_settings(cls, settings: Settings) -> CheckpointKeys | None:
        """`SIGNOFF_CHECKPOINT_KEY` and `SIGNOFF_CHECKPOINT_OLD_KEYS` (`core.config.Settings`)."""
        current = settings.checkpoint_key.get_secret_value() if settings.checkpoint_key else None
        return cls.of(current, [key.get_secret_value() for key in settings.checkpoint_old_keys])

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        if not self.encrypts:
            raise CheckpointKeyError("no SIGNOFF_CHECKPOINT_KEY to encrypt with (old keys only read)")
        return self._ciphers[0].encrypt(plaintext)

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        return self.opened(ciphername, ciphertext)[1]

    def opened(self, ciphername: str, ciphertext: bytes) -> tuple[int, bytes]:
        """The plaintext, and which key opened it (0: the current one, when there is one)."""
        if ciphername != CIPHER:
            raise CheckpointKeyError(f"a stored checkpoint is encrypted with {ciphername!r}, not {CIPHER!r}")
        for index, cipher in enumerate(self._ciphers):
            try:
                return index, cipher.decrypt(ciphername, ciphertext)
            except (InvalidTag, ValueError):  # the tag does not check out under this key (or no nonce)
                continue
        raise CheckpointKeyError(
            "a stored checkpoint opens with neither SIGNOFF_CHECKPOINT_KEY nor any of "
            "SIGNOFF_CHECKPOINT_OLD_KEYS: it was written under another key, or altered in Redis"
        )

    def serializer(self, serde: SerializerProtocol) -> EncryptedSerializer:
        """LangGraph's `EncryptedSerializer` around the saver's serializer, with these keys."""
        return EncryptedSerializer(self, Msgpack(serde))


def reseal(keys: CheckpointKeys, raw: bytes) -> bytes | None:
    """A stored typed value (`<type>\\0<bytes>`) as it is stored under the current key (in the
    clear without one), or None when it is so already. No value is deserialized: only its bytes
    are decrypted and encrypted again."""
    kind, _, data = raw.partition(SEP)
    base, encrypted, ciphername = kind.decode().partition("+")
    if base == "empty" and not data:  # a channel without a value: nothing to hide
        return None
    if encrypted:
        index, plain = keys.opened(ciphername, data)
        if index == 0 and keys.encrypts:
            return None
    elif not keys.encrypts:
        return None
    else:
        plain = data
    if not keys.encrypts:
        return base.encode() + SEP + plain
    name, sealed = keys.encrypt(plain)
    return f"{base}+{name}".encode() + SEP + sealed
