"""`signoff passkeys list USER` and `signoff passkeys remove USER ID`: an admin's view of a
person's passkeys (`core.store.passkeys`), and removing one (a lost phone, someone who left): the
next step-up of theirs needs another. What is listed is what Redis keeps: the credential id, a
label, the sign count, when it was added; never a secret."""

from __future__ import annotations

from typing import TextIO

from core.store import Store
from signoff.commands.printing import iso, table


async def passkeys_list(store: Store, user: str, out: TextIO) -> int:
    passkeys = await store.passkeys.of(user)
    if not passkeys:
        out.write(f"{user} has no passkey.\n")
        return 0
    rows = [
        {"id": p.credential_id, "label": p.label, "sign_count": p.sign_count, "added": iso(p.created_at)}
        for p in passkeys
    ]
    table(rows, out)
    return 0


async def passkeys_remove(store: Store, user: str, credential_id: str, out: TextIO) -> int:
    if not await store.passkeys.remove(user, credential_id):
        out.write(f"{user} has no passkey {credential_id}; nothing changed.\n")
        return 1
    out.write(f"Removed {user}'s passkey {credential_id}: it approves nothing from now on.\n")
    return 0
