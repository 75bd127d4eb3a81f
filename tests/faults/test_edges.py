"""Promises at the edges a team meets in its first month (issue 23), each with real Redis, the
real bot and runner (as processes where the edge needs them) and the Slack stand-in:

* a click after a time limit never counts, however late the sweeper (Slack rate limiting its
  notes), and one clock (Redis's) decides every deadline and every recorded time;
* a rolling deploy never runs a started tool twice; a runner frozen past its lease does not
  start a tool another runner took over;
* a user group Slack says is gone, or whose members cannot be read for too long, grants nobody;
* escalation and permission agree after the policy changed;
* a purge cut off half-way is finished; a click costs the same with 3,000 rules as with 3.
"""

from __future__ import annotations

import asyncio
import copy
import json
import signal
import time
from pathlib import Path

import pytest

from agent_runner.checkpointer import AsyncRedisCheckpointer
from agent_runner.graphs import build_graph
from agent_runner.retention import Janitor
from agent_runner.runner import Runner
from agent_runner.worker import RunnerWorker
from core import policy_file
from tests.support.files import lines, write_policy
from tests.support.harness import ASK_EMAIL, GRAPHS, ROOT, Harness, card_text, eventually, probe, start_scene
from tests.support.paths import SKEWED_CLOCK
from tests.support.people import ALICE, BOB, LEAD, RILEY


async def audit(scene: Harness) -> list[dict]:
    return await scene.store.audit.entries()


async def approval_of(scene: Harness, card) -> object:
    return await scene.store.approvals.get(card.metadata["event_payload"]["approval_id"])


# --- time limits: enforced where decisions are recorded, on one clock -----------------------------


@pytest.mark.slow
async def test_clicks_after_the_limit_never_run_the_tool_while_slack_rate_limits_the_notes(
    redis_url, tmp_path, monkeypatch
):
    """Eight approvals expire together in one channel; Slack answers the first expiry note with
    429s. Four are clicked 1.5 s after their limit: none of those clicks counts; the other four
    are expired on time all the same (no note holds up another expiry)."""
    ledger = tmp_path / "ledger.txt"
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(ledger))
    env = {
        "SIGNOFF_POLICY": write_policy(
            tmp_path,
            '[defaults]\napprovers = ["U0ALICE"]\n[[rules]]\ntools = ["send_email"]\ntimeout = "45s"\n',
        )
    }
    async with start_scene(redis_url, "ledger", env=env) as scene:
        threads = [await scene.ask("send the mail", graph="ledger", requester=RILEY) for _ in range(8)]
        cards = [await scene.card(t, timeout=90) for t in threads]  # one channel: about 1 post a second
        stale = [copy.deepcopy(c) for c in cards]  # as phones that have not refreshed show them
        approvals = [await approval_of(scene, c) for c in cards]
        limits = [a.expires(0) for a in approvals]  # (counted from when each card was visible)
        assert time.time() < min(limits) - 1, "the cards took longer than the time limit"

        await asyncio.sleep(min(limits) - time.time() - 0.5)
        scene.standin.fail_next("chat.postMessage", 429, count=3, retry_after=3)

        async def late_click(card, limit: float) -> None:
            await asyncio.sleep(max(0.0, limit + 1.5 - time.time()))
            assert (await scene.standin.click(ALICE, card, "approve:0")).acked

        await asyncio.gather(
            *(late_click(c, limit) for c, limit in list(zip(stale, limits, strict=True))[:4])
        )

        for thread_id in threads:
            await scene.answer(thread_id, timeout=90)
        refusals = await eventually(
            lambda: len(scene.standin.ephemerals_for(ALICE)) >= 4 and True, what="4 told"
        )
        assert refusals
        assert all("This request expired" in text for text in scene.standin.ephemerals_for(ALICE))
        entries = await audit(scene)
        assert sorted((e["outcome"], e["user"]) for e in entries) == [("expired", "signoff")] * 8
        assert lines(ledger) == []  # no tool ran
        for approval, limit in zip(approvals, limits, strict=True):  # every expiry on time, clicked or not
            (entry,) = [e for e in entries if e["approval_id"] == approval.approval_id]
            assert limit <= entry["at"] < limit + 5, entry["at"] - limit  # (the notes took 9 s)


