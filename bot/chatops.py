"""Chat-ops: start, continue and follow agent runs from Slack.

* A mention starts a run of the default graph with the message (mention
  removed); the LangGraph thread is bound to the Slack thread, so a further
  mention or any message in that thread continues it. Direct messages work
  the same way. While an approval is pending the bot points at its card
  instead of starting a second turn.
* `/signoff <task>`, `/signoff use <graph> <task>`, `/signoff pending`, `/signoff trust`.
* Retry on a failed run continues it from its last checkpoint.
* The Home tab lists what waits for the person looking, and what they decided.

Slack retries a slow delivery with the same `event_id`: each event is handled
once (deduped in Redis). Messages from bots, Signoff included, never start runs.
"""

from __future__ import annotations

import re
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.models.blocks import (
    Block,
    ButtonElement,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    SectionBlock,
)
from slack_sdk.models.views import View

from bot.agent_threads import prompted, register_agent_threads
from bot.card_words import DONE, mention, title, when
from bot.payloads import BlockActions, EventCallback, HomeOpened, MessageEvent, SlashCommand
from bot.permissions import Permissions
from bot.routing import summary_line
from bot.service import DecisionService
from bot.text import cut, escape
from bot.trust import grant_blocks
from core.logs import get_logger
from core.producer import continue_run, new_thread_id, start_run
from core.records import Approval, RunState
from core.store import Store

log = get_logger("chatops")

SHOWN_PENDING = 20  # `/signoff pending` lists the newest; the count and `signoff pending` give the rest

