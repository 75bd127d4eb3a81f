"""Bolt listeners, one module per kind (as bolt-python's app template has them): `actions`,
`views`, `commands`, `events`, each with `register(app, service, chat)`; `register_listeners`
calls each once. Bolt listeners: authorise, check, record, ack; everything else after the ack.

The app runs with `process_before_response=True`, so Slack gets its answer
when a listener returns. An Approve click costs one Redis round trip before
that: the decide script checks that the approval exists and is pending, the
action exists and is undecided, the decision type is allowed for it and the
clicker may decide it, and records the decision, all in one atomic step.
Who may decide comes from memory (group members are fetched in the
background), never from a Slack call on this path. Opening a modal runs the
same checks without writing. Modal submissions load the record too, to check
edited arguments with the protocol. views.open, card refreshes and thread
replies run after the ack. A refusal is an ephemeral message (or an inline
modal error) and changes nothing.

A batch of any size is decided from Slack: Approve all / Reject all… record
each undecided action on its own, through the same decide script, and say
what happened in one card refresh and one thread line. The review modal
(`bot.views.modals.review_modal`) shows every action a page at a time; a click in
it carries the view (`Shown`), and is answered there: the page is redrawn
from the record (views.update, with the click's hash; on `hash_conflict` it
is read again and redrawn unconditionally, and one process redraws a view
at a time), a refusal is a line at its top, and a form is pushed over it
(views.push: views.open from inside a modal shows nothing).

Slack gives the whole round trip 3 s. Everything before the ack shares a
budget (`ack_budget_s`, 2 s by default): when Redis is too slow to answer
within it, the bot acks anyway and tells the person the truth ("still
recording; the card will show the result"), then finishes when Redis answers,
instead of letting Slack show an error for a decision that may well be
recorded.

What the listeners share and do after the ack is `bot.service`; what a click says,
`bot.clicks`; what a person is told when nothing changed, `bot.views.refusals`.
"""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp

from bot.chatops import ChatOps
from bot.listeners import actions, commands, events, views
from bot.service import DecisionService


def register_listeners(app: AsyncApp, service: DecisionService, chat: ChatOps) -> None:
    """Every listener of the bot, each kind's module once."""
    for kind in (actions, views, commands, events):
        kind.register(app, service, chat)
