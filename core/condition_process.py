"""Policy conditions evaluated in a process of their own, within a time budget.

cel-python is pure Python: a `when` over a call's arguments takes about 70 µs a value in a
macro, so an agent's arguments can make one evaluation last seconds. Evaluated on the bot's
event loop, that held every click's ack behind it (5.2 s for one call of 8,000 × 8,000 list
items, before `core.conditions` refused such a condition at start). Here the bot hands each
approval's calls, with the conditions to evaluate (`PolicyFile.conditions`), to one child
process and awaits the verdicts without blocking its loop; what takes longer than the budget is
cut off (the child is killed, and started again for the next request) and fails closed: every
condition it was evaluating gives "ran out of its time budget", and `PolicyFile.match` sends
the call to the strictest rule it could have matched. The child's memory is bounded too
(`MEMORY_BYTES`): a condition that builds a huge value (`args.files.map(f, args.dir + f)`, a
list by a long string) makes it fail, as out of budget.

The child is `python -m core.condition_process`, speaking one JSON line per request and per
reply on its standard input and output (not `multiprocessing`, whose `spawn` imports the
parent's main module again). It imports nothing but the conditions. Requests go one at a time:
a card's terms wait for them, never a click.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import resource
import sys
from typing import Any

from core.conditions import Call, Verdict, verdicts
from core.logs import get_logger

log = get_logger("conditions")

BUDGET_S = 2.0  # one approval's conditions, all its calls together
START_S = 30.0  # the child's start (an interpreter and cel-python's imports): not counted in the budget
OUT_OF_BUDGET = "ran out of its time budget"
MEMORY_BYTES = 1 << 30  # the child's address space: past it, its evaluation fails (closed)
LINE_LIMIT = 2**24  # bytes of one reply line (verdicts are short; a request's line may be long)

Request = list[tuple[list[str | None], Call]]  # per call: the conditions to evaluate, and the call


class ConditionProcess:
    """The bot's condition evaluator: one child process, started when first needed."""

    def __init__(self, budget_s: float = BUDGET_S) -> None:
        self.budget_s = budget_s
        self._child: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    async def verdicts(self, request: Request) -> list[list[Verdict]]:
        """Each call's verdicts (`core.conditions.verdicts`); the calls of a request that did not
        finish within the budget get OUT_OF_BUDGET for each of their conditions."""
        if not any(conditions for conditions, _ in request):
            return [[] for _ in request]
        line = json.dumps(
            [[conditions, dataclasses.asdict(call)] for conditions, call in request], default=str
        ).encode()
        async with self._lock:
            try:
                child = await self._started()  # (its start is not the conditions' time)
                return await asyncio.wait_for(self._asked(child, line + b"\n"), self.budget_s)
            except (TimeoutError, OSError, EOFError, ValueError) as exc:  # (a start that failed too)
                log.error(
                    "conditions_cut_off",
                    budget_s=self.budget_s,
                    calls=len(request),
                    tools=sorted({call.tool for _, call in request}),
                    why=type(exc).__name__,
                )
                await self.close()
                return [[OUT_OF_BUDGET] * len(conditions) for conditions, _ in request]

    async def _asked(self, child: asyncio.subprocess.Process, line: bytes) -> list[list[Verdict]]:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(line)
        await child.stdin.drain()
        reply = await child.stdout.readline()
        if not reply:
            raise EOFError("the condition process exited")
        found: list[list[Verdict]] = json.loads(reply)
        return found

    async def _started(self) -> asyncio.subprocess.Process:
        """The child, started (and its imports done: it says "ready") if it was not running."""
        if self._child is None or self._child.returncode is not None:
            self._child = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "core.condition_process",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                limit=LINE_LIMIT,
            )
            assert self._child.stdout is not None
            ready = await asyncio.wait_for(self._child.stdout.readline(), START_S)
            if ready != b"ready\n":
                raise EOFError("the condition process did not start")
        return self._child

    async def close(self) -> None:
        child, self._child = self._child, None
        if child is not None and child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            await child.wait()


def _serve() -> None:
    """The child: one JSON line in (per call: conditions and the call), one line out (verdicts).
    It yields the CPU to the bot (a lower priority): a card's terms may wait, a click's ack not."""
    with contextlib.suppress(OSError):
        os.nice(10)
    with contextlib.suppress(OSError, ValueError):  # (a condition that builds a huge string fails closed)
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    # cel-python builds its parser on the first condition (~85 ms, seconds on a busy host): that is
    # the start's, not a call's, so a condition after a restart is not cut off for it
    verdicts(["args.warm > 0"], Call("warm-up", {"warm": 1}))
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for line in sys.stdin:
        request: list[Any] = json.loads(line)
        reply = [verdicts(conditions, Call(**call)) for conditions, call in request]
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve()
