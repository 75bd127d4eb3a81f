"""Chat-ops: start, continue and follow agent runs from Slack.

* A mention starts a run of the default graph with the message (mention
  removed); the LangGraph thread is bound to the Slack thread, so a further
  mention or any message in that thread continues it. Direct messages work
  the same way. While an approval is pending the bot points at its card
  instead of starting a second turn.
* `/signoff <task>`, `/signoff use <graph> <task>`, `/signoff pending`, `/signoff trust`,
  `/signoff passkey`.
* Retry on a failed run continues it from its last checkpoint.
* The Home tab lists what waits for the person looking, and what they decided.

Slack retries a slow delivery with the same `event_id`: each event is handled
once (deduped in Redis). Messages from bots, Signoff included, never start runs.
"""

from __future__ import annotations

from typing import Any

from slack_sdk.models.blocks import (
    Block,
)
from slack_sdk.models.views import View

from bot.agent_threads import prompted
from bot.permissions import Permissions
from bot.routing import summary_line
from bot.service import DecisionService
from bot.trust import grant_blocks
from bot.views.card_words import title
from bot.views.home import decision_line, home_item, home_view, listed_line, pending_text
from bot.views.text import escape
from core.logs import get_logger
from core.producer import new_thread_id, start_run
from core.records import Approval, RunState
from core.store import Store

log = get_logger("chatops")

SHOWN_PENDING = 20  # `/signoff pending` lists the newest; the count and `signoff pending` give the rest
ROUTED_LOOKED_AT = 200  # the newest pending everywhere, among which cards routed to a channel are found

HELP = (
    "*Signoff* runs agents that ask before risky actions.\n"
    "• Mention me with a task, or DM me: I answer in the thread; reply there to continue.\n"
    "• `/signoff <task>` runs the default graph, `/signoff use <graph> <task>` another one.\n"
    "• `/signoff pending` lists what waits for a decision here: the cards in this channel, and "
    "those of runs started in it.\n"
    "• `/signoff trust` lists the live trust grants, with Revoke on those you may revoke.\n"
    "• `/signoff passkey` sends you a private link to add a passkey, for rules that ask for one."
)


