"""Where an approval's card goes, and how its approvers hear of it (the policy's routes).

Slack folds thread replies under "N replies": a card left in the requester's
thread is seen by nobody else. Per the policy (`core.policy_file`):

* a rule with a `channel` posts the card there, as a message of its own, and
  the run's thread gets one line linking to it; otherwise the card is a reply
  in the run's thread;
* `notify = "mention"`: the card mentions its approvers (its top-level text too
  when it is a message of its own); in a thread, the card is also sent to the
  channel (`reply_broadcast`), so the notification lands on the card itself.
  `"dm"`: each approver (the members of a group, as far as the directory knows
  them) gets a direct message linking to the card. `"none"`: nobody is pinged;
* what a phone shows is a sentence: "Riley's agent wants to refund 5,000 on
  order 1235", from the rule's `summary`, else the tool's description, else its
  name in words and its first arguments;
* once decided, the card's text says the outcome, the requester is told it
  once (mentioned, with the reasons), and every notice that asked someone to
  act says the outcome instead (`Router.settled`).

Decisions, reject reasons and the answer stay in the run's thread.
"""

from __future__ import annotations

import dataclasses
import json
import string
import time
from typing import Any

from bot.permissions import Permissions
from bot.slack.io import SlackIO
from bot.slack.posts import notices_in, posted_in
from bot.trust import offers
from bot.views.card_words import card_text, closed_line, mention, outcome_line, outcome_told
from bot.views.cards import CardView
from bot.views.text import cut, escape, visible
from core.logs import get_logger
from core.protocol import ActionReview, RequestKind
from core.records import Approval
from core.routes import Route
from core.store import SIGNOFF

log = get_logger("routing")


def shown_value(value: Any) -> str:
    """An argument's value in a sentence: numbers grouped (5,000), text cut short, nothing hidden."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,}"  # exact: a phone must not say 5,000 when 4,999.999 runs
    return cut(visible(str(value)).replace("\n", " "), 80)


def summary_line(action: ActionReview, route: Route) -> str:
    """A line for people, plain text: the rule's summary with the call's arguments, else the
    first line of the action's description, else `run <tool>: <its first argument>`."""
    if route.summary:
        names = {name for _, name, _, _ in string.Formatter().parse(route.summary) if name}
        if names <= set(action.args):
            return route.summary.format(**{n: shown_value(action.args[n]) for n in names})
    # its first line, without the colon that introduced what followed it ("…to /plans/x.md:")
    description = action.description.strip().split("\n", 1)[0].strip().rstrip(":").rstrip()
    if description and not description.startswith("Tool execution requires approval"):
        return cut(visible(description), 150)
    # the tool's name in words, and its first plain arguments: "issue refund: order_id 77, amount 2,500"
    plain = [(k, v) for k, v in action.args.items() if isinstance(v, str | int | float)][:2]
    said = ", ".join(f"{visible(k)} {shown_value(v)}" for k, v in plain)
    return visible(action.name).replace("_", " ") + (f": {said}" if said else "")


VIEW_REUSED_S = 1.0  # (a policy reloaded, a group changed: seen by the next view after it)
VIEWS_KEPT = 1024