@pytest.mark.slow
async def test_a_bot_whose_clock_is_ten_seconds_fast_keeps_every_deadline_and_records_redis_time(
    redis_url, tmp_path
):
    env = {
        "SIGNOFF_POLICY": write_policy(
            tmp_path,
            '[defaults]\napprovers = ["U0ALICE"]\n[[rules]]\ntools = ["send_email"]\n'
            'timeout = "8s"\nescalate_after = "4s"\nescalate_to = ["U0LEAD"]\n',
        )
    }
    async with Harness(redis_url, env=env) as scene:
        scene.spawn("bot", PYTHONPATH=f"{SKEWED_CLOCK}:{ROOT}", SIGNOFF_TEST_CLOCK_SKEW_S=10)
        await scene.wait_healthy(scene.port)
        await scene.start_runner("demo")
        card = await scene.card(await scene.ask(ASK_EMAIL, requester=RILEY))
        created = (await approval_of(scene, card)).created_at

        await eventually(lambda: scene.standin.notifications_for(LEAD), timeout=30, what="the escalation")
        escalated_seen = time.time()
        await scene.card_shows(card, "Expired: no decision in time")
        expired_seen = time.time()

        assert escalated_seen - created >= 3.8, f"escalated after {escalated_seen - created:.1f}s, not 4s"
        assert expired_seen - created >= 7.8, f"expired after {expired_seen - created:.1f}s, not 8s"
        recorded = {e["outcome"]: e["at"] for e in await audit(scene)}
        assert abs(recorded["escalated"] - escalated_seen) < 3 and abs(recorded["expired"] - expired_seen) < 3


# --- a rolling deploy, a frozen runner -----------------------------------------------------------


def started(path: Path) -> list[tuple[int, float]]:
    """(pid, when) of each execution of send_email that began."""
    return [(int(pid), float(at)) for _, pid, at in (line.split() for line in lines(path))]


def slow_sender(tmp_path: Path, tool_seconds: float, lease_ms: int, grace: str) -> tuple[Path, Path, dict]:
    """A runner process's settings for the ledger agent whose send_email takes `tool_seconds`:
    (the ledger of sends finished, the file of sends begun, the settings)."""
    ledger, begun = tmp_path / "ledger.txt", tmp_path / "started.txt"
    return (
        ledger,
        begun,
        {
            "SIGNOFF_GRAPH": "tests.support.graphs:build_ledger_agent",
            "SIGNOFF_TEST_LEDGER": ledger,
            "SIGNOFF_TEST_STARTED": begun,
            "SIGNOFF_TEST_TOOL_SECONDS": tool_seconds,
            "SIGNOFF_LEASE_MS": lease_ms,
            "SIGNOFF_STOP_GRACE": grace,
        },
    )


@pytest.mark.slow
async def test_a_runner_told_to_stop_finishes_its_long_tool_and_hands_back_only_unstarted_work(
    redis_url, tmp_path
):
    ledger, begun, tool = slow_sender(tmp_path, 25, 3_000, "60s")
    async with Harness(redis_url) as scene:
        await scene.start_bot()
        first = scene.spawn("runner", SIGNOFF_CONSUMER="runner-a", SIGNOFF_CONCURRENCY=1, **tool)
        long = await scene.ask("send the mail", graph="ledger")
        await scene.standin.click(ALICE, await scene.card(long, timeout=30), "approve:0")
        await eventually(lambda: started(begun), timeout=30, what="the 25 s tool at work")
        queued = await scene.ask("send another mail", graph="ledger")  # read by runner-a, waiting its turn
        await eventually(lambda: _taken(scene, queued), what="the second run's command taken by runner-a")

        first.send_signal(signal.SIGTERM)  # a rolling deploy
        scene.spawn("runner", SIGNOFF_CONSUMER="runner-b", **tool)

        await scene.card(queued, timeout=20)  # handed back at once: runner-b started it
        assert lines(ledger) == [], "the second run waited for the long tool"
        assert "Sent." in await scene.answer(long, timeout=60)
        await asyncio.to_thread(first.wait, 30)
        assert first.returncode == 0
        assert lines(ledger) == ["a@acme.com"]  # the long tool ran once, to its end
        assert [pid for pid, _ in started(begun)] == [first.pid]  # runner-b never started it


async def _taken(scene: Harness, thread_id: str) -> bool:
    """Whether the run's start command was read by a runner (it is pending in the group)."""
    for partition in scene.store.keys.partitions:
        for entry in await scene.store.redis.xpending_range(partition.commands, "runners", "-", "+", 100):
            found = await scene.store.redis.xrange(
                partition.commands, entry["message_id"], entry["message_id"]
            )
            if found and thread_id in json.dumps(found[0][1]):
                return True
    return False


