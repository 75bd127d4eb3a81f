"""langgraph-checkpoint-conformance against the project's saver, and the stock one.

Every capability the suite detects must pass for ours. The stock numbers are
printed next to them (run with -s), for the record: they are what the patch
in `agent_runner/checkpointer.py` is measured against.
"""

from __future__ import annotations

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks
from langgraph.checkpoint.redis import AsyncRedisSaver

from agent_runner.checkpointer import AsyncRedisCheckpointer


def registered(cls, url: str):
    @checkpointer_test(name=cls.__name__)
    async def saver():
        async with cls.from_conn_string(url) as instance:
            await instance.asetup()
            yield instance

    return saver


class Tally:
    def __init__(self):
        self.passed: list[str] = []
        self.failed: list[str] = []

    def callbacks(self) -> ProgressCallbacks:
        def record(capability: str, test: str, passed: bool, error: str | None) -> None:
            (self.passed if passed else self.failed).append(f"{capability}/{test}")

        return ProgressCallbacks(on_test_result=record)


async def run_suite(cls, url: str) -> tuple[object, Tally]:
    tally = Tally()
    report = await validate(registered(cls, url), progress=tally.callbacks())
    return report, tally


async def test_project_saver_passes_every_detected_capability(redis_url):
    report, tally = await run_suite(AsyncRedisCheckpointer, redis_url)
    report.print_report()
    print(f"AsyncRedisCheckpointer: {len(tally.passed)} passed, {len(tally.failed)} failed")

    assert tally.failed == []
    assert report.passed_all_base()
    assert len(tally.passed) >= 60


@pytest.mark.xfail(strict=True, reason="stock saver: list by namespace / before / custom keys, prune")
async def test_stock_saver_for_comparison(redis_url):
    report, tally = await run_suite(AsyncRedisSaver, redis_url)
    print(f"AsyncRedisSaver: {len(tally.passed)} passed, {len(tally.failed)} failed: {tally.failed}")
    assert tally.failed == []
