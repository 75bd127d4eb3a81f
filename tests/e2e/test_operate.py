"""The operator's commands, run as a person runs them (`signoff …` in a shell) against a real
Redis and the Slack stand-in: pending, audit, deadletters, doctor."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import re
import subprocess
import sys
import uuid

from core.records import ApprovalStatus, Run
from signoff.commands.pending import pending_approvals
from signoff.slack_doctor import REQUIRED_SCOPES, SURFACE_SCOPES
from slack_standin.app_config import assistant_view_install
from slack_standin.webapi import GRANTED, manifest_scopes
from tests.redis.test_audit_chain import decided
from tests.support.files import audit_rows, write_policy
from tests.support.harness import (
    ASK_EMAIL,
    ROOT,
    Harness,
    eventually,
    signoff,
    start_scene,
    waiting_approvals,
)
from tests.support.people import ALICE, BOB, RILEY


def policy_env(tmp_path, text: str) -> dict[str, str]:
    return {"SIGNOFF_POLICY": write_policy(tmp_path, text)}


async def test_pending_says_what_waits_where_for_whom_and_how_long(redis_url, tmp_path):
    env = policy_env(
        tmp_path, '[defaults]\napprovers = ["U0ALICE"]\n[[rules]]\ntools = ["send_email"]\ntimeout = "2h"\n'
    )
    async with Harness(redis_url, env=env) as scene:
        empty = await signoff(scene, "pending")
        assert (empty.returncode, empty.stdout) == (0, "Nothing is waiting.\n")
        await scene.start_bot()
        await scene.start_runner("demo")
        thread_id = await scene.ask(ASK_EMAIL, requester=RILEY)
        card = await scene.card(thread_id)
        approval = (await scene.store.approvals.of_thread(thread_id))[0]

        shown = await signoff(scene, "pending")

        assert shown.returncode == 0, shown.stderr
        header, row = shown.stdout.splitlines()
        assert header.split() == [
            "APPROVAL_ID", "WAITING", "WHAT", "WHERE", "REQUESTER", "APPROVERS", "DECIDED", "EXPIRES_IN", "THREAD_ID"
        ]  # fmt: skip
        assert row.split()[:4] == [approval.approval_id, row.split()[1], "send_email", card.channel]
        assert re.fullmatch(r"\d+s", row.split()[1])
        assert row.split()[4:8] == [RILEY, ALICE, "0/1", row.split()[7]] and row.split()[7].startswith("1h")

        # without the policy file (another shell): the approvers the card names, kept with it
        elsewhere = await signoff(scene, "pending", SIGNOFF_POLICY="")
        assert elsewhere.stdout.splitlines()[1].split()[5] == ALICE, elsewhere.stdout + elsewhere.stderr


async def test_pending_lists_every_approval_oldest_first_however_many_wait(redis_url):
    async with Harness(redis_url) as scene:
        waiting = await waiting_approvals(scene.store, 10_001)

        shown = await signoff(scene, "pending")

    assert shown.returncode == 0, shown.stderr
    listed = [line.split()[0] for line in shown.stdout.splitlines()[1:]]
    assert listed == [a.approval_id for a in waiting]  # the oldest first, none left out


async def test_pending_reads_every_partition_a_page_at_a_time(store):
    waiting = await waiting_approvals(store, 7)  # their runs spread over the cluster's partitions
    await store.approvals.finish(waiting[3], ApprovalStatus.RESUMED)  # decided: no longer listed

    pages = [[a.approval_id for a in page] async for page in pending_approvals(store, page=2)]

    assert [len(page) for page in pages] == [2, 2, 2]
    assert [i for page in pages for i in page] == [a.approval_id for a in waiting if a is not waiting[3]]


async def test_an_export_into_a_pipe_closed_early_ends_quietly(redis_url):
    """`signoff audit | head`: the reader is gone before the export ends; no traceback."""
    async with Harness(redis_url) as scene:
        await decided(scene.store)
        read, write = os.pipe()
        os.close(read)  # (head has read its lines and exited)
        try:
            done = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "signoff", "audit"],
                cwd=ROOT,
                env=scene.process_env(),
                stdout=write,
                stderr=subprocess.PIPE,
                text=True,
                timeout=120,
            )
        finally:
            os.close(write)

    assert (done.returncode, done.stderr) == (141, "")  # as a tool a closed pipe stopped


async def test_audit_exports_who_decided_what_with_original_and_edited_arguments(redis_url, tmp_path):
    async with start_scene(redis_url, "demo", "per_call") as scene:
        first = await scene.ask(ASK_EMAIL, requester=RILEY)
        await scene.standin.click(ALICE, await scene.card(first), "approve:0")
        await scene.answer(first)
        second = await scene.ask("write the note", graph="per_call", requester=RILEY)
        card = await scene.card(second)
        view = await scene.open_modal(BOB, card, "edit:0")
        await scene.standin.submit(BOB, view, {"path": "/notes/b.md"})
        await eventually(lambda: scene.store.audit.entries(), what="the edit audited")
        await eventually(lambda: _two(scene), what="both decisions audited")
        third = await scene.ask(ASK_EMAIL, requester=RILEY)
        view = await scene.open_modal(BOB, await scene.card(third), "reject:0")
        await scene.standin.submit(BOB, view, {"reason": '=HYPERLINK("https://evil.example","x")'})
        await eventually(lambda: _three(scene), what="the reject audited")

        lines = await signoff(scene, "audit")
        as_csv = await signoff(scene, "audit", "--format", "csv", "--user", BOB)
        only_email = await signoff(scene, "audit", "--tool", "send_email", "--since", "1h")
        later = await signoff(scene, "audit", "--since", "2999-01-01")
        wrong = await signoff(scene, "audit", "--since", "last tuesday")
        verified = await signoff(scene, "audit", "verify")  # what the bot's clicks wrote is chained

    rows = audit_rows(lines.stdout)
    assert [(r["user"], r["tool"], r["decision"], r["outcome"]) for r in rows] == [
        (ALICE, "send_email", "approve", "decided"),
        (BOB, "write_file", "edit", "decided"),
        (BOB, "send_email", "reject", "decided"),
    ]
    assert rows[2]["message"] == '=HYPERLINK("https://evil.example","x")'  # as written, in JSON lines
    assert rows[0]["original_args"]["to"] == "finance@acme.com" and rows[0]["edited_args"] is None
    assert rows[1]["edited_args"] == {"path": "/notes/b.md", "content": "hello"}
    assert rows[1]["original_args"] == {"path": "/notes/a.md", "content": "hello"}
    table = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert [(r["user"], r["tool"]) for r in table] == [(BOB, "write_file"), (BOB, "send_email")]
    assert table[1]["message"] == '\'=HYPERLINK("https://evil.example","x")'  # never a live formula
    assert json.loads(table[0]["edited_args"])["path"] == "/notes/b.md"
    assert [row["tool"] for row in audit_rows(only_email.stdout)] == ["send_email"] * 2
    assert audit_rows(later.stdout) == []
    assert wrong.returncode == 2 and "--since 'last tuesday'" in wrong.stderr
    assert verified.returncode == 0 and verified.stdout.startswith("Verified: 3 entries"), verified.stdout


async def _two(scene: Harness) -> bool:
    return len(await scene.store.audit.entries()) >= 2


async def _three(scene: Harness) -> bool:
    return len(await scene.store.audit.entries()) >= 3


async def test_dead_letters_are_listed_shown_replayed_through_the_checks_and_dropped(redis_url):
    async with Harness(redis_url) as scene:
        await scene.start_bot()
        keys = scene.store.keys.of("run-replayed")  # the partition of the replayed start
        await scene.store.redis.xadd(keys.commands, {"command": '{"type": "launch_missiles"}'})
        await scene.start_runner("demo")
        parked = await eventually(lambda: scene.store.redis.xrange(keys.dead_letters), what="a dead letter")
        bad_id = parked[0][0]
        start = {
            "command": json.dumps(
                {"type": "start", "command_id": "c-replayed", "thread_id": "run-replayed", "text": ASK_EMAIL}
            ),
            "stream": keys.commands,
            "entry_id": "0-1",
            "why": "the runner was away (a test put it here)",
        }
        await scene.store.runs.save(
            Run(thread_id="run-replayed", graph="demo", channel="C0TEST", requester=RILEY)
        )
        good_id = await scene.store.redis.xadd(keys.dead_letters, start)

        listed = await signoff(scene, "deadletters", "list")
        shown = await signoff(scene, "deadletters", "show", bad_id)
        refused = await signoff(scene, "deadletters", "replay", bad_id)
        replayed = await signoff(scene, "deadletters", "replay", good_id)
        await scene.card("run-replayed")  # the replayed start ran like any first delivery
        dropped = await signoff(scene, "deadletters", "drop", bad_id)
        missing = await signoff(scene, "deadletters", "show", "1-1")
        not_an_id = await signoff(scene, "deadletters", "show", "abc")
        needs_id = await signoff(scene, "deadletters", "replay")
        left = await scene.store.redis.xrange(keys.dead_letters)

    assert listed.returncode == 0 and bad_id in listed.stdout and good_id in listed.stdout
    assert json.loads(shown.stdout)["command"] == {"type": "launch_missiles"}
    assert refused.returncode == 1 and "still does not decode" in refused.stdout
    assert replayed.returncode == 0 and f"Replayed {good_id} onto {keys.commands}" in replayed.stdout
    assert dropped.returncode == 0 and left == []
    assert missing.returncode == 1 and "No dead letter 1-1" in missing.stdout
    assert not_an_id.returncode == 1 and "No dead letter abc" in not_an_id.stdout
    assert needs_id.returncode == 2 and "needs the entry id" in needs_id.stderr


async def test_dead_letters_are_listed_shown_and_dropped_whatever_their_bytes(redis_url):
    async with Harness(redis_url) as scene:
        partition = scene.store.keys.partitions[0]
        # written by something that is not Signoff: bytes that are not UTF-8, a terminal's escape
        # sequence, a JSON text spelling a lone surrogate, and an id past the calendar's end
        odd = {
            "stream": partition.commands,
            "why": "\x1b[2J\u202e not UTF-8: ".encode() + b"\xff\xfe\nsecond line",
            "command": b'{"type": "start", "text": "\xff"}',
            "note": '"\\ud800"',
        }
        odd_id = await scene.store.redis.xadd(partition.dead_letters, odd)
        far = {"stream": partition.commands, "why": "from the far future"}
        far_id = await scene.store.redis.xadd(partition.dead_letters, far, id="18446744073709551615-1")

        listed = await signoff(scene, "deadletters", "list")
        shown = await signoff(scene, "deadletters", "show", odd_id)
        refused = await signoff(scene, "deadletters", "replay", odd_id)
        beyond = await signoff(scene, "deadletters", "show", "99999999999999999999-1")
        dropped = [await signoff(scene, "deadletters", "drop", entry) for entry in (odd_id, far_id)]
        left = await scene.store.redis.xlen(partition.dead_letters)

    assert listed.returncode == 0, listed.stderr
    rows = [re.split(r"\s{2,}", line) for line in listed.stdout.splitlines()[1:]]
    assert rows[0][0] == odd_id and rows[0][2:] == ["commands", "\\x1b[2J\\u202e not UTF-8: \\xff\\xfe"]
    assert rows[1] == [far_id, "not a date", "commands", "from the far future"]
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["why"] == "\x1b[2J\u202e not UTF-8: \\xff\\xfe\nsecond line"
    assert json.loads(shown.stdout)["note"] == "\ud800"
    # escaped: a terminal shows them, instead of clearing the screen and reversing the text
    assert "\x1b" not in listed.stdout + shown.stdout and "\u202e" not in listed.stdout + shown.stdout
    assert refused.returncode == 1 and "still does not decode" in refused.stdout, refused.stderr
    assert beyond.returncode == 1 and "No dead letter 99999999999999999999-1." in beyond.stdout
    assert [d.returncode for d in dropped] == [0, 0] and left == 0


async def test_doctor_checks_each_part_and_says_how_to_fix_it(redis_url, tmp_path):
    env = policy_env(tmp_path, '[[rules]]\ntools = ["issue_refund"]\nchannel = "C0FINANCE"\n')
    async with Harness(redis_url, env=env) as scene:
        healthy = await signoff(scene, "doctor", SIGNOFF_GRAPH="signoff_demo.agent:build_demo_agent")
        scene.standin.remove_bot("C0FINANCE")
        scene.standin.scopes.remove("users:read")
        scene.standin.scopes.remove("assistant:write")
        broken = await signoff(scene, "doctor", SIGNOFF_GRAPH="nowhere.module:graph", SLACK_SIGNING_SECRET="")
        no_token = await signoff(scene, "doctor", SLACK_BOT_TOKEN="")

    assert "✓ Slack token: bot signoff in team Stand-in" in healthy.stdout
    assert "✓ token scopes" in healthy.stdout and "✓ channel C0FINANCE: the bot is a member" in healthy.stdout
    assert "✓ Redis modules: ReJSON and RediSearch loaded" in healthy.stdout
    assert "✓ graph demo: loads" in healthy.stdout  # SIGNOFF_GRAPH's graph, named after its module
    # the test's Redis runs without AOF: exactly what doctor is for
    assert "✗ Redis persistence: appendonly no" in healthy.stdout
    assert "fix: CONFIG SET appendonly yes" in healthy.stdout
    assert healthy.returncode == 1
    assert "✗ scope users:read: missing: people's names on cards" in broken.stdout  # one line a scope
    assert "✗ scope assistant:write" not in broken.stdout  # (optional: the surfaces line says so)
    # which of Slack's agent surfaces the token allows: none is required, each says how to turn it on
    surfaces = "✓ agent surfaces: the run's plan, streamed answers and a DM's session status: on (chat:write)"
    assert surfaces in healthy.stdout and "the Messages tab's suggested prompts: on" in healthy.stdout
    assert "suggested prompts: off, add assistant:write and reinstall to turn it on" in broken.stdout
    # the Agents feature, as far as a bot token tells (the rest: the app's manifest, below)
    assert "✓ feature agent view: on, as far as the token tells: it has assistant:write" in healthy.stdout
    assert "SLACK_CONFIG_TOKEN and SLACK_APP_ID let doctor read" in healthy.stdout
    assert "✓ feature agent view: off: the token has no assistant:write" in broken.stdout
    assert "✗ channel C0FINANCE: the bot is not a member" in broken.stdout and "/invite" in broken.stdout
    assert "✗ signing secret" in broken.stdout
    assert re.search(r"✗ graph \w+: ", broken.stdout)
    assert "✗ Slack token: SLACK_BOT_TOKEN is not set" in no_token.stdout


async def test_doctor_reads_the_apps_manifest_and_says_each_missing_feature_and_event(redis_url):
    config = {"SLACK_APP_ID": "A0SIGNOFF"}
    async with Harness(redis_url) as scene:
        standin = scene.standin
        config["SLACK_CONFIG_TOKEN"] = standin.config_token
        new_app = await signoff(scene, "doctor", **config)
        standin.app_manifest = assistant_view_install(standin.app_manifest)
        earlier = await signoff(scene, "doctor", **config)
        app = standin.app_manifest
        app["features"]["app_home"]["messages_tab_enabled"] = False
        app["settings"]["event_subscriptions"]["bot_events"].remove("message.im")
        app["settings"]["event_subscriptions"]["bot_events"].remove("app_home_opened")
        broken = await signoff(scene, "doctor", **config)
        no_app_id = await signoff(scene, "doctor", SLACK_CONFIG_TOKEN=standin.config_token)
        expired = await signoff(
            scene, "doctor", SLACK_CONFIG_TOKEN="xoxe.xoxp-expired", SLACK_APP_ID="A0SIGNOFF"
        )
    exported = [c for c in standin.calls if c.method == "apps.manifest.export"]

    assert "✓ app manifest: read A0SIGNOFF's (apps.manifest.export)" in new_app.stdout
    for line in ("feature agent view: on (agent_view)", "feature Home tab: on", "feature Messages tab: on"):
        assert f"✓ {line}" in new_app.stdout
    assert "✓ events: 5 subscribed, none missing" in new_app.stdout and "✗ feature" not in new_app.stdout
    assert (
        "✓ feature agent view: the app has Slack's earlier assistant view (assistant_view)" in earlier.stdout
    )
    assert "✗ feature Messages tab: off: nobody can start a run in the app's DM" in broken.stdout
    assert (
        "✗ event message.im: not subscribed: a message in the Messages tab starts or continues a run"
        in broken.stdout
    )
    assert "✗ event app_home_opened: not subscribed" in broken.stdout
    assert "✗ app manifest: SLACK_CONFIG_TOKEN is set without SLACK_APP_ID" in no_app_id.stdout
    assert "✗ app manifest: apps.manifest.export: invalid_auth" in expired.stdout
    assert "they last 12 hours" in expired.stdout
    assert {c.args.get("app_id") for c in exported} == {"A0SIGNOFF"}


async def test_doctor_on_a_cluster_checks_every_master_and_says_the_layout(cluster_url):
    async with Harness(cluster_url) as scene:
        done = await signoff(scene, "doctor", SIGNOFF_GRAPH="signoff_demo.agent:build_demo_agent")

    assert "a Redis Cluster of 3 masters, Signoff's keys in 12 partitions" in done.stdout, done.stdout
    assert "✓ Redis modules: ReJSON and RediSearch loaded on every master" in done.stdout


def test_the_scopes_doctor_wants_are_the_ones_the_manifest_asks_for():
    # (the stand-in grants the manifest's scopes, as installing the app from it does)
    assert sorted(manifest_scopes()) == sorted([*REQUIRED_SCOPES, *SURFACE_SCOPES]) == sorted(GRANTED)


async def test_dead_letters_of_two_partitions_with_one_id_are_told_apart(cluster_url):
    import io

    from core.store import Store
    from signoff.commands.deadletters import deadletters_drop, deadletters_list, deadletters_show

    store = Store.from_url(cluster_url, f"t{uuid.uuid4().hex[:10]}")
    first, second = store.keys.partitions[1], store.keys.partitions[7]
    for partition, why in ((first, "first"), (second, "second")):  # parked in the same millisecond
        await store.redis.xadd(partition.dead_letters, {"stream": partition.commands, "why": why}, id="5-1")

    listed, bare, dropped, shown = io.StringIO(), io.StringIO(), io.StringIO(), io.StringIO()
    await deadletters_list(store, listed)
    assert await deadletters_drop(store, "5-1", bare) == 1
    assert await deadletters_drop(store, "7/5-1", dropped) == 0
    assert await deadletters_show(store, "5-1", shown) == 0  # one left: the bare id will do
    await store.close()

    assert "1/5-1" in listed.getvalue() and "7/5-1" in listed.getvalue()
    assert "Two partitions hold a dead letter 5-1: name one of 1/5-1, 7/5-1." in bare.getvalue()
    assert json.loads(shown.getvalue())["why"] == "first"


async def test_doctor_says_which_user_group_slack_no_longer_knows(redis_url, tmp_path):
    env = policy_env(tmp_path, '[defaults]\napprovers = ["S0FINANCE", "S0LEGAL"]\n')
    async with Harness(redis_url, env=env, groups={"S0FINANCE": [ALICE], "S0LEGAL": [BOB]}) as scene:
        healthy = await signoff(scene, "doctor")
        del scene.standin.groups["S0LEGAL"]  # deleted in Slack
        broken = await signoff(scene, "doctor")

    assert "✓ user group S0FINANCE: 1 members" in healthy.stdout
    assert "✓ user group S0LEGAL: 1 members" in healthy.stdout
    assert "✓ user group S0FINANCE: 1 members" in broken.stdout
    assert (
        "✗ user group S0LEGAL: Slack says it does not exist (no_such_subteam): it grants nobody"
        in broken.stdout
    )
    assert "fix: name an existing group in the policy" in broken.stdout
