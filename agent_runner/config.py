"""Settings from the environment, read once at the process edge."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

DEFAULT_DESTRUCTIVE = ("delete", "delete_file", "drop_table", "issue_refund", "send_email", "execute")


@dataclass(frozen=True)
class Settings:
    redis_url: str | None = None
    prefix: str = "signoff"
    slack_bot_token: str = ""
    slack_signing_secret: str = ""
    slack_app_token: str | None = None
    slack_api_url: str = "https://slack.com/api/"
    channel: str | None = None
    port: int = 3000
    graph: str | None = None  # SIGNOFF_GRAPH: one graph, module:attr
    graphs_file: str = "langgraph.json"  # LangGraph's own config: {"graphs": {"name": "./path.py:attr"}}
    default_graph: str | None = None
    api_token: str | None = None  # bearer token for POST /runs; unset: the endpoint is off
    # channel id (or "*") -> user ids / user-group ids who may start runs there (default: everyone)
    starters: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # channel id (or "*") -> graph names that channel may use (default: all)
    channel_graphs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # tool name (or "*") -> Slack user ids (U…) and user-group ids (S…) who may decide
    approvers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    requester_cannot_approve: bool = False
    destructive_tools: tuple[str, ...] = DEFAULT_DESTRUCTIVE
    # stream consumers: this replica's name; how long work stays its owner's without a
    # heartbeat (then another replica takes it over); how many threads it works on at once
    consumer: str | None = None
    lease_ms: int = 30_000
    concurrency: int = 8
    runner_port: int | None = None  # the runner's /healthz and /readyz; unset: no HTTP server
    ack_budget_ms: int = 2_000  # Slack waits 3 s for the whole round trip; the bot answers within this

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        approvers = _id_lists(env.get("SIGNOFF_APPROVERS"))
        destructive = env.get("SIGNOFF_DESTRUCTIVE_TOOLS")
        api_url = env.get("SLACK_API_URL") or cls.slack_api_url
        return cls(
            redis_url=env.get("REDIS_URL") or None,
            prefix=env.get("SIGNOFF_PREFIX", "signoff"),
            slack_bot_token=env.get("SLACK_BOT_TOKEN", ""),
            slack_signing_secret=env.get("SLACK_SIGNING_SECRET", ""),
            slack_app_token=env.get("SLACK_APP_TOKEN") or None,
            slack_api_url=api_url if api_url.endswith("/") else api_url + "/",
            channel=env.get("SIGNOFF_CHANNEL") or None,
            port=int(env.get("PORT", "3000")),
            graph=env.get("SIGNOFF_GRAPH") or None,
            graphs_file=env.get("SIGNOFF_GRAPHS_FILE", "langgraph.json"),
            default_graph=env.get("SIGNOFF_DEFAULT_GRAPH") or None,
            api_token=env.get("SIGNOFF_API_TOKEN") or None,
            starters=_id_lists(env.get("SIGNOFF_STARTERS")),
            channel_graphs=_id_lists(env.get("SIGNOFF_CHANNEL_GRAPHS")),
            approvers=approvers,
            requester_cannot_approve=env.get("SIGNOFF_REQUESTER_CANNOT_APPROVE", "").lower() in ("1", "true", "yes"),
            destructive_tools=tuple(t.strip() for t in destructive.split(",") if t.strip())
            if destructive is not None else DEFAULT_DESTRUCTIVE,
            consumer=env.get("SIGNOFF_CONSUMER") or None,
            lease_ms=int(env.get("SIGNOFF_LEASE_MS", "30000")),
            concurrency=int(env.get("SIGNOFF_CONCURRENCY", "8")),
            runner_port=int(env["SIGNOFF_RUNNER_PORT"]) if env.get("SIGNOFF_RUNNER_PORT") else None,
            ack_budget_ms=int(env.get("SIGNOFF_ACK_BUDGET_MS", "2000")),
        )


def _id_lists(raw: str | None) -> dict[str, tuple[str, ...]]:
    return {key: tuple(ids) for key, ids in json.loads(raw or "{}").items()}
