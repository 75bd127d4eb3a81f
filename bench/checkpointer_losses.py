"""How often approvals are lost, stock savers vs the project's, end to end.

    .venv/bin/python bench/checkpointer_losses.py [--trials N] [REDIS_URL]

For each saver: a deepagents agent pauses on write_file, a fresh saver (as
after a restart) resumes it with approve. Counted per trial: was the pause
visible in get_state right after it, did the tool run (file written, messages
Human, AI, Tool, AI), and, for six parallel calls with two gated, did the
stored ToolMessage order match InMemorySaver's. The stock failures are races,
so they are rates, not tests. Starts its own Redis unless a URL is given.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.types import Command  # noqa: E402

from signoff_demo import redis_server  # noqa: E402
from tests.support.savers import SAVERS, USER, six_call_agent, tool_order, write_agent  # noqa: E402

APPROVE = Command(resume={"decisions": [{"type": "approve"}]})
APPROVE_TWO = Command(resume={"decisions": [{"type": "approve"}, {"type": "approve"}]})


async def trial(cls, mode: str, url: str, build, resume, inspect):
    config = {"configurable": {"thread_id": uuid.uuid4().hex}}

    async def session(step):
        if mode == "sync":
            with cls.from_conn_string(url) as saver:
                saver.setup()
                return step(build(saver), sync=True)
        async with cls.from_conn_string(url) as saver:
            await saver.asetup()
            return await step(build(saver), sync=False)

    def first(agent, sync):
        if sync:
            agent.invoke(USER, config)
            return bool(agent.get_state(config).interrupts)

        async def run():
            await agent.ainvoke(USER, config)
            return bool((await agent.aget_state(config)).interrupts)

        return run()

    def second(agent, sync):
        if sync:
            return inspect(agent.invoke(resume, config), agent.get_state(config).values)

        async def run():
            out = await agent.ainvoke(resume, config)
            return inspect(out, (await agent.aget_state(config)).values)

        return run()

    visible = await session(first)
    return visible, await session(second)


def approved(out, stored) -> bool:
    return "/notes/a.md" in out.get("files", {}) and len(out["messages"]) == 4


async def main(url: str, trials: int) -> None:
    memory = six_call_agent(InMemorySaver())
    config = {"configurable": {"thread_id": "baseline"}}
    memory.invoke(USER, config)
    memory.invoke(APPROVE_TWO, config)
    expected = tool_order(memory.get_state(config).values["messages"])

    print(
        f"{'saver':38} {'pause visible':>14} {'approval ran':>13} {'parallel order ok':>18}   ({trials} trials)"
    )
    for (name, mode), cls in SAVERS.items():
        visible = ran = ordered = 0
        for _ in range(trials):
            seen, ok = await trial(cls, mode, url, write_agent, APPROVE, approved)
            visible += seen
            ran += ok
            _, same = await trial(
                cls,
                mode,
                url,
                six_call_agent,
                APPROVE_TWO,
                lambda out, stored: tool_order(stored.get("messages", [])) == expected,
            )
            ordered += same
        label = f"{cls.__name__} ({name}, {mode})"
        print(f"{label:38} {visible:>11}/{trials} {ran:>10}/{trials} {ordered:>15}/{trials}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("redis_url", nargs="?")
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()
    with redis_server.running(args.redis_url) as redis_url:
        asyncio.run(main(redis_url, args.trials))
