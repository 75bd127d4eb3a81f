"""Resume a paused deepagents thread in a fresh process, as after a restart.

    python -m tests.support.resume_helper SAVER MODE REDIS_URL THREAD_ID

Prints one JSON line: the message types and file paths after the resume.
"""

from __future__ import annotations

import asyncio
import json
import sys

from tests.support.savers import APPROVE, SAVERS, summary, write_agent


async def main(saver_name: str, mode: str, url: str, thread_id: str) -> dict:
    cls = SAVERS[(saver_name, mode)]
    cfg = {"configurable": {"thread_id": thread_id}}
    if mode == "sync":
        with cls.from_conn_string(url) as saver:
            saver.setup()
            return summary(write_agent(saver).invoke(APPROVE, cfg))
    async with cls.from_conn_string(url) as saver:
        await saver.asetup()
        return summary(await write_agent(saver).ainvoke(APPROVE, cfg))


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:5]))))
