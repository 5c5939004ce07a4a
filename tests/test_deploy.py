"""Static checks of docker-compose.yml, deploy/Dockerfile and deploy/k8s (no Docker engine here):
the topology, exactly one beat, valid DREAM_ settings, commands that exist, sane images."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from worker.cli import main
from worker.config import Settings

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
CELERY_APP = ["celery", "-A", "worker.celery_app"]


def setting_names() -> set[str]:
    """Every environment variable Settings reads: DREAM_FIELD and DREAM_SECTION__FIELD."""
    names = set()
    for name, field in Settings.model_fields.items():
        names.add(f"DREAM_{name.upper()}")
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            names |= {f"DREAM_{name.upper()}__{sub.upper()}" for sub in ann.model_fields}
    return names


def env_to_settings(env: dict[str, str]) -> Settings:
    """Build Settings exactly as a container would from these variables (validates values)."""
    nested: dict[str, Any] = {}
    for key, value in env.items():
        path = key.removeprefix("DREAM_").lower().split("__")
        target = nested
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = value
    return Settings(**nested)


def interpolate(value: str) -> str:
    """Compose's ${VAR:-default} with an empty environment (what `docker compose config` does)."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def k8s_docs() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    return docs


def by_kind_name(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in k8s_docs() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


def cli_command_exists(argv: list[str]) -> bool:
    """`dream db upgrade` / `dream api ...` name real commands of the `dream` group."""
    assert argv[0] == "dream"
    cmd: Any = main
    for word in argv[1:]:
        if word.startswith("-"):
            break
        if not hasattr(cmd, "commands"):
            break
        if word not in cmd.commands:
            return False
        cmd = cmd.commands[word]
    return True


# ---- docker-compose -----------------------------------------------------------------------------

def test_compose_has_the_production_topology() -> None:
    """postgres (pgvector image), redis, a one-shot migrate job, N workers, exactly one beat, api,
    mcp; the workers, beat, api and mcp wait for the migration to complete."""
    services = compose()["services"]
    assert set(services) == {"postgres", "redis", "migrate", "worker", "beat", "api", "mcp"}
    assert services["postgres"]["image"].startswith("pgvector/pgvector:pg")
    assert services["redis"]["image"].startswith("redis:")
    assert services["migrate"]["command"] == ["dream", "db", "upgrade"]
    assert services["migrate"]["restart"] == "no"
    worker, beat, api = services["worker"], services["beat"], services["api"]
    assert worker["command"][:4] == [*CELERY_APP, "worker"] and worker["deploy"]["replicas"] >= 2
    assert beat["command"][:4] == [*CELERY_APP, "beat"] and beat["deploy"]["replicas"] == 1
    runs_beat = [n for n, s in services.items() if "beat" in (s.get("command") or [])]
    assert runs_beat == ["beat"]  # no worker runs an embedded beat (-B)
    assert all("-B" not in (s.get("command") or []) for s in services.values())
    assert api["command"][:2] == ["dream", "api"] and "8080:8080" in api["ports"]
    for name in ("worker", "beat", "api", "mcp"):
        dep = services[name]["depends_on"]
        assert dep["migrate"]["condition"] == "service_completed_successfully"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for svc in services.values():  # every depends_on names a service; every volume is declared
        assert set(svc.get("depends_on", {})) <= set(services)
        for vol in svc.get("volumes", []):
            assert vol.split(":")[0] in compose()["volumes"]


def test_compose_environment_is_valid_settings() -> None:
    """Every DREAM_ variable is a real setting (incl. SECTION__FIELD), the values validate, the
    worker consumes the queue the others send to, and the database is PostgreSQL on `postgres`."""
    services = compose()["services"]
    known = setting_names()
    for name in ("migrate", "worker", "beat", "api", "mcp"):
        assert set(services[name]["environment"]) <= known
        # A variable without a value is the shell's, or unset in the container.
        env = {k: interpolate(str(v)) for k, v in services[name]["environment"].items()
               if v is not None}
        env = {k: v for k, v in env.items() if v != ""}
        settings = env_to_settings(env)
        assert settings.database_url.startswith("postgresql://") and "@postgres:" in settings.database_url
        assert settings.broker_url and settings.broker_url.startswith("redis://redis:")
    worker_cmd = services["worker"]["command"]
    queue = worker_cmd[worker_cmd.index("-Q") + 1]
    assert queue == services["worker"]["environment"]["DREAM_CELERY_QUEUE"]


# What choosing a model takes: passed through from the shell running compose (a new user's
# report: only the providers were, so `DREAM_LLM_PROVIDER=openai` stopped every service).
MODEL_SETTINGS = ("DREAM_LLM_BASE_URL", "DREAM_LLM_API_KEY", "DREAM_LLM_MODEL",
                  "DREAM_EMBEDDING_BASE_URL", "DREAM_EMBEDDING_API_KEY", "DREAM_EMBEDDING_MODEL",
                  "DREAM_EMBEDDING_DIMENSIONS")


def test_compose_passes_the_chosen_model_through_to_every_service() -> None:
    """Each model setting has no value in the file (compose passes the shell's value, or leaves
    it unset: an empty string would be refused as a URL, a model name or a number), and a model
    chosen in the shell validates in every app service."""
    services = compose()["services"]
    chosen = {"DREAM_LLM_PROVIDER": "openai", "DREAM_LLM_BASE_URL": "http://ollama:11434/v1",
              "DREAM_LLM_API_KEY": "k", "DREAM_LLM_MODEL": "llama3.1",
              "DREAM_EMBEDDING_PROVIDER": "openai",
              "DREAM_EMBEDDING_BASE_URL": "http://ollama:11434/v1",
              "DREAM_EMBEDDING_API_KEY": "k", "DREAM_EMBEDDING_MODEL": "nomic-embed-text",
              "DREAM_EMBEDDING_DIMENSIONS": "768"}
    for name in ("migrate", "worker", "beat", "api", "mcp"):
        env = services[name]["environment"]
        assert all(k in env and env[k] is None for k in MODEL_SETTINGS), name
        given = {k: chosen.get(k, interpolate(str(v))) for k, v in env.items()
                 if k in chosen or v is not None}
        settings = env_to_settings({k: v for k, v in given.items() if v != ""})
        assert settings.llm_model == "llama3.1" and settings.embedding_dimensions == 768


def test_compose_images_build_from_the_dockerfile_and_commands_exist() -> None:
    """Every app service builds deploy/Dockerfile and runs a command that exists."""
    services = compose()["services"]
    for name in ("migrate", "worker", "beat", "api", "mcp"):
        svc = services[name]
        assert svc["build"]["dockerfile"] == "deploy/Dockerfile"
        assert (ROOT / svc["build"]["context"] / svc["build"]["dockerfile"]).is_file()
        if svc["command"][0] == "dream":
            assert cli_command_exists(svc["command"]), svc["command"]


# ---- Dockerfile --------------------------------------------------------------------------------

def test_dockerfile_is_slim_non_root_and_copies_what_the_code_needs() -> None:
    """python:3.11-slim, `pip install .`, a non-root USER, and migrations/ and prompts/ copied
    where the package looks for them (the code is imported from /app)."""
    text = (ROOT / "deploy" / "Dockerfile").read_text(encoding="utf-8")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert lines[0] == "FROM python:3.11-slim"
    # The project itself, with the extras its roles need (the mcp service runs `dream mcp`).
    installs = [m for ln in lines for m in re.findall(r'\bpip install "?\.(?:\[([a-z,]+)\])?"?(?:\s|$)', ln)]
    assert installs and "mcp" in installs[0].split(",")
    users = [ln.split()[1] for ln in lines if ln.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    copies = [ln.split()[1:] for ln in lines if ln.startswith("COPY ")]
    sources = {src for c in copies for src in c[:-1]}
    # examples/: the scripted model `dream demo` tells the user to run next (its absolute path)
    assert {"worker", "migrations", "prompts", "examples", "pyproject.toml"} <= sources
    for src in sources:
        assert (ROOT / src).exists(), src
    assert "PYTHONPATH=/app" in text and "WORKDIR /app" in text


# ---- Kubernetes --------------------------------------------------------------------------------

def test_k8s_manifests_are_namespace_less_and_complete() -> None:
    """A migrate Job, worker/beat/api Deployments, an api Service, the config map and an example
    secret; no namespace hard-coded; every pod runs as non-root."""
    docs = k8s_docs()
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
    assert kinds == sorted([
        ("ConfigMap", "dream-config"), ("Secret", "dream-secrets"), ("Job", "dream-migrate"),
        ("Deployment", "dream-worker"), ("Deployment", "dream-beat"), ("Deployment", "dream-api"),
        ("Service", "dream-api"), ("Deployment", "dream-mcp"), ("Service", "dream-mcp"),
    ])
    for d in docs:
        assert "namespace" not in d["metadata"]
        if d["kind"] in ("Deployment", "Job"):
            assert d["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_k8s_exactly_one_beat_and_several_workers() -> None:
    """beat: replicas 1 with Recreate (never two schedulers during a rollout); workers ≥ 2."""
    beat = by_kind_name("Deployment", "dream-beat")
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"]["type"] == "Recreate"
    worker = by_kind_name("Deployment", "dream-worker")
    assert worker["spec"]["replicas"] >= 2
    beats = [d["metadata"]["name"] for d in k8s_docs() if d["kind"] in ("Deployment", "Job")
             for c in d["spec"]["template"]["spec"]["containers"] if "beat" in c["command"]]
    assert beats == ["dream-beat"]


@pytest.mark.parametrize("name", ["dream-worker", "dream-beat", "dream-api", "dream-mcp",
                                  "dream-migrate"])
def test_k8s_workloads_run_real_commands_with_valid_config(name: str) -> None:
    """Each workload takes its DREAM_ env from the ConfigMap and the Secret (both defined, every key
    a valid setting, values that validate), its selector matches its pod labels, and its command
    is a real `dream` command or the Celery app."""
    kind = "Job" if name == "dream-migrate" else "Deployment"
    doc = by_kind_name(kind, name)
    pod = doc["spec"]["template"]
    if kind == "Deployment":
        assert doc["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    else:
        assert pod["spec"]["restartPolicy"] in ("OnFailure", "Never")
    (container,) = pod["spec"]["containers"]
    refs = {next(iter(r)): next(iter(r.values()))["name"] for r in container["envFrom"]}
    assert refs == {"configMapRef": "dream-config", "secretRef": "dream-secrets"}
    config = by_kind_name("ConfigMap", "dream-config")["data"]
    secret = by_kind_name("Secret", "dream-secrets")["stringData"]
    env = {**config, **secret}
    assert set(env) <= setting_names(), set(env) - setting_names()
    settings = env_to_settings({k: str(v) for k, v in env.items()})
    assert settings.database_url.startswith("postgresql://")
    cmd = container["command"]
    if cmd[0] == "dream":
        assert cli_command_exists(cmd)
    else:
        assert cmd[:3] == CELERY_APP and cmd[3] in ("worker", "beat")
        if cmd[3] == "worker":
            assert cmd[cmd.index("-Q") + 1] == config["DREAM_CELERY_QUEUE"]
    assert container["image"].startswith("dream-worker")


@pytest.mark.parametrize("name", ["dream-api", "dream-mcp"])
def test_k8s_servers_pause_before_sigterm_and_get_time_to_drain(name: str) -> None:
    """The servers keep serving for a pause after their pod starts terminating (endpoints take
    a moment to drop it; SIGTERM comes after the preStop hook), and the grace period holds that
    pause, DREAM_API_SHUTDOWN_SECONDS for requests in flight and a margin for the dreams the
    server started: Kubernetes' default 30 s would SIGKILL a drain still running."""
    pod = by_kind_name("Deployment", name)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep" and int(command[1]) >= 1
    config = by_kind_name("ConfigMap", "dream-config")["data"]
    secret = by_kind_name("Secret", "dream-secrets")["stringData"]
    drain = env_to_settings({k: str(v) for k, v in {**config, **secret}.items()}
                            ).api_shutdown_seconds
    assert pod["terminationGracePeriodSeconds"] >= int(command[1]) + drain + 10


@pytest.mark.parametrize("name", ["dream-api", "dream-mcp"])
def test_k8s_service_targets_its_pods(name: str) -> None:
    """Each Service selects its own pods and targets the named container port; readiness is
    /healthz (the database too), liveness /livez (the process only: a database outage took
    every pod out of service and then restarted them all, for nothing they could fix)."""
    svc = by_kind_name("Service", name)
    api = by_kind_name("Deployment", name)
    pod = api["spec"]["template"]
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    port_names = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert svc["spec"]["ports"][0]["targetPort"] in port_names
    assert port_names["http"] == int(container["command"][container["command"].index("--port") + 1])
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"


def test_mcp_serves_http_with_scoped_tokens_from_the_secret() -> None:
    """compose and k8s run `dream mcp` over HTTP on the port they publish and probe, and the
    example Secret has the scoped token `dream mcp` needs to start (admin tokens are refused)."""
    from worker.api.auth import parse_tokens

    mcp = compose()["services"]["mcp"]
    cmd = mcp["command"]
    assert cmd[:4] == ["dream", "mcp", "--transport", "http"]
    port = cmd[cmd.index("--port") + 1]
    assert f"{port}:{port}" in mcp["ports"] and f":{port}/healthz" in " ".join(mcp["healthcheck"]["test"])
    (container,) = by_kind_name("Deployment", "dream-mcp")["spec"]["template"]["spec"]["containers"]
    assert container["command"][:4] == ["dream", "mcp", "--transport", "http"]
    secret = by_kind_name("Secret", "dream-secrets")["stringData"]
    assert any(p.scope is not None for _, p in parse_tokens(secret["DREAM_API_TOKENS"]))


def test_api_body_limit_ships_in_compose_and_k8s() -> None:
    """Both deployments set DREAM_API_MAX_BODY_BYTES to a value that validates and stays at or
    below the 1 MiB default (R31: oversized bodies refused before authentication)."""
    compose_env = compose()["services"]["api"]["environment"]
    k8s_env = by_kind_name("ConfigMap", "dream-config")["data"]
    for value in (interpolate(str(compose_env["DREAM_API_MAX_BODY_BYTES"])),
                  str(k8s_env["DREAM_API_MAX_BODY_BYTES"])):
        limit = env_to_settings({"DREAM_API_MAX_BODY_BYTES": value}).api_max_body_bytes
        assert 1024 <= limit <= Settings().api_max_body_bytes