@pytest.mark.slow
async def test_a_tool_that_outlives_the_stop_grace_is_cut_off_with_its_runner_and_run_again_after_it(
    redis_url, tmp_path
):
    ledger, begun, tool = slow_sender(tmp_path, 8, 2_000, "2s")
    async with Harness(redis_url) as scene:
        await scene.start_bot()
        first = scene.spawn("runner", SIGNOFF_CONSUMER="runner-a", **tool)
        thread_id = await scene.ask("send the mail", graph="ledger")
        await scene.standin.click(ALICE, await scene.card(thread_id, timeout=30), "approve:0")
        await eventually(lambda: started(begun), timeout=30, what="the tool at work")
        scene.spawn("runner", SIGNOFF_CONSUMER="runner-b", **tool)

        first.send_signal(signal.SIGTERM)
        await asyncio.to_thread(first.wait, 15)  # it exits after its grace, not after the tool
        exited = time.time()

        assert "Sent." in await scene.answer(thread_id, timeout=60)
        (cut, _), (again, again_at) = started(begun)
        assert (cut, again) == (first.pid, again)
        assert again != first.pid and again_at > exited  # never two at once
        assert lines(ledger) == ["a@acme.com"]  # the first execution died with its runner


async def test_a_runner_whose_lease_lapsed_and_was_taken_over_neither_saves_nor_starts_the_tool(
    redis_url, tmp_path, monkeypatch
):
    """The fencing check alone (this runner's heartbeat held still, as in a freeze): its lease
    lapses while the model thinks, another runner takes the command and the thread over; this
    one then saves no step and starts no tool, and acknowledges nothing."""
    from core.streams import StreamConsumer

    async def still(self, stop) -> None:  # a frozen process renews nothing
        await stop.wait()

    monkeypatch.setattr(StreamConsumer, "_heartbeat", still)
    ledger, thinking = tmp_path / "ledger.txt", tmp_path / "thinking.txt"
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(ledger))
    monkeypatch.setenv("SIGNOFF_TEST_THINKING", str(thinking))
    monkeypatch.setenv("SIGNOFF_TEST_MODEL_SECONDS", "3")
    async with Harness(redis_url) as scene, AsyncRedisCheckpointer.from_url(redis_url) as saver:
        graph = {"thinking": Runner(build_graph(GRAPHS["thinking"], saver), "thinking")}
        worker = RunnerWorker(scene.store, graph, "runner-a", lease_ms=1_000)
        serving = asyncio.create_task(worker.serve(scene.stop))
        thread_id = await scene.ask("compile the q3 report", graph="thinking")
        await eventually(lambda: lines(thinking), what="the model at work, the thread locked")
        lock = scene.store.keys.thread_lock(thread_id)
        await eventually(lambda: _gone(scene, lock), what="runner-a's lease lapsed")
        before = [c.config async for c in saver.alist({"configurable": {"thread_id": thread_id}})]

        (working,) = worker._entries.values()

        # Another runner takes the command and the thread over, as it does once a lease lapsed.
        partition = scene.store.keys.of(thread_id)
        (entry,) = await scene.store.redis.xpending_range(partition.commands, "runners", "-", "+", 10)
        await scene.store.redis.xclaim(partition.commands, "runners", "runner-b", 0, [entry["message_id"]])
        await scene.store.redis.set(lock, "runner-b:taken", px=60_000)

        await eventually(lambda: working.task.done(), timeout=20, what="runner-a done with the command")

        assert lines(ledger) == []  # the tool never started here
        assert (await scene.store.redis.xpending(partition.commands, "runners"))["pending"] == 1  # not acked
        after = [c.config async for c in saver.alist({"configurable": {"thread_id": thread_id}})]
        assert after == before  # nor did it save the model's step over the new owner's
        scene.stop.set()
        await serving


async def _gone(scene: Harness, key: str) -> bool:
    return not await scene.store.redis.exists(key)


