"""`signoff doctor`: every check of a deployment, each with a fix (the Slack side's are
`signoff.slack_doctor`'s): the signing secret, Redis (modules, persistence, eviction, layout), the policy,
the graphs, the Agent Server."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, TextIO
from urllib.parse import urlparse

import httpx

from agent_runner.graphs import load_target
from core.config import Settings, step_up_refusal
from core.graphs import GraphLoadError, graph_specs
from core.store import LayoutError, Store


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    warning: bool = False  # (ok) it works, but perhaps not as meant: said with its fix, not failed


async def doctor(settings: Settings, store: Store | None, slack: list[Check]) -> list[Check]:
    """Every check, in order; `slack`: the Slack side's (`signoff.slack_doctor`), run by the caller."""
    checks: list[Check] = list(slack)
    checks.append(
        Check("signing secret", True, "set")
        if settings.slack_signing_secret or settings.slack_app_token
        else Check(
            "signing secret",
            False,
            "SLACK_SIGNING_SECRET is not set: every request from Slack would be refused",
            "copy it from the app's Basic Information page (not needed with Socket Mode)",
        )
    )
    checks += await _redis_checks(store)
    policy, missing = settings.policy, settings.policy_missing
    checks.append(
        Check(
            "policy",
            True,
            missing,
            "write a signoff.toml (docs/policy.md) or set SIGNOFF_POLICY to one",
            warning=True,
        )
        if missing
        else Check("policy", True, f"{settings.policy_file or 'signoff.toml'}: {len(policy.rules)} rules")
    )
    if policy.steps_up:  # the passkey pages need the bot's public URL (its host: the relying party)
        refusal = step_up_refusal(settings)
        checks.append(
            Check(
                "passkey pages", False, refusal, "set SIGNOFF_PUBLIC_URL; the bot will not start without it"
            )
            if refusal
            else Check(
                "passkey pages", True, f"{settings.public_url}/step-up/…, relying party {_host(settings)}"
            )
        )
    checks += _graph_checks(settings)
    checks += await _agent_server_checks(settings)
    return checks


def _host(settings: Settings) -> str:
    return urlparse(settings.public_url or "").hostname or ""


async def _agent_server_checks(settings: Settings) -> list[Check]:
    from core.agent_server import ServerAway, agent_server

    server = agent_server(settings)
    if server is None:
        return []
    try:
        assistants = await server.refresh()
    except ServerAway as away:
        return [Check("Agent Server", False, str(away), "check SIGNOFF_AGENT_SERVER_URL and that it is up")]
    except httpx.HTTPStatusError as exc:
        refused = exc.response.status_code in (401, 403)
        return [
            Check(
                "Agent Server",
                False,
                f"answered {exc.response.status_code} to assistants.search",
                "check SIGNOFF_AGENT_SERVER_API_KEY (or LANGGRAPH_API_KEY)"
                if refused
                else "check SIGNOFF_AGENT_SERVER_URL: is it an Agent Server?",
            )
        ]
    finally:
        await server.close()
    checks = [
        Check(
            "Agent Server",
            bool(assistants),
            f"{len(assistants)} assistants: {', '.join(assistants)}" if assistants else "no assistants",
            "deploy a graph on it",
        )
    ]
    if not settings.webhook_url:
        every = settings.agent_server_poll
        checks.append(
            Check("Agent Server webhook", True, f"off: the runner and a poll every {every} find the pauses")
        )
    return checks


def _layout(store: Store, servers: int) -> str:
    where = store.server.kind(servers)
    return f"{where}, Signoff's keys in {store.keys.count} partition{'s' * (store.keys.count > 1)}"


async def _redis_checks(store: Store | None) -> list[Check]:
    if store is None:
        return [
            Check(
                "Redis", False, "REDIS_URL is not set", "point REDIS_URL at Redis 8 (or run `signoff redis`)"
            )
        ]
    try:
        memory, modules = await _redis_reached(store)
    except LayoutError as exc:
        return [Check("Redis layout", False, str(exc), "see docs/redis.md")]
    except Exception as exc:
        return [Check("Redis", False, f"unreachable: {type(exc).__name__}", "check REDIS_URL")]
    aof, policy = await _redis_config(store)
    return _redis_findings(store, memory, modules, aof, policy)