HELP = (
    "*Signoff* runs agents that ask before risky actions.\n"
    "• Mention me with a task, or DM me: I answer in the thread; reply there to continue.\n"
    "• `/signoff <task>` runs the default graph, `/signoff use <graph> <task>` another one.\n"
    "• `/signoff pending` lists the approvals waiting in this channel.\n"
    "• `/signoff trust` lists the live trust grants, with Revoke on those you may revoke."
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
        graph = (
            run.graph if run else (await slack_state.chosen_graph(channel, root) or self.graph_here(channel))
        )
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
        """One approval in a list: what it asks, linked to its card; who asked; when."""
        link = await self.link(approval)
        name = f"<{link}|{escape(self.what(approval))}>" if link else escape(self.what(approval))
        return f"• {name} · {escape(approval.origin)} · {when(approval.created_at)}"

    async def pending_list(self, user: str, channel: str) -> None:
        """The newest approvals waiting in `channel`, how many wait in all, and, when that is more
        than the list shows, where to see every one."""
        total = await self.store.approvals.pending_count(channel)
        pending = await self.store.approvals.pending_in(channel, limit=SHOWN_PENDING) if total else []
        if not pending:
            await self.service.slack.ephemeral(channel, user, "Nothing waits for a decision in this channel.")
            return
        lines = []
        for approval in pending:
            lines.append(await self.listed_line(approval))
        if total > len(pending):
            lines.append(
                f"_Showing the newest {len(pending)} of {total}: `signoff pending`, "
                "run where Signoff runs, lists every one._"
            )
        await self.service.slack.ephemeral(
            channel, user, f"*Waiting for a decision here ({total}):*\n" + "\n".join(lines)
        )

    async def trust_list(self, user: str, channel: str) -> None:
        """The live trust grants (`bot.trust`), Revoke on those `user` may revoke."""
        head, blocks = grant_blocks(await self.store.grants.live(), user, self.permissions)
        await self.service.slack.ephemeral(channel, user, head, blocks=blocks or None)

    # the Home tab ---------------------------------------------------------------

    async def home(self, user: str) -> View:
        """What waits for this person's decision, what they asked for that waits on others,
        and what they decided lately."""
        pending = await self.store.approvals.pending_in(limit=200)
        waiting = [a for a in pending if self.named(a) and self.may_decide(a, user, self.permissions)][:15]
        asked = [a for a in pending if a.requester == user and a not in waiting][:15]
        blocks: list[Block] = [HeaderBlock(text="Waiting for you")]
        blocks += [await self.home_item(a) for a in waiting] or [
            ContextBlock(elements=[MarkdownTextObject(text="Nothing waits for your decision.")])
        ]
        blocks += [DividerBlock(), HeaderBlock(text="You asked, waiting on others")]
        blocks += [await self.home_item(a, user) for a in asked] or [
            ContextBlock(elements=[MarkdownTextObject(text="Nothing you asked for is waiting.")])
        ]
        blocks += [DividerBlock(), HeaderBlock(text="Your recent decisions")]
        lines = [
            await self.decision_line(entry)
            for entry in once_each(await self.store.audit.decisions_by(user, 40))
        ]
        blocks.append(
            SectionBlock(text=MarkdownTextObject(text="\n".join(lines)))
            if lines
            else ContextBlock(elements=[MarkdownTextObject(text="No decisions yet.")])
        )
        return View(type="home", blocks=blocks)

    async def decision_line(self, entry: dict[str, Any]) -> str:
        """One of a person's decisions on Home, in words: what they did (withdrew, rejected with
        the reason…) to which call, when, with a link to its card."""
        decision, outcome = entry["decision"] or {}, entry.get("outcome", "")
        kind = str(decision.get("type", ""))
        if outcome == "withdrawn":
            icon, verb = "↩️", "Withdrew"
        elif outcome == "voted":
            icon, verb = "👥", "Approved (counted towards the approvals needed)"
        elif outcome == "proposed":
            icon, verb = "✏️", "Proposed an edit of"
        else:
            icon, verb = {**DONE, "respond": ("💬", "Answered instead of")}.get(kind, ("💬", "Answered"))
        approval = await self.store.approvals.get(entry.get("approval_id") or "")
        index = int(entry.get("index") or 0)
        what = f"`{escape(entry.get('tool') or 'a question')}`"
        if approval is not None and 0 <= index < len(approval.request.actions):
            what = escape(
                summary_line(approval.request.actions[index], self.permissions.routes(approval)[index])
            )
        link = await self.link(approval) if approval is not None else None
        what = f"<{link}|{what}>" if link else what
        reason = decision.get("message") if kind in ("reject", "respond") and outcome != "withdrawn" else None
        said = f": “{escape(cut(str(reason), 200))}”" if reason else ""
        more = f" (and {entry['more']} more)" if entry.get("more") else ""
        return f"{icon} {verb} {what}{more}{said} · {when(entry['at'])}"

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
        """One approval on the Home tab: what for, who asked, where, when; Open lands on the card."""
        what, more = self.what(approval), ""
        who = f"asked by <@{approval.requester}> · " if approval.requester else ""
        text = f"*{escape(what)}{more}*\n{who}<#{approval.card_where}> · {when(approval.created_at)}"
        if approval.requester == user:  # what she waits for: whom (a view never notifies)
            view = await self.service.slack.card_view(approval)
            voted = {v.user for votes in approval.votes.values() for v in votes}
            on = [i for i in (*view.approvers, *view.escalated_to) if i not in voted and i != view.barred]
            text += "\nWaiting on " + (
                ", ".join(mention(i) for i in on[:8]) if on else "anyone who may approve"
            )
        link = await self.link(approval)
        accessory = (
            ButtonElement(text="Open", url=link, action_id=f"open:{approval.approval_id}") if link else None
        )
        return SectionBlock(text=MarkdownTextObject(text=text), accessory=accessory)

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


def strip_mention(text: str, bot_user_id: str | None) -> str:
    pattern = rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>" if bot_user_id else r"^\s*<@[A-Z0-9]+(\|[^>]*)?>"
    return re.sub(pattern, "", text, count=1).strip()


def register_chatops(app: AsyncApp, chat: ChatOps) -> None:
    """Listeners read their request's typed model (`context["payload"]`, see `bot.payloads`)."""
    _register_conversation(app, chat)
    _register_command(app, chat)
    _register_retry_and_home(app, chat)
    register_agent_threads(app, chat)


async def first_delivery(chat: ChatOps, key: str) -> bool:
    """Slack delivers again (same event_id) when slow, and a captured request can be
    replayed while its signature is fresh: act on the first only."""
    return await chat.service.slack.state.once(key)


def _register_conversation(app: AsyncApp, chat: ChatOps) -> None:
    """A mention, a DM, or a reply in a run's thread: the agent is asked."""
    service = chat.service

    async def on_mention(context) -> None:
        payload: EventCallback = context["payload"]
        event = payload.event
        if not isinstance(event, MessageEvent) or event.bot_id or not event.user:
            return
        if not await first_delivery(chat, f"event:{payload.event_id}"):
            return
        text = strip_mention(event.text, context.get("bot_user_id"))
        root = event.thread_ts or event.ts
        service.later(chat.converse(event.user, event.channel, root, text), "converse")

    async def on_message(context) -> None:
        payload: EventCallback = context["payload"]
        event = payload.event
        bot_user = context.get("bot_user_id")
        if (
            not isinstance(event, MessageEvent)
            or event.subtype
            or event.bot_id
            or not event.user
            or event.user == bot_user
        ):
            return
        if bot_user and f"<@{bot_user}" in event.text:
            return  # the app_mention event carries it
        if event.channel_type == "im":
            root = event.thread_ts or event.ts
        elif event.thread_ts and await service.slack.state.thread_for(event.channel, event.thread_ts):
            root = event.thread_ts
        else:
            return
        if await first_delivery(chat, f"event:{payload.event_id}"):
            service.later(chat.converse(event.user, event.channel, root, event.text), "converse")

    app.event("app_mention")(on_mention)
    app.event("message")(on_message)


def _register_command(app: AsyncApp, chat: ChatOps) -> None:
    """`/signoff`: help, `pending`, or a task for the channel's (or a named) graph."""
    service = chat.service

    async def on_command(ack, context) -> None:
        command: SlashCommand = context["payload"]
        text = command.text.strip()
        user, channel = command.user_id, command.channel_id
        if text in ("", "help"):
            await ack(HELP)
            return
        if not await first_delivery(chat, f"command:{command.trigger_id}"):
            await ack("This command was received already; it was not run again.")
            return
        if text == "pending":
            await ack()
            service.later(chat.pending_list(user, channel), "pending_list")
            return
        if text == "trust":
            await ack()
            service.later(chat.trust_list(user, channel), "trust_list")
            return
        graph, task = chat.default, text
        if text.startswith("use "):
            _, graph, task = (text.split(maxsplit=2) + ["", ""])[:3]
        if not task.strip():
            await ack("What should the agent do? `/signoff use <graph> <task>`")
            return
        refusal = await chat.start_refusal(user, channel, graph)
        if refusal:
            await ack(refusal)
            return
        assert graph is not None  # start_refusal refuses when there is no graph
        thread_id = await start_run(chat.store, task, channel, graph, requester=user)
        await ack(f"Started *{escape(graph)}*: approvals and the answer will be in its thread.")
        log.info("run_requested", thread_id=thread_id, graph=graph, slack_user=user, channel=channel)

    app.command("/signoff")(on_command)


def _register_retry_and_home(app: AsyncApp, chat: ChatOps) -> None:
    """Retry on a failed run, the link buttons, and the Home tab."""
    service = chat.service

    async def on_retry(ack, context) -> None:
        await ack()
        payload: BlockActions = context["payload"]
        user, channel = payload.user.id, payload.channel_id
        thread_id = payload.action.value or ""
        run = await chat.store.runs.get(thread_id) if thread_id else None
        if channel is None:
            return
        refusal = await chat.start_refusal(user, channel, run.graph) if run else "This run no longer exists."
        if refusal is None and not await chat.store.runs.claim_retry(thread_id):
            refusal = "This run is not failed (any more): someone retried it already."
        if refusal:
            service.later(service.slack.ephemeral(channel, user, refusal), "refusal")
            return
        await continue_run(chat.store, thread_id)
        message = payload.container.message_ts
        if message:
            note = f"{payload.message.text if payload.message else ''}\n↻ Retried by <@{user}>"
            service.later(
                service.slack.client.chat_update(channel=channel, ts=message, text=note, blocks=[]),
                "retry_note",
            )

    async def on_home(context) -> None:
        payload: EventCallback = context["payload"]
        event = payload.event
        if isinstance(event, HomeOpened) and event.tab == "home":
            service.later(_publish_home(chat, event.user), "home")

    async def on_open(ack) -> None:
        await ack()  # a link button: Slack opens the URL, the bot only acks

    app.action("retry")(on_retry)
    app.action(re.compile(r"^open:"))(on_open)
    app.event("app_home_opened")(on_home)


async def _publish_home(chat: ChatOps, user: str) -> None:
    await chat.service.slack.client.views_publish(user_id=user, view=await chat.home(user))
