"""Every Redis key Signoff uses, in one place (as arq keeps its key prefixes).

Both sides share these names: the runner writes runs, approvals, commands it
consumes and events it sends; the bot writes decisions and its Slack state.
"""

from __future__ import annotations

RUNNERS_GROUP = "runners"  # consumer group of the commands stream
BOTS_GROUP = "bots"  # consumer group of the events stream


class Keys:
    """Every Redis key Signoff uses, in one place."""

    def __init__(self, prefix: str = "signoff"):
        self.prefix = prefix
        self.commands = f"{prefix}:commands"
        self.events = f"{prefix}:events"
        self.audit = f"{prefix}:audit"
        self.dead_letters = f"{prefix}:deadletters"  # entries no consumer could handle

    def approval(self, approval_id: str) -> str:
        return f"{self.prefix}:approval:{approval_id}"

    def decided(self, approval_id: str) -> str:
        """Who decided each action, when, and how (`Decided` records)."""
        return f"{self.prefix}:approval:{approval_id}:decided"

    def decisions(self, approval_id: str) -> str:
        """Each action's decision exactly as sent: what the resume command carries."""
        return f"{self.prefix}:approval:{approval_id}:decisions"

    def votes(self, approval_id: str) -> str:
        """Approvals counted towards a quorum: `<index>:<user>` -> their `Decided` record."""
        return f"{self.prefix}:approval:{approval_id}:votes"

    @property
    def idle(self) -> str:
        """Finished (or failed) threads by when: purged after the retention (`retention`)."""
        return f"{self.prefix}:idle"

    @property
    def deadlines(self) -> str:
        """Time limits, reminders and escalations by due time (ms): `expire:<approval id>:<index>`,
        `remind:<approval id>`, `escalate:<approval id>:<after, s>`."""
        return f"{self.prefix}:deadlines"

    @property
    def deadline_claims(self) -> str:
        return f"{self.prefix}:deadlines:claims"

    @property
    def remote_active(self) -> str:
        """Threads on an Agent Server with a run Signoff sent and has not seen end, by when sent:
        the bot's poll looks at them when no webhook said how they ended (`remote`)."""
        return f"{self.prefix}:remote:active"

    def remote_told(self, run_id: str) -> str:
        """Set once the end of an Agent Server run (finished, failed) was told to Slack."""
        return f"{self.prefix}:remote:told:{run_id}"

    def by_interrupt(self, interrupt_id: str) -> str:
        return f"{self.prefix}:interrupt:{interrupt_id}"

    def run(self, thread_id: str) -> str:
        return f"{self.prefix}:run:{thread_id}"

    def pending(self, channel: str) -> str:
        return f"{self.prefix}:pending:{channel}"

    @property
    def pending_all(self) -> str:
        return f"{self.prefix}:pending"

    def run_state(self, thread_id: str) -> str:
        """The run's state (running / waiting / finished / failed), its detail and its Slack status line."""
        return f"{self.prefix}:runstate:{thread_id}"

    def slack_thread(self, channel: str, root_ts: str) -> str:
        """A Slack thread -> the LangGraph thread it is bound to."""
        return f"{self.prefix}:slackthread:{channel}:{root_ts}"

    def thread_lock(self, thread_id: str) -> str:
        return f"{self.prefix}:lock:thread:{thread_id}"

    def dedupe(self, name: str) -> str:
        return f"{self.prefix}:dedupe:{name}"

    def thread_approvals(self, thread_id: str) -> str:
        """The thread's approvals by creation time (for tool idempotency keys)."""
        return f"{self.prefix}:thread:{thread_id}:approvals"

    def posts(self, thread_id: str) -> str:
        """Slack messages of one run: post id -> ts once posted, or the poster's claim while posting."""
        return f"{self.prefix}:posts:{thread_id}"

    def command_done(self, command_id: str) -> str:
        return f"{self.prefix}:done:{command_id}"

    def refresh_due(self, lane: str) -> str:
        """Cosmetic Slack updates waiting, by due time: lane `card` (card:<approval id>) goes
        before lane `status` (status:<thread id>)."""
        return f"{self.prefix}:refresh:{lane}"

    @property
    def refresh_claims(self) -> str:
        return f"{self.prefix}:refresh:claims"

    def rate(self, name: str) -> str:
        """A rate limiter shared by every bot replica (one Slack workspace)."""
        return f"{self.prefix}:rate:{name}"

    @property
    def groups(self) -> str:
        """User group id -> its members (JSON), refreshed from Slack in the background."""
        return f"{self.prefix}:groups"

    @property
    def groups_refresh(self) -> str:
        return f"{self.prefix}:groups:refreshing"
