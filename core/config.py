"""Settings from the environment: one typed model, read once at the process edge.

Every variable is checked when a process starts (pydantic-settings). Nonsense
is refused, not guessed at: `signoff` exits with one line per problem, naming
the variable, the value it got (secrets hidden) and what it expected, e.g.

    SIGNOFF_APPROVERS='{"*": "U0ALICE"}': "*" must be a list of ids, e.g. ["U0ALICE", "S0FINANCE"]
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlparse

from pydantic import (
    AliasChoices,
    Field,
    PrivateAttr,
    SecretBytes,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings.sources.utils import parse_env_vars

from core import connections, policy_file
from core.keys import MAX_PARTITIONS
from core.logs import redact
from core.policy_file import Duration, PolicyFile

DEFAULT_DESTRUCTIVE = ("delete", "delete_file", "drop_table", "issue_refund", "send_email", "execute")
SLACK_ID = re.compile(r"^[UWS][A-Z0-9]{2,}$")  # users (U…, W… on Enterprise Grid) and user groups (S…)
CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{2,}$")
SECRETS = {
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_APP_TOKEN",
    "SLACK_CONFIG_TOKEN",
    "SIGNOFF_API_TOKEN",
    "SIGNOFF_AGENT_SERVER_API_KEY",
    "SIGNOFF_WEBHOOK_SECRET",
    "SIGNOFF_CHECKPOINT_KEY",
    "SIGNOFF_CHECKPOINT_OLD_KEYS",
}
CHECKPOINT_KEY_BYTES = 32  # AES-256

IdLists = Annotated[dict[str, tuple[str, ...]], NoDecode]


def env(name: str, *more: str) -> Any:
    """A field read from the environment variable `name`."""
    return AliasChoices(name, *more)


NO_PUBLIC_URL = (
    "SIGNOFF_PUBLIC_URL: the policy asks approvers for a passkey (step_up), which they give on a page "
    "the bot serves: set the URL where browsers reach the bot (https://signoff.example.com)"
)


class StartupError(RuntimeError):
    """A process cannot start (a port in use, nowhere to post…); the message says what to do."""


def step_up_refusal(settings: Settings) -> str | None:
    """Why the bot cannot serve this policy: a rule asks for a passkey, and without SIGNOFF_PUBLIC_URL
    no page can be served where approvers give it."""
    return NO_PUBLIC_URL if settings.policy.steps_up and not settings.public_url else None


class SettingsError(ValueError):
    """Settings that make no sense; `problems` are one line each, for people."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


