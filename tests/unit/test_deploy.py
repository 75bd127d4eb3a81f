"""The deploy files cannot drift from the code: every command, port, environment variable,
probe path and mounted file they name is checked against the CLI, the settings and the routes."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from core import policy_file
from core.approval_requirements import Requirement
from core.config import Settings
from core.graphs import read_langgraph_json
from signoff.cli import build_parser
from tests.support.paths import ROOT

DEPLOY = ROOT / "deploy"
SETTINGS_ENV = {str(f.validation_alias.choices[0]) for f in Settings.model_fields.values()}  # type: ignore[union-attr]
PROBES = {"/healthz", "/readyz"}


def commands() -> set[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return set(action.choices)  # type: ignore[arg-type]


def rendered_k8s() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "make test installs kubectl (Debian's kubernetes-client) to render deploy/k8s"
    out = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / "k8s")], capture_output=True, text=True, check=True, timeout=60
    )
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def check_env(env: dict[str, str], where: str) -> None:
    unknown = set(env) - SETTINGS_ENV - {"PYTHONUNBUFFERED"}
    assert not unknown, f"{where}: {sorted(unknown)} are not settings"
    given = {k: v for k, v in env.items() if v and "$" not in v and k != "SIGNOFF_CONSUMER"}
    Settings.from_env({**given, "SIGNOFF_POLICY": str(DEPLOY / "signoff.toml")})  # each value makes sense


def test_kustomize_renders_and_every_container_matches_the_code():
    docs = rendered_k8s()
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        "ConfigMap",
        "ConfigMap",
        "Deployment",
        "Deployment",
        "PodDisruptionBudget",
        "PodDisruptionBudget",
        "Secret",
        "Service",
    ]
    config_maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    secret = next(d for d in docs if d["kind"] == "Secret")
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    assert set(deployments) == {"signoff-bot", "signoff-runner"}
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["args"][0] in commands(), f"{name}: no `signoff {container['args'][0]}`"
        env = {e["name"]: e.get("value", "") for e in container["env"]}
        check_env({**env, **dict.fromkeys(secret["stringData"], "")}, name)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        port_setting = "PORT" if container["args"][0] == "bot" else "SIGNOFF_RUNNER_PORT"
        assert set(ports.values()) == {int(env[port_setting])}, (
            f"{name}: probes on another port than it serves"
        )
        for probe in ("readinessProbe", "livenessProbe"):
            http = container[probe]["httpGet"]
            assert http["path"] in PROBES and http["port"] in ports, (name, probe, http)
        assert (
            container[probe]["httpGet"]["path"] == "/healthz"
            and container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        )
        assert pod["securityContext"]["runAsNonRoot"] and pod["terminationGracePeriodSeconds"] >= 30
        # the process stops by itself (its started work finished or cut off) before the kill
        grace = policy_file.seconds(env.get("SIGNOFF_STOP_GRACE") or Settings().stop_grace) or 0
        assert grace < pod["terminationGracePeriodSeconds"], f"{name}: SIGNOFF_STOP_GRACE outlasts the pod's"
        assert container["resources"]["requests"]
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v["configMap"]["name"] for v in pod["volumes"]}
        for setting in ("SIGNOFF_POLICY", "SIGNOFF_GRAPHS_FILE"):
            path = Path(env[setting])
            data = config_maps[volumes[mounts[str(path.parent)]]]["data"]
            assert path.name in data, f"{name}: {setting}={path} is not in its ConfigMap"
    policy = next(d for n, d in config_maps.items() if n.startswith("signoff-policy"))["data"]["signoff.toml"]
    assert policy_file.PolicyFile.model_validate(tomllib.loads(policy)).rules
    service = next(d for d in docs if d["kind"] == "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    budgets = [d["spec"]["selector"]["matchLabels"] for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert budgets == [d["spec"]["selector"]["matchLabels"] for d in deployments.values()]


def test_compose_runs_the_whole_stack_as_the_code_expects():
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"redis", "bot", "runner"}
    assert "--appendonly" in services["redis"]["command"] and "noeviction" in services["redis"]["command"]
    assert services["runner"]["deploy"]["replicas"] == 2
    for name in ("bot", "runner"):
        service = services[name]
        assert service["command"][0] in commands()
        env = {k: str(v) for k, v in service["environment"].items()}
        check_env(env, name)
        port = env["PORT" if name == "bot" else "SIGNOFF_RUNNER_PORT"]
        grace = policy_file.seconds(env.get("SIGNOFF_STOP_GRACE") or Settings().stop_grace) or 0
        assert grace < (policy_file.seconds(service["stop_grace_period"]) or 10), f"{name}: stop grace"
        probe = " ".join(service["healthcheck"]["test"])
        assert f"127.0.0.1:{port}/readyz" in probe
        mounts = {v.rsplit(":", 2)[1]: v.split(":", 1)[0] for v in service["volumes"]}
        assert (
            str(Path(env["SIGNOFF_POLICY"])) in mounts
            and str(Path(env["SIGNOFF_GRAPHS_FILE"]).parent) in mounts
        )
    # the defaults mounted when nothing is set: the example policy and the demo project
    defaults = [re.search(r":-([^}]+)}", v).group(1) for v in services["bot"]["volumes"]]  # type: ignore[union-attr]
    policy_file.load(DEPLOY / defaults[0])
    assert read_langgraph_json(DEPLOY / defaults[1] / "langgraph.json") == {
        "demo": "signoff_demo.agent:build_demo_agent"
    }


def test_the_image_is_small_non_root_pinned_and_runs_signoff():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["signoff"]' in dockerfile and re.search(r"^USER 10001$", dockerfile, re.M)
    assert "-c constraints.txt" in dockerfile and "-slim" in dockerfile
    copied = set(re.findall(r"^COPY (\w+) \./\1$", dockerfile, re.M))
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert copied == {name.split(".")[0] for name in packages}  # every package the project installs
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "tests"} <= set(ignored)


@pytest.mark.parametrize("line", (ROOT / "Procfile").read_text().splitlines())
def test_each_procfile_line_runs_a_signoff_command(line):
    command = re.search(r"signoff (\w+)", line)
    assert command and command.group(1) in commands()


def test_the_deploy_policy_shows_every_key_a_policy_file_takes():
    text = (DEPLOY / "signoff.toml").read_text()
    loaded = tomllib.loads(text)
    policy_file.PolicyFile.model_validate(loaded)  # (it loads, as the processes load it)
    shown = {f"defaults.{k}" for k in loaded["defaults"]} | {f"questions.{k}" for k in loaded["questions"]}
    shown |= {f"rules.{k}" for rule in loaded["rules"] for k in rule}
    shown |= {f"require.{k}" for rule in loaded["rules"] for entry in rule.get("require", ()) for k in entry}
    models = {
        "defaults": policy_file.Defaults,
        "questions": policy_file.Questions,
        "rules": policy_file.Rule,
        "require": Requirement,
    }
    every = {f"{where}.{key}" for where, model in models.items() for key in model.model_fields}
    assert every - shown == set()
