"""The passkey pages on the bot's HTTP port: `/step-up/<token>` (approve with a passkey) and
`/passkeys/<token>` (add, list, remove one's passkeys).

A step-up's POST uses its link up first (one request gets it, whatever races), then checks the
assertion against the challenge derived from what the link bound (`relying_party`), by one of
the link's person's passkeys, with user verification, and moves that passkey's sign count up
(a count that does not move is refused: a copied authenticator). Only then is the approval
recorded, through the decide script with the proof (`Decisions.decide`): the script still
refuses a person who may no longer approve, a card decided meanwhile, a revision that moved, a
deadline that passed. Whatever is refused, the page says which, in words, and nothing is
recorded. Every response is `no-store`, sends no referrer (the token is in the URL), may not be
framed, and runs only Signoff's own script.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from fido2.utils import websafe_encode

from bot.clicks import Click, Decision
from bot.granted import trusted_after
from bot.passkeys.html import call_html, enrol_body, page, step_up_body, words_page
from bot.passkeys.relying_party import (
    NotVerified,
    RelyingParty,
    confirm_challenge,
    enrol_challenge,
    step_up_challenge,
)
from bot.routing import summary_line
from bot.service import DecisionService
from bot.step_up import bound_actions
from bot.trust import grant_after
from core import metrics
from core.logs import get_logger
from core.protocol import Approve
from core.records import Approval, DecisionResult, Outcome, Verdict
from core.store.passkeys import Link

log = get_logger("passkeys")

GONE = "This link has expired or was used already: click Approve on the card for a new one. Nothing was recorded."
NOT_CONFIRMED_WITH_A_PASSKEY = (
    "Confirm with one of your passkeys first (your browser asks for it): a Slack session alone "
    "adds or removes none. Lost them all? A Signoff admin removes them (signoff passkeys remove), "
    "then you add a new one. Nothing changed."
)
ENROL_GONE = "This link has expired or was used already: type /signoff passkey in Slack for a new one."
TAKEN_WORDS = {
    Outcome.EXPIRED: "This request expired before your passkey answered: it was not run. Nothing was recorded.",
    Outcome.WITHDRAWN: "The requester withdrew this request meanwhile. Nothing was recorded.",
}
REFUSED_WORDS = {
    DecisionResult.TAKEN: "Someone decided this call on the card meanwhile. Nothing was recorded.",
    DecisionResult.NOT_PENDING: "This approval was closed meanwhile. Nothing was recorded.",
    DecisionResult.MISSING: "This approval no longer exists. Nothing was recorded.",
    DecisionResult.CHANGED: (
        "The arguments were edited since your link was made: read the card again, and approve again "
        "if you agree. Nothing was recorded."
    ),
    DecisionResult.NOT_APPROVER: "You may no longer approve this call. Nothing was recorded.",
    DecisionResult.REQUESTER: "You started this run, so someone else has to approve it. Nothing was recorded.",
    DecisionResult.VOTED_ALREADY: "Your approval counts already: another approver has to add theirs.",
    DecisionResult.GROUPS_UNKNOWN: "Signoff could not check the approver groups just now. Nothing was recorded.",
}
NOT_VERIFIED = (
    "Your passkey's answer does not prove this approval (not one of your passkeys, or not for this "
    "call). Nothing was recorded."
)
REGRESSED = (
    "This passkey's counter went backwards, which a copied passkey does: refused, and nothing was "
    "recorded. Tell whoever runs Signoff."
)


def _headers(nonce: str) -> dict[str, str]:
    return {
        "Content-Security-Policy": (
            f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
            "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        ),
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
    }


def _html(page_and_nonce: tuple[str, str], status: int = 200) -> web.Response:
    text, nonce = page_and_nonce
    return web.Response(text=text, content_type="text/html", status=status, headers=_headers(nonce))


def _said(ok: bool, text: str, status: int = 200) -> web.Response:
    return web.json_response({"ok": ok, "said": text}, status=status, headers={"Cache-Control": "no-store"})


def verdict_words(verdict: Verdict) -> str | None:
    """What the page says of a refused decision; None when it was taken."""
    if verdict.result in (DecisionResult.RECORDED, DecisionResult.COMPLETE, DecisionResult.VOTED):
        return None
    first = verdict.first
    if verdict.result is DecisionResult.TAKEN and first is not None and first.outcome in TAKEN_WORDS:
        return TAKEN_WORDS[first.outcome]
    return REFUSED_WORDS.get(verdict.result, "Signoff could not record this approval. Nothing was recorded.")


@dataclass
class StepUpResult:
    result: str  # for the metric: recorded, refused, not_verified, regressed, gone, changed
    said: str
    ok: bool = False


class PasskeyPages:
    """The handlers, for one bot."""

    def __init__(self, service: DecisionService, public_url: str):
        self.service, self.store = service, service.store
        self.party = RelyingParty(public_url)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/step-up/{token}", self.step_up_page)
        app.router.add_post("/step-up/{token}", self.step_up)
        app.router.add_get("/passkeys/{token}", self.enrol_page)
        app.router.add_post("/passkeys/{token}", self.enrol)
        app.router.add_post("/passkeys/{token}/remove", self.remove)

    # step-up ------------------------------------------------------------------------

    async def step_up_page(self, request: web.Request) -> web.Response:
        link = await self.store.passkeys.peek(request.match_info["token"])
        if link is None or link.kind != "step_up":
            return _html(words_page("Link expired", GONE), 410)
        approval = await self.store.approvals.get(link.approval_id)
        stale = self._stale(approval, link)
        if stale or approval is None:
            return _html(words_page("Nothing to approve", stale or GONE), 409)
        passkeys = await self.store.passkeys.of(link.user)
        routes = self.service.permissions.routes(approval)
        calls = []
        for index, _, _ in link.actions:
            action = approval.request.actions[index]
            calls.append(call_html(action.name, summary_line(action, routes[index]), action.args))
        options = {"publicKey": self.party.request_options(passkeys, step_up_challenge(link))}
        body = step_up_body(await self.service.slack.name_of(link.user), calls, bool(passkeys))
        return _html(page("Approve with your passkey", body, options))

    def _stale(self, approval: Approval | None, link: Link) -> str | None:
        """Why the link no longer approves what it bound (None: it still does)."""
        if approval is None:
            return REFUSED_WORDS[DecisionResult.MISSING]
        indexes = [index for index, _, _ in link.actions]
        if any(i in approval.decided for i in indexes):
            return REFUSED_WORDS[DecisionResult.TAKEN]
        if approval.status.value != "pending":
            return REFUSED_WORDS[DecisionResult.NOT_PENDING]
        if [tuple(a) for a in bound_actions(approval, indexes)] != [tuple(a) for a in link.actions]:
            return REFUSED_WORDS[DecisionResult.CHANGED]
        return None

    async def step_up(self, request: web.Request) -> web.Response:
        try:
            sent = await request.json()
            credential = sent["credential"]
        except Exception:
            return _said(False, "Signoff could not read what the browser sent. Nothing was recorded.", 400)
        link = await self.store.passkeys.take(request.match_info["token"])  # used up, whatever follows
        if link is None or link.kind != "step_up":
            outcome = StepUpResult("gone", GONE)
        else:
            outcome = await self._stepped_up(link, credential)
        metrics.STEP_UPS.labels(outcome.result).inc()
        log.info("step_up", result=outcome.result, user=link.user if link else None)
        return _said(outcome.ok, outcome.said)

    async def _stepped_up(self, link: Link, credential: Any) -> StepUpResult:
        approval = await self.store.approvals.get(link.approval_id)
        stale = self._stale(approval, link)
        if stale or approval is None or time.time() > link.expires_at:
            return StepUpResult("changed", stale or GONE)
        challenge = step_up_challenge(link)
        try:
            found, count = self.party.verified(challenge, await self.store.passkeys.of(link.user), credential)
        except NotVerified as exc:
            log.warning("step_up_not_verified", user=link.user, reason=str(exc))
            return StepUpResult("not_verified", NOT_VERIFIED)
        counted = await self.store.passkeys.counted(link.user, found, count)
        if counted == "missing":  # removed meanwhile (`signoff passkeys remove`)
            return StepUpResult("not_verified", NOT_VERIFIED)
        if counted != "ok":
            log.warning("step_up_sign_count_regressed", user=link.user, credential=found, count=count)
            return StepUpResult("regressed", REGRESSED)
        proof = {"method": "passkey", "credential": found, "challenge": websafe_encode(challenge)}
        verdicts = []
        for index, revision, _ in link.actions:
            verdict = await self.service.decide(
                link.approval_id, index, Approve(), link.user, seen=revision, proof=proof
            )
            verdicts.append((index, verdict))
        return await self._told(link, verdicts)

    async def _told(self, link: Link, verdicts: list[tuple[int, Verdict]]) -> StepUpResult:
        """The page's words, and Slack's side of it after (the card, the thread, a trust grant)."""
        service, refusals = self.service, [w for _, v in verdicts if (w := verdict_words(v))]
        first, verdict = verdicts[0]
        click = Click(user=link.user, channel=None, approval_id=link.approval_id, index=first, trigger_id="")
        if link.what == "approve_all":
            service.later(service.all_answered(verdicts, click, Approve()), "after_step_up")
        elif link.what == "trust" and not refusals:
            granted = await grant_after(
                service.store, service.permissions.rules, link.approval_id, first, link.user
            )
            service.later(trusted_after(service, (verdict, granted), click, Approve()), "after_step_up")
        else:
            service.later(service.answered(verdict, Decision.of(click, Approve())), "after_step_up")
        if refusals and len(refusals) == len(verdicts):
            return StepUpResult("refused", refusals[0])
        if verdict.result is DecisionResult.VOTED:
            need = await self._needed(link.approval_id, first)
            return StepUpResult(
                "recorded", f"Approved with your passkey: it counts, {verdict.votes} of {need}.", True
            )
        more = f" ({len(refusals)} not: {refusals[0]})" if refusals else ""
        return StepUpResult(
            "recorded", f"Approved with your passkey. The card in Slack shows it.{more}", True
        )

    async def _needed(self, approval_id: str, index: int) -> int:
        approval = await self.store.approvals.get(approval_id)
        return approval.quorum(index) if approval else 1

    # enrolment ----------------------------------------------------------------------

    async def enrol_page(self, request: web.Request) -> web.Response:
        link = await self.store.passkeys.peek(request.match_info["token"])
        if link is None or link.kind != "enrol":
            return _html(words_page("Link expired", ENROL_GONE), 410)
        passkeys, name = await self.store.passkeys.of(link.user), await self.service.slack.name_of(link.user)
        options = {"publicKey": self.party.creation_options(link.user, passkeys, enrol_challenge(link), name)}
        if passkeys:  # a change is confirmed with one of them first: a Slack session alone makes none
            options["confirm"] = self.party.request_options(passkeys, confirm_challenge(link))
        return _html(page("Your passkeys", enrol_body(name, passkeys), options))

    async def _unconfirmed(self, link: Link, sent: Mapping[str, Any]) -> str | None:
        """Why a change to a person's passkeys is refused (None: they have none yet, or one of
        them confirmed it, its sign count moving up as for a step-up)."""
        passkeys = await self.store.passkeys.of(link.user)
        if not passkeys:
            return None
        try:
            found, count = self.party.verified(confirm_challenge(link), passkeys, sent["confirmation"])
        except (NotVerified, KeyError, TypeError) as exc:
            log.warning("passkey_change_not_confirmed", user=link.user, reason=str(exc))
            return NOT_CONFIRMED_WITH_A_PASSKEY
        return None if await self.store.passkeys.counted(link.user, found, count) == "ok" else REGRESSED

    def _told_of(self, user: str, what: str) -> None:
        """The person hears of every change to their passkeys, in a direct message."""
        text = f"🔑 {what} Not you? Tell your Signoff admin (`signoff passkeys list {user}`)."
        self.service.later(
            self.service.slack.client.chat_postMessage(channel=user, text=text), "passkey_told"
        )

    async def enrol(self, request: web.Request) -> web.Response:
        token = request.match_info["token"]
        link = await self.store.passkeys.peek(token)
        if link is None or link.kind != "enrol":
            return _said(False, ENROL_GONE, 410)
        try:
            sent = await request.json()
            label = str(sent.get("label") or "Passkey")[:60]
            passkey = self.party.registered(enrol_challenge(link), sent["credential"], label, time.time())
        except (NotVerified, KeyError, TypeError, ValueError) as exc:
            log.warning("passkey_not_registered", user=link.user, reason=str(exc))
            return _said(False, "Signoff could not check this passkey. Nothing was added.", 400)
        if refused := await self._unconfirmed(link, sent):
            return _said(False, refused, 403)
        if await self.store.passkeys.take(token) is None:  # one registration per link
            return _said(False, ENROL_GONE, 410)
        await self.store.passkeys.add(link.user, passkey)
        log.info("passkey_added", user=link.user, credential=passkey.credential_id, label=label)
        self._told_of(link.user, f"A passkey was added to your Signoff approvals: {label}.")
        return _said(True, "Added. This link is used up: /signoff passkey for a new one.")

    async def remove(self, request: web.Request) -> web.Response:
        token = request.match_info["token"]
        link = await self.store.passkeys.peek(token)
        if link is None or link.kind != "enrol":
            return _said(False, ENROL_GONE, 410)
        try:
            sent = await request.json()
            credential_id = str(sent["credential_id"])
        except Exception:
            return _said(False, "Signoff could not read which passkey. Nothing was removed.", 400)
        if refused := await self._unconfirmed(link, sent):
            return _said(False, refused, 403)
        if await self.store.passkeys.take(token) is None:  # one change per link
            return _said(False, ENROL_GONE, 410)
        removed = await self.store.passkeys.remove(link.user, credential_id)
        log.info("passkey_removed", user=link.user, credential=credential_id, removed=removed)
        if not removed:
            return _said(False, "That passkey was not yours, or is gone already. This link is used up.")
        self._told_of(link.user, "A passkey was removed from your Signoff approvals.")
        return _said(True, "Removed. This link is used up: /signoff passkey for a new one.")
