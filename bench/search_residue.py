"""What Redis does not give back after the retention, reproduced without Signoff.

    .venv/bin/python bench/search_residue.py [--docs 2000]

RediSearch keeps memory for every distinct TAG value it indexed, after the
documents are deleted and its garbage collector ran. The stock checkpointer
indexes thread and checkpoint ids as TAGs, so each purged run leaves some.
This indexes `--docs` JSON documents with a unique TAG value each, deletes
them, runs the GC, and prints `used_memory` against the baseline; then the
same after dropping the index, and with a TAG value shared by all documents.

Not a test: it prints figures; bench/README.md quotes a run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from signoff_demo import redis_server  # noqa: E402


async def used(client: Any) -> int:
    for index in await client.execute_command("FT._LIST"):
        for _ in range(3):
            await client.execute_command("FT.DEBUG", "GC_FORCEINVOKE", index)
    await client.execute_command("MEMORY", "PURGE")
    await asyncio.sleep(0.3)
    return int((await client.info("memory"))["used_memory"])


async def round_of(client: Any, prefix: str, docs: int, unique: bool) -> int:
    base = await used(client)
    for n in range(docs):
        tag = uuid.uuid4().hex if unique else "shared"
        await client.execute_command("JSON.SET", f"{prefix}:{n}", "$", json.dumps({"t": tag, "n": n}))
    await client.delete(*(f"{prefix}:{n}" for n in range(docs)))
    return await used(client) - base


async def main(url: str, docs: int) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url, decode_responses=True)
    schema = ["SCHEMA", "$.t", "AS", "t", "TAG", "$.n", "AS", "n", "NUMERIC"]
    for name in ("unique", "shared"):
        await client.execute_command("FT.CREATE", name, "ON", "JSON", "PREFIX", "1", f"{name}:", *schema)
    unique = await round_of(client, "unique", docs, True)
    shared = await round_of(client, "shared", docs, False)
    before = await used(client)
    await client.execute_command("FT.DROPINDEX", "unique")
    dropped = await used(client) - before
    print(f"{docs} JSON documents indexed, deleted, garbage collected:")
    print(f"  a unique TAG value each:   {unique:+,} bytes ({unique / docs:.0f} per document)")
    print(f"  one TAG value for all:     {shared:+,} bytes")
    print(f"  then FT.DROPINDEX unique:  {dropped:+,} bytes")
    await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2000)
    with redis_server.running(None, appendonly=False) as redis_url:
        asyncio.run(main(redis_url, parser.parse_args().docs))