@pytest.mark.slow
async def test_a_runner_frozen_past_its_lease_while_another_takes_over_runs_the_tool_once(
    redis_url, tmp_path
):
    ledger, thinking = tmp_path / "ledger.txt", tmp_path / "thinking.txt"
    common = {
        "SIGNOFF_GRAPH": "tests.support.graphs:build_thinking_agent",
        "SIGNOFF_TEST_LEDGER": ledger,
        "SIGNOFF_TEST_THINKING": thinking,
        "SIGNOFF_TEST_MODEL_SECONDS": 3,
        "SIGNOFF_LEASE_MS": 3_000,
    }
    async with Harness(redis_url) as scene:
        await scene.start_bot()
        frozen = scene.spawn("runner", SIGNOFF_CONSUMER="runner-a", **common)
        thread_id = await scene.ask("compile the q3 report", graph="thinking")
        await eventually(lambda: lines(thinking), timeout=30, what="runner-a thinking")
        frozen.send_signal(signal.SIGSTOP)  # a GC pause, a stopped VM
        scene.spawn("runner", SIGNOFF_CONSUMER="runner-b", **common)
        try:
            await eventually(lambda: len(lines(thinking)) >= 2, timeout=30, what="runner-b took over")
            await asyncio.sleep(8 - 3)  # frozen 8 s in all, as in the issue
        finally:
            frozen.send_signal(signal.SIGCONT)

        assert "Report ready." in await scene.answer(thread_id, timeout=40)
        await eventually(lambda: _idle(scene), timeout=30, what="every command acknowledged")
        assert lines(ledger) == ["report q3"]
        assert frozen.poll() is None  # runner-a carries on with other work


async def _idle(scene: Harness) -> bool:
    for partition in scene.store.keys.partitions:
        if (await scene.store.redis.xpending(partition.commands, "runners"))["pending"]:
            return False
    return True


# --- user groups fail closed ------------------------------------------------------------------


async def test_a_user_group_deleted_in_slack_grants_nobody_and_says_which(redis_url, tmp_path):
    env = {
        "SIGNOFF_POLICY": write_policy(tmp_path, '[defaults]\napprovers = ["S0FINANCE"]\n'),
        "SIGNOFF_GROUP_REFRESH": "1s",
    }
    async with start_scene(redis_url, "demo", env=env, groups={"S0FINANCE": [ALICE]}) as scene:
        card = await scene.card(thread_id := await scene.ask(ASK_EMAIL, requester=RILEY))
        await eventually(lambda: scene.store.redis.hexists(scene.store.keys.groups, "S0FINANCE"), what="read")

        del scene.standin.groups["S0FINANCE"]  # someone deletes the group in Slack
        await eventually(lambda: _group_record(scene, "gone"), timeout=20, what="the group known gone")
        shown = await scene.card_shows(card, "Nobody can approve this")
        assert "`S0FINANCE` no longer exists in Slack" in card_text(shown)

        await scene.standin.click(ALICE, card, "approve:0")

        told = await eventually(lambda: scene.standin.ephemerals_for(ALICE), what="Alice told")
        assert "not on the approver list" in told[0]
        assert await audit(scene) == [] and await scene.store.runs.state(thread_id) == "waiting"
        scraped = await _metrics(scene.port)
        assert 'signoff_approver_group_grants_nobody{group="S0FINANCE",reason="gone"} 1.0' in scraped


async def test_a_user_group_slack_cannot_answer_for_longer_than_the_bound_grants_nobody(redis_url, tmp_path):
    env = {
        "SIGNOFF_POLICY": write_policy(tmp_path, '[defaults]\napprovers = ["S0FINANCE"]\n'),
        "SIGNOFF_GROUP_REFRESH": "1s",
        "SIGNOFF_GROUP_STALE_AFTER": "3s",
    }
    async with start_scene(redis_url, "demo", env=env, groups={"S0FINANCE": [ALICE]}) as scene:
        card = await scene.card(await scene.ask(ASK_EMAIL, requester=RILEY))
        await eventually(lambda: scene.store.redis.hexists(scene.store.keys.groups, "S0FINANCE"), what="read")
        scene.standin.fail_next("usergroups.users.list", 500, count=10_000)  # Slack stops answering

        scraped = await eventually(
            lambda: _metric_says(scene.port, "S0FINANCE", "unreadable"), timeout=20, what="unreadable"
        )
        assert scraped
        await scene.standin.click(ALICE, card, "approve:0")

        told = await eventually(lambda: scene.standin.ephemerals_for(ALICE), what="Alice told")
        assert "could not check the approver groups" in told[0]
        assert await audit(scene) == []


