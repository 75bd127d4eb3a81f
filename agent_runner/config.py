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
    graph: str = "agent_runner.demo_agent:build_demo_agent"
    # tool name (or "*") -> Slack user ids (U…) and user-group ids (S…) who may decide
    approvers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    requester_cannot_approve: bool = False
    destructive_tools: tuple[str, ...] = DEFAULT_DESTRUCTIVE
    # stream consumers: this replica's name, and how long an entry may sit with a
    # dead consumer before another one takes it over
    consumer: str | None = None
    claim_idle_ms: int = 60_000
    lock_ttl_ms: int = 30_000

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        approvers = {
            tool: tuple(ids) for tool, ids in json.loads(env.get("SIGNOFF_APPROVERS") or "{}").items()
        }
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
            graph=env.get("SIGNOFF_GRAPH", cls.graph),
            approvers=approvers,
            requester_cannot_approve=env.get("SIGNOFF_REQUESTER_CANNOT_APPROVE", "").lower() in ("1", "true", "yes"),
            destructive_tools=tuple(t.strip() for t in destructive.split(",") if t.strip())
            if destructive is not None else DEFAULT_DESTRUCTIVE,
            consumer=env.get("SIGNOFF_CONSUMER") or None,
            claim_idle_ms=int(env.get("SIGNOFF_CLAIM_IDLE_MS", "60000")),
            lock_ttl_ms=int(env.get("SIGNOFF_LOCK_TTL_MS", "30000")),
        )
