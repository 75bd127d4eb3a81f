"""Prometheus metrics (prometheus-client), served on `/metrics` by the bot (PORT) and by the
runner (SIGNOFF_RUNNER_PORT).

Counters and histograms are kept by the process that sees the event; what lives in
Redis (pending approvals, stream lag, dead letters) is read when `/metrics` is scraped,
so every replica reports the same figures for it (take `max` across replicas).
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest

from core.store.queue import Queue, StreamFigures

FAST = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0)
HUMAN = (5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 86_400, 7 * 86_400)

DECISIONS = Counter(
    "signoff_decisions_total", "Decisions recorded, by type and tool", ["type", "tool", "result"]
)
ACK_SECONDS = Histogram(
    "signoff_ack_seconds", "Slack request received -> answered (acked), by kind", ["kind"], buckets=FAST
)
CARD_TO_DECISION = Histogram(
    "signoff_card_to_decision_seconds", "Approval created -> its last decision recorded", buckets=HUMAN
)
DECISION_TO_RESUME = Histogram(
    "signoff_decision_to_resume_seconds",
    "Last decision recorded -> the runner resumes the thread",
    buckets=FAST,
)
DECISION_TO_TOOL = Histogram(
    "signoff_decision_to_tool_start_seconds", "Last decision recorded -> the first tool starts", buckets=FAST
)
STEP_UPS = Counter(
    "signoff_step_ups_total",
    "Passkey step-ups on Signoff's page, by result (recorded, refused, failed…)",
    ["result"],
)
RUNS = Counter(
    "signoff_runs_total", "Runs ending a step, by outcome (waiting, finished, failed)", ["outcome"]
)
OUTCOMES = Counter(
    "signoff_approval_outcomes_total", "Approvals decided for people: expired, withdrawn", ["outcome"]
)
SLACK_ERRORS = Counter(
    "signoff_slack_api_errors_total", "Slack Web API errors, by method and error", ["method", "error"]
)
SLACK_429 = Counter(
    "signoff_slack_rate_limited_total", "Slack 429 answers (retried or not), by method", ["method"]
)
REDIS_OUTAGES = Counter(
    "signoff_redis_unavailable_total", "Times a loop found Redis away and backed off to reconnect", ["loop"]
)
GROUPS_GRANTING_NOBODY = Gauge(
    "signoff_approver_group_grants_nobody",
    "1 for a user group the policy names that grants nobody: gone from Slack, or its members unreadable",
    ["group", "reason"],
)
PENDING = Gauge("signoff_pending_approvals", "Approvals waiting for a decision")
STREAM_LAG = Gauge("signoff_stream_lag", "Entries not yet delivered to a consumer group", ["stream", "group"])
STREAM_PENDING = Gauge(
    "signoff_stream_pending", "Entries delivered but not acknowledged, by group", ["stream", "group"]
)
DEAD_LETTERS = Gauge("signoff_dead_letters", "Entries in the dead-letter stream")


REDIS_UP = Gauge(
    "signoff_redis_up", "1 when this scrape could read Redis; the figures it holds are NaN otherwise"
)


def set_redis_figures(figures: StreamFigures) -> None:
    """The gauges that Redis holds, from one read of them (`Queue.figures`)."""
    PENDING.set(figures.pending)
    DEAD_LETTERS.set(figures.dead_letters)
    for (name, group), value in figures.lag.items():
        STREAM_LAG.labels(name, group).set(value)
    for (name, group), value in figures.unacked.items():
        STREAM_PENDING.labels(name, group).set(value)


def add_route(app: web.Application, queue: Queue) -> None:
    """GET /metrics in the Prometheus text format."""

    async def metrics(request: web.Request) -> web.Response:
        try:
            set_redis_figures(await queue.figures())  # read on each scrape
            REDIS_UP.set(1)
        except Exception:  # Redis away: the process's own counters are still worth a scrape,
            REDIS_UP.set(0)  # and what Redis holds is unknown, not what it was
            for gauge in (PENDING, DEAD_LETTERS):
                gauge.set(float("nan"))
            STREAM_LAG.clear()
            STREAM_PENDING.clear()
        reply = web.Response(body=generate_latest())
        reply.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        return reply

    app.router.add_get("/metrics", metrics)
