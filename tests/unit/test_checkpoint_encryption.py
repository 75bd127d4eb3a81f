"""Checkpoint keys without Redis: the settings that carry them, the format (LangGraph's own AES
cipher reads what Signoff writes, and the other way round), rotation and refusal."""

from __future__ import annotations

import base64
import os

import pytest
from Crypto.Cipher import AES
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from agent_runner.checkpointer import CheckpointKeyError, CheckpointKeys
from agent_runner.checkpointer.encryption import reseal
from core.config import Settings, SettingsError

KEY, OTHER = os.urandom(32), os.urandom(32)
VALUE = {"api_key": "sk-live-7Qx2Vn9Lr4Tb8Kw1", "n": 3}


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def typed(pair: tuple[str, bytes]) -> bytes:
    return pair[0].encode() + b"\x00" + pair[1]


def test_the_keys_come_from_the_settings_and_stay_hidden():
    settings = Settings.from_env(
        {"SIGNOFF_CHECKPOINT_KEY": b64(KEY), "SIGNOFF_CHECKPOINT_OLD_KEYS": f"{b64(OTHER)}, {b64(KEY)}"}
    )
    keys = CheckpointKeys.from_settings(settings)
    sealed_before = CheckpointKeys(OTHER).encrypt(b"sealed under the old key")

    assert keys is not None and keys.encrypts
    assert b64(KEY) not in repr(settings) and KEY not in repr(settings).encode()
    assert keys.decrypt(*sealed_before) == b"sealed under the old key"
    assert CheckpointKeys.from_settings(Settings.from_env({})) is None  # no key: nothing changes


@pytest.mark.parametrize(
    "env, expected",
    [
        (
            {"SIGNOFF_CHECKPOINT_KEY": "not base64!"},
            "SIGNOFF_CHECKPOINT_KEY=(hidden): not base64: an AES-256 key is 32 random bytes in base64",
        ),
        (
            {"SIGNOFF_CHECKPOINT_KEY": b64(os.urandom(16))},
            "SIGNOFF_CHECKPOINT_KEY=(hidden): 16 bytes once decoded: an AES-256 key is 32 random bytes",
        ),
        (
            {"SIGNOFF_CHECKPOINT_OLD_KEYS": f"{b64(KEY)},{b64(b'short')}"},
            "SIGNOFF_CHECKPOINT_OLD_KEYS=(hidden): key 2 of 2: 5 bytes once decoded",
        ),
    ],
)
def test_a_wrong_key_setting_is_one_line_naming_it_never_showing_it(env, expected):
    with pytest.raises(SettingsError) as refused:
        Settings.from_env(env)

    [line] = refused.value.problems
    assert line.startswith(expected)
    assert all(value not in line for value in env.values())


def test_a_url_safe_key_is_taken_too():
    settings = Settings.from_env({"SIGNOFF_CHECKPOINT_KEY": base64.urlsafe_b64encode(KEY).decode()})
    assert settings.checkpoint_key is not None and settings.checkpoint_key.get_secret_value() == KEY


def test_langgraphs_own_aes_cipher_reads_what_signoff_writes_and_the_other_way_round():
    ours = CheckpointKeys(KEY).serializer(JsonPlusSerializer())
    langgraph = EncryptedSerializer.from_pycryptodome_aes(JsonPlusSerializer(), key=KEY, mode=AES.MODE_GCM)

    written = ours.dumps_typed(VALUE)

    assert written[0] == "msgpack+aes"
    assert langgraph.loads_typed(written) == VALUE
    assert ours.loads_typed(langgraph.dumps_typed(VALUE)) == VALUE
    assert b"sk-live" not in written[1]


def test_a_value_is_never_sealed_twice_alike():
    ours = CheckpointKeys(KEY).serializer(JsonPlusSerializer())
    assert ours.dumps_typed(VALUE)[1] != ours.dumps_typed(VALUE)[1]  # a fresh nonce each time


def test_a_wrong_key_or_an_altered_value_is_refused_never_read_as_something_else():
    written = CheckpointKeys(KEY).serializer(JsonPlusSerializer()).dumps_typed(VALUE)
    altered = (written[0], written[1][:-1] + bytes([written[1][-1] ^ 1]))

    for keys, value in ((CheckpointKeys(OTHER), written), (CheckpointKeys(KEY), altered)):
        with pytest.raises(CheckpointKeyError, match="neither SIGNOFF_CHECKPOINT_KEY nor any of"):
            keys.serializer(JsonPlusSerializer()).loads_typed(value)


def test_a_key_rotated_out_still_reads_and_what_was_stored_in_the_clear_too():
    rotated = CheckpointKeys(OTHER, [KEY]).serializer(JsonPlusSerializer())
    old = CheckpointKeys(KEY).serializer(JsonPlusSerializer()).dumps_typed(VALUE)

    assert rotated.loads_typed(old) == VALUE
    assert rotated.loads_typed(JsonPlusSerializer().dumps_typed(VALUE)) == VALUE  # before any key
    assert CheckpointKeys(OTHER, [KEY]).opened("aes", old[1])[0] == 1  # (by the old key)


def test_reseal_writes_each_value_as_the_current_keys_store_it():
    plain = typed(JsonPlusSerializer().dumps_typed(VALUE))
    under_old = typed(CheckpointKeys(KEY).serializer(JsonPlusSerializer()).dumps_typed(VALUE))
    rotating, turning_off = CheckpointKeys(OTHER, [KEY]), CheckpointKeys(None, [KEY])

    from_the_clear, from_the_old_key = reseal(rotating, plain), reseal(rotating, under_old)

    assert from_the_clear is not None and from_the_clear.startswith(b"msgpack+aes\x00")
    assert from_the_old_key is not None and CheckpointKeys(OTHER).opened("aes", from_the_old_key[12:])[0] == 0
    assert reseal(rotating, from_the_old_key) is None  # under the current key already
    assert reseal(rotating, b"empty\x00") is None  # a channel without a value
    assert reseal(turning_off, under_old) == plain
    assert reseal(turning_off, plain) is None
    with pytest.raises(CheckpointKeyError):
        reseal(CheckpointKeys(os.urandom(32)), under_old)
