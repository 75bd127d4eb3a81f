"""`signoff trust list|revoke ID`: the live trust grants (`core.grants`), and revoking one for
the next call on (audited as revoked by `operator`, or `--by`)."""

from __future__ import annotations

from typing import TextIO

from core.store import Store
from signoff.commands.printing import iso, table


async def trust_list(store: Store, out: TextIO) -> int:
    grants = await store.grants.live()
    if not grants:
        out.write("No trust grants are live.\n")
        return 0
    rows = [
        {
            "id": g.id,
            "tool": g.tool,
            "requester": g.requester,
            "graph": g.graph,
            "granted_by": g.granted_by,
            "until": iso(g.until),
            "used": g.used,
            "uses_left": "" if g.uses_left is None else g.uses_left,
            "same": g.compared,
        }
        for g in grants
    ]
    table(rows, out)
    return 0


async def trust_revoke(store: Store, grant_id: str, by: str, out: TextIO) -> int:
    if not await store.grants.revoke(grant_id, by):
        out.write(f"No live grant {grant_id} (expired, used up or revoked already); nothing changed.\n")
        return 1
    out.write(f"Revoked {grant_id}: the next call like it asks again.\n")
    return 0