class Router:
    def __init__(self, slack: SlackIO, permissions: Permissions):
        self.slack = slack
        self.permissions = permissions
        self._names: dict[str, str] = {}
        # The view last drawn of each approval, for a moment: a click's card and its outcome
        # line are drawn from the same record a few ms apart (the same view, drawn once).
        self._drawn: dict[str, tuple[float, Approval, int, CardView]] = {}
        slack.card_view = self.view  # card refreshes show the same approvers and summaries
        slack.on_settled = self.settled  # a decided card's outcome told once, its notices changed
        slack.name_of = self.name
        slack.deciders = self.deciders  # who may decide each action (a run's plan says so)

    def route(self, approval: Approval) -> Route:
        """The route of the approval's first action with a channel, else of its first action;
        a batch whose actions name different channels stays in the run's thread."""
        routes = self.routes(approval)
        channels = {r.channel for r in routes if r.channel}
        if len(channels) > 1:  # one card cannot be in two channels: it stays in the run's thread
            return dataclasses.replace(routes[0], channel=None)
        return next((r for r in routes if r.channel), routes[0])

    async def view(self, approval: Approval) -> CardView:
        """What the card shows from the policy: approvers, summaries, and deciders' names (the
        view drawn of the same record under a second ago, if any)."""
        now = time.monotonic()
        directory = self.permissions.directory
        groups = directory.version if directory is not None else 0  # (a group gone: drawn anew)
        drawn = self._drawn.get(approval.approval_id)
        if drawn is not None and now - drawn[0] < VIEW_REUSED_S and drawn[1:3] == (approval, groups):
            return drawn[3]
        view = await self._view(approval)
        if len(self._drawn) >= VIEWS_KEPT:
            self._drawn = {k: v for k, v in self._drawn.items() if now - v[0] < VIEW_REUSED_S}
        self._drawn[approval.approval_id] = (now, approval, groups, view)
        return view

    async def _view(self, approval: Approval) -> CardView:
        names = {d.user: await self.name(d.user) for d in approval.decided.values()}
        if approval.requester:  # shown by name on the card, never mentioned there
            names[approval.requester] = await self.name(approval.requester)
        routes = self.routes(approval)
        by_policy = approval.by_policy()  # (no one is asked those)
        barred = self.barred(approval, routes)
        named = dict.fromkeys(i for n, r in enumerate(routes) if n not in by_policy for i in r.approvers)
        # a requester who may not decide is not listed as an approver (unless no one else is named)
        approvers = {i: None for i in named if i != barred} or named
        summaries = {
            index: escape(summary_line(action, route))
            for index, (action, route) in enumerate(zip(approval.request.actions, routes, strict=False))
            if route.summary
        }
        for votes in approval.votes.values():
            names.update({v.user: await self.name(v.user) for v in votes})
        escalated = approval.escalated_to()
        directory = self.permissions.directory
        grant_nobody = {
            group: problem
            for group in (*approvers, *escalated)
            if group.startswith("S") and directory and (problem := directory.problem(group))
        }
        rules = tuple(dict.fromkeys(escape(r.name) for r in routes if r.name))
        unread = approval.terms.unread if approval.terms else {}
        asked = [i for i in range(len(approval.request.actions)) if i not in by_policy] or [0]
        headline = ""
        if approval.request.actions:
            first = summary_line(approval.request.actions[asked[0]], routes[asked[0]])
            headline = first[:1].upper() + first[1:]
        ping = self.route(approval).notify == "mention"
        if not ping:  # named on the card, not mentioned: the policy pings them otherwise, or not at all
            names.update({i: await self.name(i) for i in (*approvers, *escalated) if not i.startswith("S")})
        return CardView(
            approvers=tuple(approvers),
            summaries=summaries,
            names=names,
            barred=barred,
            escalated_to=escalated,
            grant_nobody=grant_nobody,
            rules=rules,
            ping=ping,
            trust=offers(self.permissions.rules, approval),
            headline=headline,
            asking=await self.asking(approval, routes, approvers, barred),
            closed=closed_line(unread),
        )

    async def asking(
        self, approval: Approval, routes: list[Route], approvers: dict[str, None], barred: str | None
    ) -> str:
        """A waiting card's top-level text: who asks for what, with the approvers mentioned
        when the card is a message of its own that should ping them (mrkdwn, escaped)."""
        route = self.route(approval)
        line = await self.phone_line(approval)
        elsewhere = route.channel is not None and route.channel != approval.channel
        if not (elsewhere and route.notify == "mention"):
            return line
        heard = [i for i in approvers if route.requester_may_approve or i != barred]
        return " ".join([*(mention(i) for i in heard), line])

    def waiting_on(self, approval: Approval) -> tuple[str, ...]:
        """Who may still decide: the approvers (and the escalation group, once escalated), without
        the requester when barred and without those whose approval already counts."""
        routes = self.routes(approval)
        ids = dict.fromkeys(i for r in routes for i in r.approvers)
        ids.update(dict.fromkeys(approval.escalated_to()))
        voted = {v.user for votes in approval.votes.values() for v in votes}
        barred = self.barred(approval, routes)
        return tuple(i for i in ids if i not in voted and i != barred)

    def deciders(self, approval: Approval) -> list[tuple[str, ...]]:
        """Per action, the people and groups its rule names (none: anyone who may approve),
        the requester left out when she may not decide her own request."""
        barred = self.barred(approval, self.routes(approval))
        return [tuple(i for i in route.approvers if i != barred) for route in self.routes(approval)]

    def routes(self, approval: Approval) -> list[Route]:
        """Each action's route (a question's: one), by the rule its card went out with."""
        return self.permissions.routes(approval)

    @staticmethod
    def barred(approval: Approval, routes: list[Route]) -> str | None:
        """The requester, when a route says they may not decide their own request."""
        return approval.requester if any(not r.requester_may_approve for r in routes) else None

    async def notify(self, approval: Approval, text: str, post_id: str, ids: tuple[str, ...]) -> None:
        """Tell `ids` about a waiting approval as the policy's `notify` says (a reminder, an
        escalation): mentioned in a reply sent to the channel too, under the card when it is a
        message of its own; or by direct message. Each `post_id` goes out once."""
        route = self.route(approval)
        if route.notify == "none" or not ids or approval.card_ts is None:
            return
        link = await self.slack.card_link(approval)
        opened = f"<{link}|Open the card>" if link else "See the card"
        if route.notify == "dm":
            for user in self.people(ids):
                await self.notice(approval, f"{post_id}:{user}", f"{text}. {opened}.", user, opened)
            return
        pings = " ".join(mention(i) for i in ids)
        # the card is a message of its own: the notice is a reply under it, else in the run's thread
        await self.notice(approval, post_id, f"{pings} {text}. {opened}.", approval.card_where, opened, pings)

    async def settled(self, approval: Approval) -> None:
        """Once a card has its outcome: the run's thread is told it, mentioning the requester
        (once, with the reasons people gave), and every notice that asked someone to act on it
        now says the outcome instead, so a notification list shows the truth. Once per approval
        (a second replica may repeat it: the post is made once, an edit twice says the same)."""
        done = f"settled:{approval.approval_id}"
        posts = await self.slack.posts.record(approval.thread_id)
        if posted_in(posts, done):
            return
        view = await self.view(approval)
        if outcome_told(approval):  # (she is mentioned: "asked by" her would say it twice)
            told = escape(card_text(approval, "", view.headline, view.names, asked_by=False))
            await self.slack.thread_reply(
                approval,
                outcome_line(approval, view.names, told),
                f"outcome:{approval.approval_id}",
                kind="outcome",
            )
        sentence = escape(card_text(approval, "", view.headline, view.names))
        posts = await self.slack.posts.record(approval.thread_id)  # (again: a notice may have been
        for post_id, said in notices_in(posts, approval.approval_id).items():  # recorded meanwhile)
            await self.rewrite(approval, post_id, said, sentence, posts)
        await self.slack.posts.save(approval.thread_id, done, "done")

    async def rewrite(
        self, approval: Approval, post_id: str, said: dict[str, str], sentence: str, posts: dict[str, str]
    ) -> None:
        """A notice that asked people to act, changed to say the outcome (`sentence`); `posts`:
        the run's post record, read after the notice was posted."""
        ts = posted_in(posts, post_id)
        where = said.get("where", "")
        if where.startswith(("U", "W")):  # a DM: the channel Slack opened for it
            where = posted_in(posts, f"where:{post_id}") or ""
        if ts and where:
            text = " ".join(p for p in (said.get("pings"), f"{sentence}.", f"{said.get('tail')}.") if p)
            await self.slack.edit(where, ts, text)

    async def phone_line(self, approval: Approval) -> str:
        """The sentence a phone shows: who asked and what for (mrkdwn, escaped)."""
        whose = f"{await self.name(approval.requester)}'s agent" if approval.requester else "An agent"
        request = approval.request
        if request.kind is RequestKind.ELICITATION:  # an MCP server asks, for the agent's call
            message = cut(visible(request.elicitations[0].message), 120)
            return escape(f"{whose} calls {cut(visible(request.tool_name), 60)}, which asks: {message}")
        if not approval.request.actions:
            return escape(f"{whose} asks: {cut(visible(str(approval.request.question)), 120)}")
        by_policy = approval.by_policy()  # (said in the thread: the card asks the others)
        asked = [i for i in range(len(approval.request.actions)) if i not in by_policy] or [0]
        first = summary_line(approval.request.actions[asked[0]], self.routes(approval)[asked[0]])
        more = f" (and {len(asked) - 1} more)" if len(asked) > 1 else ""
        return escape(f"{whose} wants to {first[:1].lower()}{first[1:]}{more}")

    async def name(self, user: str) -> str:
        """A person's display name (users.info, once per process); their id if Slack will not say."""
        if user == SIGNOFF:  # (an expiry's decider: not a Slack user)
            return "Signoff"
        if user not in self._names:
            try:
                reply = await self.slack.client.users_info(user=user)
                profile = reply["user"].get("profile", {})
                self._names[user] = profile.get("display_name") or reply["user"].get("real_name") or user
            except Exception as exc:  # a name is a nicety: the notification goes out without it
                log.warning("user_name_unknown", slack_user=user, error=repr(exc))
                return user
        return visible(self._names[user])

    async def deliver(self, approval: Approval) -> str:
        """Post the card where the policy says (once), link it from the run's thread when it is
        elsewhere, and notify its approvers; returns the card's ts."""
        route = self.route(approval)
        view = await self.view(approval)
        line = await self.phone_line(approval)
        # Approvers are pinged, except a requester who may not decide their own request.
        heard = [i for i in view.approvers if route.requester_may_approve or i != approval.requester]
        pings = " ".join(mention(i) for i in heard) if route.notify == "mention" else ""
        elsewhere = route.channel is not None and route.channel != approval.channel
        # In the run's thread, a card that pings is sent to the channel too: the notification
        # lands on the card (its approvers are mentioned on it), not on a notice under it.
        broadcast = bool(pings) and not elsewhere
        ts = await self.slack.post_card(
            approval, view.asking, view, channel=route.channel if elsewhere else None, broadcast=broadcast
        )
        link = await self.slack.permalink(approval.card_where if not elsewhere else str(route.channel), ts)
        opened = f"<{link}|Open the card>" if link else "See the card"
        if elsewhere:
            await self.notice(
                approval,
                f"link:{approval.approval_id}",
                f"✋ {line}. Waiting for approval in <#{route.channel}>: {opened}.",
                approval.channel,
                f"{opened} in <#{route.channel}>",
            )
        if route.notify == "dm":
            for user in self.people(tuple(heard)):
                await self.notice(
                    approval, f"dm:{approval.approval_id}:{user}", f"{line}. {opened}.", user, opened
                )
        return ts

    async def notice(
        self, approval: Approval, post_id: str, text: str, where: str, tail: str, pings: str = ""
    ) -> None:
        """Post a notice that asks people to act on the card (once), and keep what it takes to
        change it once they need not: `settled` rewrites it as the outcome (`tail`: the link,
        `pings`: the mentions it keeps, so a notification list shows the outcome)."""
        if where == approval.channel:  # a reply in the run's thread, sent to the channel if it pings
            await self.slack.thread_reply(approval, text, post_id, broadcast=bool(pings))
        elif where == approval.card_where and approval.card_ts:  # under a card of its own
            await self.slack.posts.once(
                approval.thread_id, post_id, where, text, approval.card_ts, broadcast=True
            )
        else:  # a person: the app's DM with them
            await self.slack.direct_message(approval.thread_id, where, text, post_id)
        said = {"tail": tail, "pings": pings, "where": where}
        await self.slack.posts.save(
            approval.thread_id, f"notice:{approval.approval_id}:{post_id}", json.dumps(said)
        )
        posts = await self.slack.posts.record(approval.thread_id)
        if posted_in(posts, f"settled:{approval.approval_id}"):
            # decided while this notice was on its way (a reminder queued before the last click)
            fresh = await self.slack.store.approvals.get(approval.approval_id) or approval
            view = await self.view(fresh)
            sentence = escape(card_text(fresh, "", view.headline, view.names))
            await self.rewrite(fresh, post_id, said, sentence, posts)

    async def groups_changed(self, groups: set[str]) -> None:
        """Groups that stopped (or started again) granting: the waiting cards naming them are
        drawn again, so they say who can decide."""
        for approval in await self.slack.store.approvals.pending_in(limit=1_000):
            named = {i for route in self.routes(approval) for i in (*route.approvers, *route.escalate_to)}
            if groups & named:
                await self.slack.store.cards.touch(approval.approval_id)

    def people(self, approvers: tuple[str, ...]) -> list[str]:
        """The users behind approver ids: users as they are, groups by their known members."""
        users: dict[str, None] = {}
        for slack_id in approvers:
            if slack_id.startswith("S"):
                members = self.permissions.directory.members(slack_id) if self.permissions.directory else None
                users.update(dict.fromkeys(sorted(members or ())))
            else:
                users[slack_id] = None
        return list(users)