class _Given(EnvSettingsSource):
    """The environment a process was given (os.environ, or a mapping in tests)."""

    def __init__(self, settings_cls: type[BaseSettings], given: Mapping[str, str]):
        self._given = given
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(
            self._given, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str
        )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_ignore_empty=True, case_sensitive=True)

    redis_url: str | None = Field(None, validation_alias=env("REDIS_URL"))
    # how many partitions Signoff's keys are split into (see core.keys); fixed for the
    # life of a deployment's data; default 1 on one server, 12 on a cluster
    partitions: int | None = Field(None, validation_alias=env("SIGNOFF_PARTITIONS"), ge=1, le=MAX_PARTITIONS)
    prefix: str = Field("signoff", validation_alias=env("SIGNOFF_PREFIX"), pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    slack_bot_token: str = Field("", validation_alias=env("SLACK_BOT_TOKEN"))
    slack_signing_secret: str = Field("", validation_alias=env("SLACK_SIGNING_SECRET"))
    slack_app_token: str | None = Field(None, validation_alias=env("SLACK_APP_TOKEN"), pattern=r"^xapp-")
    slack_api_url: str = Field(
        "https://slack.com/api/", validation_alias=env("SLACK_API_URL"), pattern=r"^https?://[^\s/]+"
    )
    # how the Slack app is distributed: Slack limits reading history (conversations.history and
    # .replies) for an app commercially distributed outside the Marketplace (docs/slack-platform.md)
    slack_app_distribution: Literal["internal", "marketplace", "distributed"] = Field(
        "internal", validation_alias=env("SLACK_APP_DISTRIBUTION")
    )
    # `signoff doctor` only: an app configuration token and the app's id, to read the app's own
    # manifest (apps.manifest.export) and say which of its features and events are missing
    slack_config_token: str | None = Field(None, validation_alias=env("SLACK_CONFIG_TOKEN"), pattern=r"^xoxe")
    slack_app_id: str | None = Field(None, validation_alias=env("SLACK_APP_ID"), pattern=r"^A[A-Z0-9]{2,}$")
    channel: str | None = Field(None, validation_alias=env("SIGNOFF_CHANNEL"), pattern=CHANNEL_ID.pattern)
    port: int = Field(3000, validation_alias=env("PORT"), ge=1, le=65535)
    graph: str | None = Field(None, validation_alias=env("SIGNOFF_GRAPH"), pattern=r"^[^:\s]+:[A-Za-z_]\w*$")
    graphs_file: str = Field("langgraph.json", validation_alias=env("SIGNOFF_GRAPHS_FILE"))
    default_graph: str | None = Field(None, validation_alias=env("SIGNOFF_DEFAULT_GRAPH"))
    api_token: str | None = Field(None, validation_alias=env("SIGNOFF_API_TOKEN"))
    # whom POST /runs starts runs as: unset, the API itself (no requester); a body's `requester`
    # must be this one (a token holder is never anyone they name)
    api_requester: str | None = Field(
        None, validation_alias=env("SIGNOFF_API_REQUESTER"), pattern=r"^[UW][A-Z0-9]{2,32}$"
    )
    # whether runs POST /runs starts use their requester's trust grants (default: never)
    api_grants: bool = Field(False, validation_alias=env("SIGNOFF_API_GRANTS"))
    # channel id (or "*") -> user ids / user-group ids who may start runs there (default: everyone)
    starters: IdLists = Field(default_factory=dict, validation_alias=env("SIGNOFF_STARTERS"))
    # channel id (or "*") -> graph names that channel may use (default: all)
    channel_graphs: IdLists = Field(default_factory=dict, validation_alias=env("SIGNOFF_CHANNEL_GRAPHS"))
    # tool name (or "*") -> Slack user ids (U…) and user-group ids (S…) who may decide
    approvers: IdLists = Field(default_factory=dict, validation_alias=env("SIGNOFF_APPROVERS"))
    requester_cannot_approve: bool = Field(False, validation_alias=env("SIGNOFF_REQUESTER_CANNOT_APPROVE"))
    # the approval policy file (TOML, see core.policy_file); default ./signoff.toml when it exists
    policy_file: str | None = Field(None, validation_alias=env("SIGNOFF_POLICY"))
    destructive_tools: Annotated[tuple[str, ...], NoDecode] = Field(
        DEFAULT_DESTRUCTIVE, validation_alias=env("SIGNOFF_DESTRUCTIVE_TOOLS")
    )
    # stream consumers: this replica's name; how long work stays its owner's without a
    # heartbeat (then another replica takes it over); how many threads it works on at once
    consumer: str | None = Field(None, validation_alias=env("SIGNOFF_CONSUMER"), pattern=r"^[\w.@:-]{1,128}$")
    lease_ms: int = Field(30_000, validation_alias=env("SIGNOFF_LEASE_MS"), ge=500, le=3_600_000)
    concurrency: int = Field(8, validation_alias=env("SIGNOFF_CONCURRENCY"), ge=1, le=1_000)
    runner_port: int | None = Field(None, validation_alias=env("SIGNOFF_RUNNER_PORT"), ge=1, le=65535)
    # the runner's CPU niceness: on a shared host, agent work yields to what people wait on
    # (the bot's acks, Redis); a runner started nicer than this keeps its own
    runner_nice: int = Field(10, validation_alias=env("SIGNOFF_RUNNER_NICE"), ge=0, le=19)
    # Slack waits 3 s for the whole round trip; the bot answers within this
    ack_budget_ms: int = Field(2_000, validation_alias=env("SIGNOFF_ACK_BUDGET_MS"), ge=100, le=2_900)
    # how long what a finished run leaves in Redis is kept (runs, approvals, checkpoints, stream
    # entries); the audit stream has its own
    # how long a process may take to stop (SIGTERM): a runner finishes the tools it started
    # within it, then exits; keep it below the orchestrator's own grace period
    stop_grace: Duration = Field("25s", validation_alias=env("SIGNOFF_STOP_GRACE"))
    # how often user groups' members are read from Slack (by one replica); a group whose members
    # Slack has not answered for longer than `group_stale_after` grants nobody
    group_refresh: Duration = Field("5m", validation_alias=env("SIGNOFF_GROUP_REFRESH"))
    group_stale_after: Duration = Field("1h", validation_alias=env("SIGNOFF_GROUP_STALE_AFTER"))
    retention: Duration = Field("30d", validation_alias=env("SIGNOFF_RETENTION"))
    audit_retention: Duration = Field("365d", validation_alias=env("SIGNOFF_AUDIT_RETENTION"))
    # agents deployed on a LangGraph Agent Server (`core.agent_server`): its URL makes its
    # assistants graphs; the key is sent as LangGraph's clients send it (x-api-key)
    agent_server_url: str | None = Field(
        None, validation_alias=env("SIGNOFF_AGENT_SERVER_URL"), pattern=r"^https?://[^\s/]+"
    )
    agent_server_api_key: str | None = Field(None, validation_alias=env("SIGNOFF_AGENT_SERVER_API_KEY"))
    # where the Agent Server reaches the bot's run webhook (POST /agent-server/webhook), and the
    # secret it sends in X-Signoff-Webhook-Secret (langgraph.json `webhooks.headers`)
    webhook_url: str | None = Field(
        None, validation_alias=env("SIGNOFF_WEBHOOK_URL"), pattern=r"^https?://[^\s/]+"
    )
    webhook_secret: str | None = Field(None, validation_alias=env("SIGNOFF_WEBHOOK_SECRET"), min_length=16)
    # every interrupted thread of the deployment gets a card in SIGNOFF_CHANNEL, not only Signoff's
    agent_server_watch: bool = Field(False, validation_alias=env("SIGNOFF_AGENT_SERVER_WATCH"))
    # how often the bot looks for pauses no webhook told it about
    agent_server_poll: Duration = Field("15s", validation_alias=env("SIGNOFF_AGENT_SERVER_POLL"))
    # previews (`core.previews`, `agent_runner.previews`): tool name -> the `module:function` that
    # makes its preview from the call and the graph's state (also langgraph.json's "signoff"
    # section; this wins); each bounded in time and size
    previews: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, validation_alias=env("SIGNOFF_PREVIEWS")
    )
    preview_timeout: Duration = Field("5s", validation_alias=env("SIGNOFF_PREVIEW_TIMEOUT"))
    preview_max_chars: int = Field(
        60_000, validation_alias=env("SIGNOFF_PREVIEW_MAX_CHARS"), ge=1_000, le=1_000_000
    )
    # checkpoints encrypted at rest (AES-256-GCM, LangGraph's EncryptedSerializer): 32 random bytes
    # in base64 (`openssl rand -base64 32`); unset, checkpoints are stored as before
    checkpoint_key: SecretBytes | None = Field(None, validation_alias=env("SIGNOFF_CHECKPOINT_KEY"))
    # keys checkpoints may still be encrypted under (read, never written): a key being rotated out
    # until `signoff migrate --rekey` has rewritten them; comma-separated, base64 each
    checkpoint_old_keys: Annotated[tuple[SecretBytes, ...], NoDecode] = Field(
        (), validation_alias=env("SIGNOFF_CHECKPOINT_OLD_KEYS")
    )
    # where people's browsers reach the bot's HTTP port (its passkey pages, `bot.passkeys`): its host
    # is the WebAuthn relying party id; needed when the policy asks for a passkey (`step_up`)
    public_url: str | None = Field(
        None, validation_alias=env("SIGNOFF_PUBLIC_URL"), pattern=r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/?$"
    )
    log_format: Literal["json", "console"] = Field("console", validation_alias=env("LOG_FORMAT"))
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", validation_alias=env("LOG_LEVEL"))

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)  # `from_env` says which environment

    @classmethod
    def from_env(cls, given: Mapping[str, str] | None = None) -> Settings:
        """The settings of this process (`os.environ`), or of the mapping `given`; SettingsError if nonsense."""
        given = os.environ if given is None else given
        try:
            settings = cls(**_Given(cls, given)())
        except ValidationError as exc:
            raise SettingsError([_problem(error, given) for error in exc.errors()]) from None
        settings._policy = settings._load_policy(given)
        return settings

    _policy: PolicyFile | None = PrivateAttr(None)

    @property
    def policy(self) -> PolicyFile:
        """The approval policy: the file's, or SIGNOFF_APPROVERS and friends read as one."""
        if self._policy is None:
            self._policy = self._load_policy({})
        return self._policy

    @property
    def policy_missing(self) -> str | None:
        """What running without a policy file means, in a sentence, when no file is read (None
        when one is): the defaults are for trying Signoff, not for guarding tools."""
        if self.policy_file or Path(policy_file.DEFAULT_FILE).is_file():
            return None
        who = "the approvers SIGNOFF_APPROVERS names" if self.approvers else "anyone in the channel"
        own = "" if self.requester_cannot_approve else "; the requester may approve her own call"
        return (
            f"no policy file (SIGNOFF_POLICY, or {policy_file.DEFAULT_FILE} here): {who} may decide{own}; "
            "nothing expires"
        )

    def _load_policy(self, given: Mapping[str, str]) -> PolicyFile:
        path = Path(self.policy_file) if self.policy_file else Path(policy_file.DEFAULT_FILE)
        if not self.policy_file and not path.is_file():
            return PolicyFile.implicit(self.approvers, self.requester_cannot_approve)
        if not path.is_file():
            raise SettingsError([f"SIGNOFF_POLICY={self.policy_file!r}: no such file"])
        both = [n for n in ("SIGNOFF_APPROVERS", "SIGNOFF_REQUESTER_CANNOT_APPROVE") if given.get(n)]
        if both:
            raise SettingsError(
                [
                    f"{name}: the policy file {path} says who approves; set it there, not in both"
                    for name in both
                ]
            )
        try:
            return policy_file.load(path)
        except policy_file.PolicyError as exc:
            raise SettingsError(exc.problems) from None

    @model_validator(mode="after")
    def _agent_server(self) -> Settings:
        if self.webhook_url and not self.webhook_secret:
            raise ValueError(
                "SIGNOFF_WEBHOOK_URL needs SIGNOFF_WEBHOOK_SECRET (at least 16 characters), which the "
                "Agent Server sends in X-Signoff-Webhook-Secret"
            )
        if (self.webhook_url or self.agent_server_watch) and not self.agent_server_url:
            raise ValueError(
                "SIGNOFF_WEBHOOK_URL and SIGNOFF_AGENT_SERVER_WATCH need SIGNOFF_AGENT_SERVER_URL"
            )
        if self.agent_server_api_key and self.agent_server_url and not _private(self.agent_server_url):
            raise ValueError(
                "SIGNOFF_AGENT_SERVER_API_KEY would travel in clear text to SIGNOFF_AGENT_SERVER_URL: "
                "use https:// (plain http only to this machine)"
            )
        if self.agent_server_watch and not self.channel:
            raise ValueError(
                "SIGNOFF_AGENT_SERVER_WATCH needs SIGNOFF_CHANNEL: the channel where the cards of threads "
                "Signoff did not start go"
            )
        return self

    @field_validator("public_url")
    @classmethod
    def _passkey_origin(cls, url: str | None) -> str | None:
        """A browser takes passkeys on https (or http://localhost), for a host name, never an IP."""
        parsed = urlparse(url or "")
        if url and parsed.scheme != "https" and parsed.hostname != "localhost":
            raise ValueError("passkeys need https:// (plain http only for localhost)")
        if url and re.fullmatch(r"[0-9.]+", parsed.hostname or ""):
            raise ValueError("a host name, not an IP address: a passkey is for a domain (or localhost)")
        return url.rstrip("/") if url else url

    @field_validator("slack_api_url")
    @classmethod
    def _slash(cls, url: str) -> str:
        return url if url.endswith("/") else url + "/"

    @field_validator("log_level", mode="before")
    @classmethod
    def _level(cls, level: Any) -> Any:
        return level.upper() if isinstance(level, str) else level

    @field_validator("log_format", mode="before")
    @classmethod
    def _format(cls, fmt: Any) -> Any:
        return fmt.lower() if isinstance(fmt, str) else fmt

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, url: str | None) -> str | None:
        if url is None:
            return url
        try:
            connections.parse(url)
        except connections.RedisUrlError as exc:
            raise ValueError(
                f"{exc}; e.g. redis://host:6379/0, rediss://… (TLS), unix:///path.sock, "
                "redis+cluster://node1:6379,node2:6379 or redis+sentinel://sentinel1:26379/mymaster"
            ) from None
        return url

    @field_validator("checkpoint_key", mode="before")
    @classmethod
    def _checkpoint_key(cls, value: Any) -> Any:
        return _aes_key(value, "") if isinstance(value, str) else value

    @field_validator("checkpoint_old_keys", mode="before")
    @classmethod
    def _checkpoint_old_keys(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        given = [part.strip() for part in value.split(",") if part.strip()]
        many = len(given) > 1
        return tuple(
            _aes_key(key, f"key {n} of {len(given)}: " if many else "") for n, key in enumerate(given, 1)
        )

    @field_validator("destructive_tools", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() == "none":  # no tool asks for a dialog
            return ()
        return tuple(t.strip() for t in value.split(",") if t.strip()) if isinstance(value, str) else value

    @field_validator("starters", "approvers", mode="before")
    @classmethod
    def _people(cls, value: Any) -> Any:
        return _id_lists(value, "ids of users (U…) or user groups (S…)", SLACK_ID)

    @field_validator("channel_graphs", mode="before")
    @classmethod
    def _graph_lists(cls, value: Any) -> Any:
        return _id_lists(value, "graph names", None)

    @field_validator("previews", mode="before")
    @classmethod
    def _previews(cls, value: Any) -> Any:
        return preview_hooks(value)


HOOK = re.compile(r"^[^:\s]+:[A-Za-z_]\w*$")  # module:function, or ./file.py:function


def preview_hooks(value: Any) -> dict[str, str]:
    """Tool name -> `module:function` of its preview hook, from JSON (`SIGNOFF_PREVIEWS`, or
    langgraph.json's `"signoff": {"previews": {...}}`); ValueError in one line when it is not."""
    example = '{"run_sql": "myapp.previews:explain"}'
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(f"a JSON object of tool name -> module:function, e.g. {example}") from None
    if not isinstance(value, dict):
        raise ValueError(f"a JSON object of tool name -> module:function, e.g. {example}")
    for tool, target in value.items():
        if not isinstance(target, str) or not HOOK.match(target):
            raise ValueError(
                f"{json.dumps(tool)} must name a function as module:function or ./file.py:function, "
                f"got {json.dumps(target)}"
            )
    return dict(value)


def _private(url: str) -> bool:
    """https, or plain http to this machine: where a key may be sent."""
    parsed = urlparse(url)
    return parsed.scheme == "https" or parsed.hostname in ("127.0.0.1", "localhost", "::1")


def _aes_key(text: str, which: str) -> bytes:
    """A checkpoint key: base64 (standard or URL-safe) of 32 bytes; the error never shows it."""
    try:
        key = base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(
            f"{which}not base64: an AES-256 key is {CHECKPOINT_KEY_BYTES} random bytes in base64 "
            "(`openssl rand -base64 32`)"
        ) from None
    if len(key) != CHECKPOINT_KEY_BYTES:
        raise ValueError(
            f"{which}{len(key)} bytes once decoded: an AES-256 key is {CHECKPOINT_KEY_BYTES} random bytes "
            "in base64 (`openssl rand -base64 32`)"
        )
    return key


def _id_lists(value: Any, what: str, shape: re.Pattern[str] | None) -> Any:
    example = '{"*": ["U0ALICE", "S0FINANCE"]}' if shape else '{"C0123": ["demo"]}'
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(f"a JSON object of lists of {what}, e.g. {example}") from None
    if not isinstance(value, dict):
        raise ValueError(f"a JSON object of lists of {what}, e.g. {example}")
    for key, ids in value.items():
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ValueError(f"{json.dumps(key)} must be a list of {what}, e.g. {example}")
        wrong = [i for i in ids if shape and not shape.match(i)]
        if wrong:
            raise ValueError(
                f"{', '.join(map(json.dumps, wrong))} in {json.dumps(key)} "
                f"{'is' if len(wrong) == 1 else 'are'} not {what}"
            )
    return {key: tuple(ids) for key, ids in value.items()}


def _problem(error: Any, given: Mapping[str, str]) -> str:
    if not error.get("loc"):  # a rule across settings: its message names them
        return str(error.get("msg", "")).removeprefix("Value error, ")
    where = str(error["loc"][0])
    field = _FIELDS.get(where, where)
    name = _ENV_NAMES.get(field, where)
    raw = given.get(name, "")
    if name in SECRETS:
        shown = "(hidden)"
    elif name == "REDIS_URL":
        shown = repr(connections.hidden(raw))
    else:
        shown = repr(redact(raw))  # a URL's password, too
    message = str(error.get("msg", "")).removeprefix("Value error, ")
    if error.get("type") == "string_pattern_mismatch":
        message = _PATTERN_HINTS.get(field, message)
    return f"{name}={shown}: {message}"


_ENV_NAMES: dict[str, str] = {
    name: str(field.validation_alias.choices[0])  # type: ignore[union-attr]
    for name, field in Settings.model_fields.items()
}
_FIELDS = {name: field for field, name in _ENV_NAMES.items()}
_PATTERN_HINTS = {
    "prefix": "letters, digits, '_', '.', '-' (at most 64)",
    "slack_app_token": "an app-level token starting with xapp- (Socket Mode)",
    "slack_api_url": "an http(s) URL of a Slack Web API, e.g. https://slack.com/api/",
    "slack_config_token": "an app configuration token starting with xoxe (api.slack.com/apps)",
    "slack_app_id": "the app's id, such as A0123ABCD (its Basic Information page)",
    "channel": "a Slack channel id such as C0123ABCD (not a #name)",
    "graph": "module:attr or ./file.py:attr naming a compiled graph or a factory",
    "consumer": "letters, digits and . @ : _ - (at most 128)",
    "retention": "a duration like 90s, 30m, 12h or 30d",
    "stop_grace": "a duration like 25s or 2m",
    "group_stale_after": "a duration like 30m, 1h or 1d",
    "group_refresh": "a duration like 1m or 5m",
    "audit_retention": "a duration like 90s, 30m, 12h or 365d",
    "agent_server_poll": "a duration like 5s, 15s or 1m",
    "preview_timeout": "a duration like 2s, 5s or 1m",
    "agent_server_url": "the Agent Server's http(s) URL, e.g. http://127.0.0.1:2024",
    "webhook_url": "the http(s) URL at which the Agent Server reaches the bot, ending /agent-server/webhook",
}