@pytest.mark.parametrize("slack", ["never_answered", "stopped_answering"])
async def test_a_rule_naming_a_group_slack_has_not_answered_for_grants_nobody(redis_url, tmp_path, slack):
    """The group in a rule, not in `[defaults]`: while Slack has not answered for its members
    (never yet, or not for longer than the bound), nobody may decide that rule's calls: not
    someone in no group at all, not a member as Slack last said, not `[defaults]`' approver."""
    env = {
        "SIGNOFF_POLICY": write_policy(
            tmp_path,
            '[defaults]\napprovers = ["U0CAROL"]\n[[rules]]\ntools = ["send_email"]\napprovers = ["S0FINANCE"]\n',
        ),
        "SIGNOFF_GROUP_REFRESH": "1s",
        "SIGNOFF_GROUP_STALE_AFTER": "3s",
    }
    async with Harness(redis_url, env=env, groups={"S0FINANCE": [ALICE]}) as scene:
        if slack == "never_answered":
            scene.standin.fail_next("usergroups.users.list", 500, count=10_000)
        await scene.start_bot()
        await scene.start_runner("demo")
        card = await scene.card(thread_id := await scene.ask(ASK_EMAIL, requester=RILEY))
        if slack == "stopped_answering":
            await eventually(
                lambda: scene.store.redis.hexists(scene.store.keys.groups, "S0FINANCE"), what="read"
            )
            scene.standin.fail_next("usergroups.users.list", 500, count=10_000)
            await eventually(
                lambda: _metric_says(scene.port, "S0FINANCE", "unreadable"), timeout=20, what="unreadable"
            )

        for person in (BOB, ALICE, "U0CAROL"):
            await scene.standin.click(person, card, "approve:0")
            told = await eventually(lambda p=person: _told_or_recorded(scene, p), what=f"{person} told")
            assert "could not check the approver groups" in told[0], (person, told)

        assert await audit(scene) == [] and await scene.store.runs.state(thread_id) == "waiting"


async def _told_or_recorded(scene: Harness, person: str) -> list[str]:
    """What `person` was told, or the decisions recorded if something was (a click that counted)."""
    recorded = [f"recorded: {e['outcome']} by {e['user']}" for e in await audit(scene)]
    return recorded or scene.standin.ephemerals_for(person)


async def _group_record(scene: Harness, flag: str) -> bool:
    raw = await scene.store.redis.hget(scene.store.keys.groups, "S0FINANCE")
    return bool(raw and json.loads(raw).get(flag))


async def _metrics(port: int) -> str:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as reply:
        return await reply.text()


async def _metric_says(port: int, group: str, reason: str) -> bool:
    return f'signoff_approver_group_grants_nobody{{group="{group}",reason="{reason}"}} 1.0' in await _metrics(
        port
    )


# --- escalation and permission agree ----------------------------------------------------------


@pytest.mark.slow
async def test_whoever_an_escalation_notice_tells_may_decide_after_the_policy_changed(redis_url, tmp_path):
    before = write_policy(
        tmp_path,
        '[defaults]\napprovers = ["U0ALICE"]\n[[rules]]\ntools = ["send_email"]\n'
        'escalate_after = "3s"\nescalate_to = ["U0LEAD"]\n',
        "before.toml",
    )
    after = write_policy(
        tmp_path,
        '[defaults]\napprovers = ["U0ALICE"]\n[[rules]]\ntools = ["send_email"]\n'
        'escalate_after = "1h"\nescalate_to = ["U0LEAD"]\n',
        "after.toml",
    )
    async with Harness(redis_url) as scene:
        first = scene.spawn("bot", SIGNOFF_POLICY=before)
        await scene.wait_healthy(scene.port)
        await scene.start_runner("demo")
        card = await scene.card(thread_id := await scene.ask(ASK_EMAIL, requester=RILEY))
        first.kill()  # the policy changes: escalate after an hour now
        first.wait(10)
        scene.spawn("bot", SIGNOFF_POLICY=after)
        await scene.wait_healthy(scene.port)

        heard = await eventually(
            lambda: [m for m in scene.standin.notifications_for(LEAD) if "You may decide it now" in m.text],
            timeout=30,
            what="LEAD told",
        )
        assert heard
        await scene.standin.click(LEAD, scene.fresh(card), "approve:0")

        assert "Email to finance@acme.com sent" in await scene.answer(thread_id)
        assert [e["outcome"] for e in await audit(scene)] == ["escalated", "decided"]


# --- a purge cut off half-way; a policy of 3,000 rules ------------------------------------------


