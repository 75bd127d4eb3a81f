"""Checkpoints encrypted at rest (SIGNOFF_CHECKPOINT_KEY), end to end: a real run paused on a call
that carries an API key, its checkpoints read raw from Redis, resumed by a click; keys rotated with
`signoff migrate --rekey`; a wrong key; data written before a key was set; and no key at all.
"""

from __future__ import annotations

import base64
import os

import pytest

from tests.support.graphs import API_KEY
from tests.support.harness import APPROVE_BUTTON, Harness, signoff, start_scene
from tests.support.savers import at_rest

ENCRYPTED = b"msgpack+aes\x00"


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def in_the_clear(stored: dict[bytes, bytes]) -> list[bytes]:
    """The keys holding the call's API key (or its tail) as it is."""
    return [key for key, raw in stored.items() if API_KEY.encode() in raw or API_KEY[-8:].encode() in raw]


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    """The file the keyed agent's tool writes the key it was given to."""
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(path))
    return path


async def paused_on_the_key(scene: Harness) -> tuple[str, object]:
    thread_id = await scene.ask("call the API", graph="keyed")
    return thread_id, await scene.card(thread_id)


async def restarted(scene: Harness, **env: str) -> None:
    """Bot and runner started again with `env` changed (a value "" unsets it)."""
    await scene.stop_parts()
    for name, value in env.items():
        if value:
            scene.env[name] = value
        else:
            scene.env.pop(name, None)
    await scene.start_bot()
    await scene.start_runner("keyed")


async def test_with_a_key_no_checkpoint_holds_the_calls_secret_and_the_run_resumes(layout_url, ledger):
    async with start_scene(layout_url, "keyed", env={"SIGNOFF_CHECKPOINT_KEY": new_key()}) as scene:
        thread_id, card = await paused_on_the_key(scene)
        stored = at_rest(layout_url, thread_id)
        assert len(stored) >= 4  # the registry, checkpoints, their values and writes
        assert in_the_clear(stored) == []
        assert any(ENCRYPTED in raw for raw in stored.values())

        await scene.standin.click("U0ALICE", card, APPROVE_BUTTON)

        assert "Called." in await scene.answer(thread_id)
        assert ledger.read_text().splitlines() == [API_KEY]  # the tool got the value as asked
        assert in_the_clear(at_rest(layout_url, thread_id)) == []


async def test_without_a_key_checkpoints_are_stored_as_before(redis_url, ledger):
    async with start_scene(redis_url, "keyed") as scene:
        thread_id, card = await paused_on_the_key(scene)
        stored = at_rest(redis_url, thread_id)
        await scene.standin.click("U0ALICE", card, APPROVE_BUTTON)
        assert "Called." in await scene.answer(thread_id)
        nothing_to_rekey_with = await signoff(scene, "migrate", "--rekey")

    assert nothing_to_rekey_with.returncode == 2
    assert "encrypts the checkpoints under SIGNOFF_CHECKPOINT_KEY: set it" in nothing_to_rekey_with.stdout
    assert in_the_clear(stored)  # the value is there to find: what the test above looks for
    assert not any(b"+aes" in raw for raw in stored.values())
    assert ledger.read_text().splitlines() == [API_KEY]


async def test_keys_rotate_old_key_read_only_then_rekeyed_then_removed(redis_url, ledger):
    old, new = new_key(), new_key()
    async with start_scene(redis_url, "keyed", env={"SIGNOFF_CHECKPOINT_KEY": old}) as scene:
        thread_id, card = await paused_on_the_key(scene)
        await restarted(scene, SIGNOFF_CHECKPOINT_KEY=new, SIGNOFF_CHECKPOINT_OLD_KEYS=old)

        rekeyed = await signoff(scene, "migrate", "--rekey")
        again = await signoff(scene, "migrate", "--rekey")

        assert rekeyed.returncode == 0, rekeyed
        assert "stored values of 1 threads again under SIGNOFF_CHECKPOINT_KEY" in rekeyed.stdout
        assert "Wrote 0 stored values" not in rekeyed.stdout
        assert again.returncode == 0 and "Wrote 0 stored values of 1 threads" in again.stdout, again
        await restarted(scene, SIGNOFF_CHECKPOINT_OLD_KEYS="")  # the old key is gone
        await scene.standin.click("U0ALICE", card, APPROVE_BUTTON)

        assert "Called." in await scene.answer(thread_id)
        assert ledger.read_text().splitlines() == [API_KEY]
        assert in_the_clear(at_rest(redis_url, thread_id)) == []


async def test_a_wrong_key_is_a_clear_error_the_tool_never_runs_and_nothing_is_lost(redis_url, ledger):
    right = new_key()
    async with start_scene(redis_url, "keyed", env={"SIGNOFF_CHECKPOINT_KEY": right}) as scene:
        thread_id, card = await paused_on_the_key(scene)
        await restarted(scene, SIGNOFF_CHECKPOINT_KEY=new_key())
        await scene.standin.click("U0ALICE", card, APPROVE_BUTTON)

        failed = await scene.answer(thread_id, contains="CheckpointKeyError")
        wrong = await signoff(scene, "migrate", "--rekey")
        assert "Signoff could not carry this out (failed too often: CheckpointKeyError)" in failed
        assert not ledger.exists()  # never run on a state read as something else
        assert wrong.returncode == 1, wrong
        assert (
            f"1 threads hold values that no key given opens, left as they were: {thread_id}" in wrong.stdout
        )

        await restarted(scene, SIGNOFF_CHECKPOINT_KEY=right)  # the key put right, the resume replayed
        [(parked, _)] = await scene.store.redis.xrange(scene.store.keys.of(thread_id).dead_letters)
        replayed = await signoff(scene, "deadletters", "replay", parked)

        assert replayed.returncode == 0, replayed
        assert "Called." in await scene.answer(thread_id, contains="Called.")
        assert ledger.read_text().splitlines() == [API_KEY]


async def test_what_was_written_before_the_key_is_read_then_encrypted_by_rekey(redis_url, ledger):
    async with start_scene(redis_url, "keyed") as scene:
        thread_id, card = await paused_on_the_key(scene)
        await restarted(scene, SIGNOFF_CHECKPOINT_KEY=new_key())
        await scene.standin.click("U0ALICE", card, APPROVE_BUTTON)
        assert "Called." in await scene.answer(thread_id)  # read as it was written
        before = in_the_clear(at_rest(redis_url, thread_id))

        rekeyed = await signoff(scene, "migrate", "--rekey")

        assert before  # a key encrypts what is written from then on; what was stored before stays...
        assert rekeyed.returncode == 0, rekeyed
        assert in_the_clear(at_rest(redis_url, thread_id)) == []  # ...until the rekey
        assert ledger.read_text().splitlines() == [API_KEY]
