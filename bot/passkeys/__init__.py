"""Step-up approval with a passkey (WebAuthn), on pages the bot serves on its own HTTP port.

A rule with `step_up = "passkey"` is not approved by a click: the decide script refuses an
approval of such an action without a passkey's proof (`step_up`), whatever sent it (a button,
Approve all, an overflow menu, a forged request). The clicker, once the script says they may
approve, gets a private one-time link (`links`) to `/step-up/<token>` (`pages`), which shows the
call as the card did and asks the browser for an assertion whose challenge is derived from the
approval, the actions, their revisions, the hash of their arguments and the link's nonce
(`relying_party`). Only a verified assertion, by one of that person's passkeys, with its sign
count moving up, records the approval, through the same decide script (deadlines, quorum,
revisions, exactly once), with the proof in the audit entry's hash chain.

`/signoff passkey` sends a one-time link to `/passkeys/<token>`, where a person registers
passkeys for their Slack user id, and lists and removes them.
"""