async def test_a_purge_cut_off_half_way_is_finished_by_the_next_sweep(redis_url):
    async with start_scene(redis_url, "memory") as scene:
        thread_id = await scene.ask("remember this", graph="memory")
        await scene.answer(thread_id)
        checkpoints = f"checkpoints:{{{thread_id}}}:"  # (the saver's keys of the thread)
        assert [k async for k in scene.store.redis.scan_iter(f"{checkpoints}*")]

        async with AsyncRedisCheckpointer.from_url(redis_url) as saver:

            class KilledMidPurge:
                async def adelete_thread(self, thread_id: str) -> None:
                    raise asyncio.CancelledError  # the runner killed while the purge runs

            killed = Janitor(scene.store, KilledMidPurge(), 60, 3600, clock=lambda: time.time() + 120)
            with pytest.raises(asyncio.CancelledError):
                await killed.sweep()
            assert await scene.store.runs.get(thread_id) is None  # claimed: the run record went first
            assert [k async for k in scene.store.redis.scan_iter(f"{checkpoints}*")]

            later = Janitor(scene.store, saver, 60, 3600, clock=lambda: time.time() + 120)
            assert (await later.sweep()).threads == 1

            assert [k async for k in scene.store.redis.scan_iter(f"{checkpoints}*")] == []
            assert not await scene.store.redis.exists(scene.store.keys.of(thread_id).purging)


async def test_a_click_matches_no_rule_whatever_the_size_of_the_policy(redis_url, tmp_path, monkeypatch):
    rules = "".join(f'[[rules]]\ntools = ["tool_{n}"]\napprovers = ["U0X{n}"]\n' for n in range(2_999))
    rules += '[[rules]]\ntools = ["send_*"]\napprovers = ["U0ALICE"]\n'  # the last rule: the worst case
    env = {"SIGNOFF_POLICY": write_policy(tmp_path, '[defaults]\napprovers = ["U0BOB"]\n' + rules)}
    async with start_scene(redis_url, "demo", env=env) as scene:
        card = await scene.card(thread_id := await scene.ask(ASK_EMAIL, requester=RILEY))
        looked = {"rules": 0}

        def counted(original):
            def look(*args, **kwargs):
                looked["rules"] += 1
                return original(*args, **kwargs)

            return look

        monkeypatch.setattr(policy_file.Rule, "matches", counted(policy_file.Rule.matches))
        monkeypatch.setattr(policy_file.PolicyFile, "route_of", counted(policy_file.PolicyFile.route_of))
        monkeypatch.setattr(policy_file.PolicyFile, "rule_for", counted(policy_file.PolicyFile.rule_for))

        for n in range(20):  # twenty people (their gates built once each), refused
            await scene.standin.click(f"U0P{n:02d}", card, "approve:0")
        await eventually(lambda: len(scene.standin.ephemerals) >= 20, what="twenty refusals")
        await scene.standin.click(ALICE, card, "approve:0")

        assert "Email to finance@acme.com sent" in await scene.answer(thread_id)
        assert looked["rules"] == 0  # no click walked the 3,000 rules


async def test_a_dead_loop_fails_liveness_so_the_process_is_restarted(redis_url, monkeypatch):
    from bot.app import run_bot
    from bot.refresher import Refresher

    async def dies(self, stop) -> None:
        raise RuntimeError("a bug no round catches")

    monkeypatch.setattr(Refresher, "serve", dies)
    async with Harness(redis_url) as scene:
        scene.tasks.append(asyncio.create_task(run_bot(scene.settings(), scene.stop)))

        assert await eventually(lambda: _status_is(scene.port, "healthz", 503), what="healthz 503")
        assert await probe(scene.port, "readyz") == 503


async def _status_is(port: int, path: str, status: int) -> bool:
    return await probe(port, path) == status


def test_a_connection_torn_inside_redis_py_mid_failover_is_an_outage_and_ours_is_not():
    from core.outages import is_outage

    def inside_redis_py() -> None:
        exec(
            compile("None.writelines([])", "redis/asyncio/connection.py", "exec"),
            {"__name__": "redis.asyncio.connection"},
        )

    try:
        inside_redis_py()
    except AttributeError as torn:
        assert is_outage(torn)
    try:
        None.writelines([])  # type: ignore[union-attr]  # (our own bug: not an outage)
    except AttributeError as ours:
        assert not is_outage(ours)
    from redis.exceptions import RedisClusterException

    assert is_outage(RedisClusterException("Redis Cluster cannot be connected."))
    assert not is_outage(RedisClusterException("All keys must map to the same key slot"))  # a bug