class ChatOps:
    def __init__(
        self,
        service: DecisionService,
        graphs: list[str],
        default: str | None,
        starters: dict[str, tuple[str, ...]] | None = None,
        channel_graphs: dict[str, tuple[str, ...]] | None = None,
    ):
        self.service = service
        self.store: Store = service.store
        self.graphs = graphs
        self.local = list(graphs)  # the project's own: they win over an assistant of the same name
        self.default = default
        self.starters = starters or {}
        self.channel_graphs = channel_graphs or {}

    async def first_delivery(self, key: str) -> bool:
        """Slack delivers again (same event_id) when slow, and a captured request can be
        replayed while its signature is fresh: act on the first only."""
        return await self.service.slack.state.once(key)

    async def publish_home(self, user: str) -> None:
        await self.service.slack.client.views_publish(user_id=user, view=await self.home(user))

    def remote_graphs(self, names: list[str]) -> None:
        """The Agent Server's assistants, as graphs (the poll calls it at every sweep)."""
        self.graphs[:] = self.local + [name for name in names if name not in self.local]
        if self.default is None:
            self.default = next(iter(self.graphs), None)

    @property
    def permissions(self) -> Permissions:
        return self.service.permissions

    # who may start what --------------------------------------------------------

    def graphs_for(self, channel: str) -> list[str]:
        allowed = self.channel_graphs.get(channel, self.channel_graphs.get("*"))
        return [g for g in self.graphs if allowed is None or g in allowed]

    def graph_here(self, channel: str) -> str | None:
        """The graph a run started in `channel` uses when none is named."""
        here = self.graphs_for(channel)
        return self.default if self.default in here else next(iter(here), self.default)

    async def start_refusal(self, user: str, channel: str, graph: str | None) -> str | None:
        if graph is None:
            return (
                "No agents are set up here yet: whoever runs Signoff sets SIGNOFF_GRAPH or a langgraph.json."
            )
        ids = self.starters.get(channel, self.starters.get("*"))
        if ids is not None:
            member = self.permissions.member(user, ids)
            if member is None:
                log.warning("starter_groups_unavailable")
                return "Signoff could not check who may start runs just now; try again in a moment."
            if not member:
                return "You are not on the list of people who may start runs here."
        if graph not in self.graphs:
            return f"There is no graph called `{escape(graph)}`. Graphs: {', '.join(self.graphs)}."
        if graph not in self.graphs_for(channel):
            here = ", ".join(self.graphs_for(channel)) or "none"
            return f"`{escape(graph)}` is not enabled in this channel. Here: {here}."
        return None

    # conversations -------------------------------------------------------------

    async def converse(self, user: str, channel: str, root: str, text: str) -> None:
        """A message for the agent in the Slack thread `root`: start or continue its run."""
        slack_state = self.service.slack.state
        thread_id = await slack_state.thread_for(channel, root)
        run = await self.store.runs.get(thread_id) if thread_id else None
        if thread_id and run is None:  # its run was purged (the retention): this starts a new one
            thread_id = None
        if run is None and channel.startswith("D") and await prompted(self, user, channel, root, text):
            return  # a suggested prompt of the Messages tab (`bot.agent_threads`): Signoff answers
        chosen = None
        if run is None:  # the thread's "Use <graph>", else the DM's for its next run (taken either way)
            pending = await slack_state.take_next_graph(channel) if channel.startswith("D") else None
            chosen = await slack_state.chosen_graph(channel, root) or pending
        graph = run.graph if run else (chosen or self.graph_here(channel))
        refusal = await self.start_refusal(user, channel, graph)
        if refusal:
            await self.service.slack.ephemeral(channel, user, refusal, root)
            return
        assert graph is not None  # start_refusal refuses when there is no graph
        if not text.strip():
            await self.service.slack.posts.post(
                channel, "Tell me what to do, e.g. _refund order 1235 for 5000_.", root
            )
            return
        if thread_id:
            state = await self.store.runs.state(thread_id)
            if state is RunState.WAITING:
                await self.service.slack.posts.post(channel, await self.waiting_note(thread_id), root)
                return
            if state is RunState.RUNNING:
                await self.service.slack.posts.post(
                    channel, "Still working on the last message; I'll answer here first.", root
                )
                return
        else:
            thread_id = new_thread_id()
            await self.service.slack.state.bind_thread(channel, root, thread_id)
        await start_run(self.store, text, channel, graph, thread_id, thread_ts=root, requester=user)
        log.info("run_requested", thread_id=thread_id, graph=graph, slack_user=user, channel=channel)

    async def waiting_note(self, thread_id: str) -> str:
        pending = [a for a in await self.store.approvals.pending_in() if a.thread_id == thread_id]
        links = [await self.link(a) for a in pending]
        where = ", ".join(
            f"<{link}|{escape(self.what(a))}>" for a, link in zip(pending, links, strict=True) if link
        )
        return f"⏸ Waiting on the approval above{': ' + where if where else ''}. Decide it first, then write again."

    async def link(self, approval: Approval) -> str | None:
        return await self.service.slack.card_link(approval)

    async def listed_line(self, approval: Approval) -> str:
        """One approval in a list (`bot.views.home.listed_line`)."""
        return listed_line(approval, self.what(approval), await self.link(approval))

    async def pending_list(self, user: str, channel: str) -> None:
        """The newest approvals waiting in `channel`: the runs started here, and the cards the
        policy routed here from runs elsewhere (#finance holds refund cards of runs started in
        other channels); how many wait in all and, when that is more than the list shows, where
        to see every one. Routed cards are found among the newest pending everywhere (the index
        is the run's channel's)."""
        started = await self.store.approvals.pending_in(channel, limit=SHOWN_PENDING)
        routed = [
            a
            for a in await self.store.approvals.pending_in(limit=ROUTED_LOOKED_AT)
            if a.card_channel == channel and a.channel != channel
        ]
        total = await self.store.approvals.pending_count(channel) + len(routed)
        pending = sorted([*started, *routed], key=lambda a: a.created_at, reverse=True)[:SHOWN_PENDING]
        lines = [await self.listed_line(approval) for approval in pending]
        await self.service.slack.ephemeral(channel, user, pending_text(total if pending else 0, lines))

    async def trust_list(self, user: str, channel: str) -> None:
        """The live trust grants (`bot.trust`), Revoke on those `user` may revoke."""
        head, blocks = grant_blocks(await self.store.grants.live(), user, self.permissions)
        await self.service.slack.ephemeral(channel, user, head, blocks=blocks or None)

    # the Home tab ---------------------------------------------------------------

    async def home(self, user: str) -> View:
        """What waits for this person's decision, what they asked for that waits on others,
        and what they decided lately (`bot.views.home`)."""
        pending = await self.store.approvals.pending_in(limit=200)
        waiting = [a for a in pending if self.named(a) and self.may_decide(a, user, self.permissions)][:15]
        asked = [a for a in pending if a.requester == user and a not in waiting][:15]
        decided = [
            await self.decision_line(entry)
            for entry in once_each(await self.store.audit.decisions_by(user, 40))
        ]
        return home_view(
            [await self.home_item(a) for a in waiting],
            [await self.home_item(a, user) for a in asked],
            decided,
            passkeys=self.permissions.rules.steps_up,
        )

    async def decision_line(self, entry: dict[str, Any]) -> str:
        """One of a person's decisions on Home (`bot.views.home.decision_line`), its call named as
        its card's summary says, linked to its card."""
        approval = await self.store.approvals.get(entry.get("approval_id") or "")
        index = int(entry.get("index") or 0)
        what = str(entry.get("tool") or "a question")
        if approval is not None and 0 <= index < len(approval.request.actions):
            what = summary_line(approval.request.actions[index], self.permissions.routes(approval)[index])
        link = await self.link(approval) if approval is not None else None
        return decision_line(entry, what, link)

    def named(self, approval: Approval) -> bool:
        """Whether the policy names who decides this approval: an approval anyone may decide is
        not listed on everyone's Home tab (it may sit in a channel they cannot see)."""
        return any(route.approvers for route in self.permissions.routes(approval))

    def what(self, approval: Approval) -> str:
        """What an approval asks, in words (plain): "Refund 5,000 on order 1235 (and 1 more)"."""
        actions = approval.request.actions
        if not actions:
            return title(approval)
        first = summary_line(actions[0], self.permissions.routes(approval)[0])
        more = f" (and {len(actions) - 1} more)" if len(actions) > 1 else ""
        return f"{first[:1].upper()}{first[1:]}{more}"

    async def home_item(self, approval: Approval, user: str = "") -> Block:
        """One approval on the Home tab (`bot.views.home.home_item`); for its requester `user`,
        whom it waits on."""
        waiting_on = None
        if approval.requester == user:
            view = await self.service.slack.card_view(approval)
            voted = {v.user for votes in approval.votes.values() for v in votes}
            waiting_on = [
                i for i in (*view.approvers, *view.escalated_to) if i not in voted and i != view.barred
            ]
        return home_item(approval, self.what(approval), await self.link(approval), waiting_on)

    @staticmethod
    def may_decide(approval: Approval, user: str, permissions: Permissions) -> bool:
        """Whether some undecided action waits for `user` (whose approval does not count yet)."""
        undecided = [
            i
            for i in range(max(1, len(approval.request.actions)))
            if i not in approval.decided and user not in {v.user for v in approval.votes.get(i, [])}
        ]
        return any(permissions.may_decide(approval, i, user) for i in undecided)


def once_each(entries: list[dict[str, Any]], most: int = 10) -> list[dict[str, Any]]:
    """A person's audit entries, newest first, one per approval (a batch decided at once, a vote
    then its completion: one line), trust grants and revocations left out."""
    kept: dict[str, dict[str, Any]] = {}
    actions: dict[str, set[Any]] = {}  # the actions each line covers
    for entry in entries:
        if entry.get("outcome") in ("granted", "revoked", "checkpoint"):
            continue
        key = str(entry.get("approval_id") or entry.get("at"))
        kept.setdefault(key, dict(entry))
        actions.setdefault(key, set()).add(entry.get("index"))
    return [{**entry, "more": len(actions[key]) - 1} for key, entry in list(kept.items())[:most]]