async def _redis_reached(store: Store) -> tuple[list[Any], list[Any]]:
    """Redis answers: each master's memory info and module list, once its layout is checked."""
    await store.ping()
    memory = await store.server.memory_info()
    modules = await store.server.module_lists()
    await store.layout.check(record=False)
    return memory, modules


async def _redis_config(store: Store) -> tuple[str, str]:
    """`appendonly` ("yes" only if on every master) and the first `maxmemory-policy` that is not
    noeviction, read by CONFIG GET (or why they are unknown)."""
    try:
        settings = await store.server.persistence_settings()
        aof = "yes" if all(a == "yes" for a, _ in settings) else "no"
        policy = str(next((p for _, p in settings if p != "noeviction"), "noeviction"))
    except Exception as exc:  # managed Redis often disables CONFIG: say so, not "unreachable"
        aof = policy = f"unknown (CONFIG GET refused: {type(exc).__name__}; check with your provider)"
    return aof, policy


def _redis_findings(
    store: Store, memory: list[Any], modules: list[Any], aof: str, policy: str
) -> list[Check]:
    used = sum(int(info.get("used_memory", 0)) for info in memory)
    wanted = {"rejson": "ReJSON", "search": "RediSearch"}
    loaded = [{str(m["name"]).lower() for m in found} for found in modules]
    missing = [label for name, label in wanted.items() if not all(any(name in m for m in s) for s in loaded)]
    every = " on every master" if len(memory) > 1 else ""
    return [
        Check("Redis", True, f"reachable, {used / 2**20:.1f}M used; {_layout(store, len(memory))}"),
        Check(
            "Redis modules",
            not missing,
            f"ReJSON and RediSearch loaded{every}" if not missing else f"missing {', '.join(missing)}",
            "use Redis 8 (modules included) or Redis Stack",
        ),
        Check(
            "Redis persistence",
            aof == "yes",
            f"appendonly yes{every}"
            if aof == "yes"
            else "appendonly no: a restart loses approvals and decisions",
            "CONFIG SET appendonly yes (and in redis.conf)",
        ),
        Check(
            "Redis eviction",
            policy == "noeviction",
            f"maxmemory-policy {policy}"
            + ("" if policy == "noeviction" else ": Redis may evict approvals and checkpoints"),
            "CONFIG SET maxmemory-policy noeviction",
        ),
    ]


def _graph_checks(settings: Settings) -> list[Check]:
    try:
        specs = graph_specs(settings)
    except GraphLoadError as exc:
        return [Check("graphs", False, str(exc), "fix langgraph.json or SIGNOFF_GRAPH")]
    if not specs:
        if settings.agent_server_url:
            return []  # the Agent Server's assistants are the graphs
        return [Check("graphs", False, "no graphs", "set SIGNOFF_GRAPH=module:attr or add a langgraph.json")]
    checks = []
    for name, spec in specs.items():
        try:
            load_target(spec)
            checks.append(Check(f"graph {name}", True, "loads; its model was not called"))
        except GraphLoadError as exc:
            checks.append(Check(f"graph {name}", False, str(exc), "fix the module path or its import"))
    return checks


def report(checks: list[Check], out: TextIO) -> int:
    buffer = io.StringIO()
    for check in checks:
        mark = ("!" if check.warning else "✓") if check.ok else "✗"
        buffer.write(f"{mark} {check.name}: {check.detail}\n")
        if (check.warning or not check.ok) and check.fix:
            buffer.write(f"    fix: {check.fix}\n")
    failed = sum(not c.ok for c in checks)
    buffer.write("All checks passed.\n" if not failed else f"{failed} of {len(checks)} checks failed.\n")
    out.write(buffer.getvalue())
    return 0 if not failed else 1
