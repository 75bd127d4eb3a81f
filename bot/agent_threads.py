"""The app's agent conversations (the Messages tab): suggested prompts, and the answers to them.

Slack gives a new app its agent view (`features.agent_view`): the Messages tab is the app's DM,
each message there its own thread. Opening the tab (`app_home_opened`, tab "messages") offers
suggested prompts at the top of the tab: "What is waiting for me?", "My requests", and one per
graph the person may start there ("Use <graph>"). An app installed from an earlier manifest has
Slack's assistant view instead: opening a new thread there (`assistant_thread_started`) offers the
same prompts in that thread. A prompt is a message the person sends; these three are answered by
Signoff itself, in the message's thread, and never reach an agent. Any other message there starts
or continues a run, as in any DM (`bot.chatops`), on the graph chosen: "Use <graph>" applies to
its own thread and to the next run the person starts in the DM, in whichever thread.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

from slack_sdk.errors import SlackApiError

from bot.views.text import escape
from core.logs import get_logger

if TYPE_CHECKING:
    from bot.chatops import ChatOps

log = get_logger("chatops")

WAITING_FOR_ME = "What is waiting for me?"
MY_REQUESTS = "My requests"
USE = "Use "  # "Use <graph>": the thread's runs use that graph
PROMPTS_MOST = 4  # Slack shows up to four suggested prompts
LISTED = 10  # approvals an answer lists
OFFERED_AGAIN_S = 600  # the Messages tab's prompts are set again (the same ones) at most this often


def prompts(graphs: list[str]) -> list[dict[str, str]]:
    """The suggested prompts of a new agent thread."""
    offered = [
        {"title": WAITING_FOR_ME, "message": WAITING_FOR_ME},
        {"title": MY_REQUESTS, "message": MY_REQUESTS},
    ]
    offered += [{"title": f"{USE}{graph}", "message": f"{USE}{graph}"} for graph in graphs]
    return offered[:PROMPTS_MOST]


async def offer(chat: ChatOps, dm: str, thread_ts: str | None = None) -> None:
    """Set the suggested prompts: at the top of the Messages tab of the DM `dm` (the agent view:
    no thread_ts, which Slack's page says makes the call fail silently for an agent-view app), or
    in the assistant view's new thread `thread_ts`. A token without assistant:write gets none;
    the DM works the same."""
    offered = prompts(chat.graphs_for(dm))
    if thread_ts is None:  # (opened again and again: the same prompts are not set again for a while)
        digest = zlib.crc32(repr(offered).encode())
        if not await chat.service.slack.state.once(f"prompts:{dm}:{digest}", OFFERED_AGAIN_S):
            return
    where = {"thread_ts": thread_ts} if thread_ts else {}
    try:
        await chat.service.slack.client.assistant_threads_setSuggestedPrompts(
            channel_id=dm, prompts=offered, **where
        )
    except SlackApiError as exc:  # (no assistant:write scope: the DM works without them)
        log.info("prompts_refused", channel=dm, error=exc.response.get("error"))


async def prompted(chat: ChatOps, user: str, channel: str, root: str, text: str) -> bool:
    """Answer a suggested prompt sent in a DM thread with no run yet; False when `text` is not
    one ("Use <word>" is one only when the word names a graph the person may use there)."""
    said = text.strip()
    if said == WAITING_FOR_ME:
        reply = await waiting_for(chat, user)
    elif said == MY_REQUESTS:
        reply = await requested_by(chat, user)
    elif said.startswith(USE) and len(said.split()) == 2 and said.split()[1] in chat.graphs_for(channel):
        graph = said.split()[1]
        refusal = await chat.start_refusal(user, channel, graph)
        if refusal:
            reply = refusal
        else:
            await chat.service.slack.state.choose_graph(channel, root, graph)
            await chat.service.slack.state.choose_next_graph(channel, graph)
            reply = f"I'll use *{escape(graph)}* for what you ask next, here or in a new message."
    else:
        return False
    await chat.service.slack.posts.post(channel, reply, root)
    return True


async def waiting_for(chat: ChatOps, user: str) -> str:
    """The approvals waiting for `user`'s decision, newest first, with links to their cards."""
    mine = [
        a
        for a in await chat.store.approvals.pending_in(limit=100)
        if chat.may_decide(a, user, chat.permissions)
    ]
    if not mine:
        return "Nothing is waiting for your decision."
    lines = [await chat.listed_line(approval) for approval in mine[:LISTED]]
    more = f"\n_…and {len(mine) - LISTED} more: see the Home tab._" if len(mine) > LISTED else ""
    return f"*Waiting for your decision ({len(mine)}):*\n" + "\n".join(lines) + more


async def requested_by(chat: ChatOps, user: str) -> str:
    """`user`'s own requests still waiting for someone, with links to their cards."""
    mine = [a for a in await chat.store.approvals.pending_in(limit=100) if a.requester == user]
    if not mine:
        return "None of your requests is waiting for a decision."
    lines = [await chat.listed_line(approval) for approval in mine[:LISTED]]
    return f"*Your requests waiting for a decision ({len(mine)}):*\n" + "\n".join(lines)
