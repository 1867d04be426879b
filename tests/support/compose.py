"""Run deploy/docker-compose.yml with its test override (and, for the secured stack, the secure
override and its test override: :data:`SECURE_COMPOSE_FILES`), from the tests.

:class:`ComposeStack` renders the two files into one (``compose config``), drops what host
networking forbids (published ports) and what must not happen in a test (builds), starts it,
waits until every service is healthy, and always takes it down with its volumes. The compose
command is ``docker compose`` (v2) when the CLI plugin is there, else Debian's ``docker-compose``
(v1); ``DANUBE_COMPOSE="docker-compose"`` forces one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE_FILES = (DEPLOY / "docker-compose.yml", DEPLOY / "docker-compose.test.yml")
#: The secured stack on the host network: the test override, then the secure override and its
#: own test override (deploy/docker-compose.secure-test.yml says why this order).
SECURE_COMPOSE_FILES = (
    *COMPOSE_FILES,
    DEPLOY / "docker-compose.secure.yml",
    DEPLOY / "docker-compose.secure-test.yml",
)

#: Every port variable of docker-compose.test.yml (``DANUBE_TEST_{NAME}_PORT``): the compose test
#: picks a free loopback port for each; tests/unit/deploy checks the file uses exactly these.
PORT_VARS = (
    "ETCD", "ETCD_PEER", "S3", "LOOKUP", "ADMIN", "LEADER1", "LEADER2",
    "UPLOADER1", "UPLOADER2", "UPLOADER3", "BROKER1", "BROKER2", "BROKER3", "LM1", "LM2",
    *(f"{name}_HTTP" for name in (
        "LOOKUP", "LEADER1", "LEADER2", "UPLOADER1", "UPLOADER2", "UPLOADER3",
        "BROKER1", "BROKER2", "BROKER3", "LM1", "LM2", "PLANNER",
    )),
)  # fmt: skip
#: The port variables docker-compose.secure-test.yml adds (the brokers' internal listeners).
SECURE_PORT_VARS = ("BROKER1_INTERNAL", "BROKER2_INTERNAL", "BROKER3_INTERNAL")


def project_name() -> str:
    """``danube-test-{pid}-{random}``: scripts/compose_test.sh removes what a project whose
    pytest process is gone left behind (after a crash or a timeout), and nothing else."""
    return f"danube-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def compose_command() -> list[str] | None:
    """The compose CLI to use, or None when neither v2 nor v1 is installed."""
    forced = os.environ.get("DANUBE_COMPOSE")
    candidates = [shlex.split(forced)] if forced else [["docker", "compose"], ["docker-compose"]]
    for cmd in candidates:
        try:
            res = subprocess.run([*cmd, "version"], capture_output=True, text=True, timeout=30, check=False)
        except OSError:
            continue
        if res.returncode == 0:
            return cmd
    return None


def render(config: Mapping[str, Any]) -> dict[str, Any]:
    """``compose config`` output made runnable on the host network: services with
    ``network_mode: host`` lose their published ports (Docker refuses them there), every
    service loses ``build`` (the test uses the images built beforehand, never builds), and the
    services the test override puts in a profile (public images it cannot pull: Prometheus,
    Grafana, the collector, Jaeger) are left out, whichever compose version rendered them."""
    out = dict(config)
    services = {}
    for name, svc in config["services"].items():
        if svc.get("profiles"):
            continue
        svc = dict(svc)
        svc.pop("build", None)
        if svc.get("network_mode") == "host":
            svc.pop("ports", None)
        services[name] = svc
    out["services"] = services
    return out


class ComposeError(RuntimeError):
    pass


class ComposeStack:
    def __init__(
        self,
        *,
        project: str,
        env: Mapping[str, str],
        workdir: Path,
        command: Sequence[str],
        files: Sequence[Path] = COMPOSE_FILES,
    ) -> None:
        self.project = project
        self.env = {**os.environ, **env}
        self.workdir = workdir
        self.command = list(command)
        self.files = list(files)
        self.rendered = workdir / "compose.rendered.yml"

    # ---- plumbing
    def _run(self, *args: str, files: Sequence[Path] | None = None, timeout_s: float = 300) -> str:
        fargs = [a for f in (files if files is not None else [self.rendered]) for a in ("-f", str(f))]
        cmd = [*self.command, "-p", self.project, *fargs, *args]
        res = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=self.env, check=False
        )
        if res.returncode != 0:
            raise ComposeError(f"`{shlex.join(cmd)}` exited {res.returncode}:\n{res.stderr[-4000:]}")
        return res.stdout

    def render(self) -> Path:
        config = yaml.safe_load(self._run("config", files=self.files))
        self.rendered.write_text(yaml.safe_dump(render(config), sort_keys=False))
        return self.rendered

    # ---- lifecycle
    def up(self, *, timeout_s: float = 300) -> None:
        """Start every service (compose itself waits for the depends_on health conditions)."""
        self.render()
        self._run("up", "-d", "--no-build", timeout_s=timeout_s)

    def config(self) -> dict[str, Any]:
        """The rendered configuration the stack runs."""
        config: dict[str, Any] = yaml.safe_load(self.rendered.read_text())
        return config

    def services(self) -> list[str]:
        return list(self.config()["services"])

    def command_of(self, service: str) -> list[str]:
        """The service's command as the rendered file gives it (variables substituted)."""
        return [str(arg) for arg in self.config()["services"][service]["command"]]

    def container_id(self, service: str) -> str:
        cid = self._run("ps", "-a", "-q", service).strip()
        if not cid:
            raise ComposeError(f"no container for service {service} in project {self.project}")
        return cid.splitlines()[0]

    def state(self, service: str) -> dict[str, Any]:
        res = subprocess.run(
            ["docker", "inspect", "--format", "{{json .State}}", self.container_id(service)],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        state: dict[str, Any] = json.loads(res.stdout)
        return state

    def one_shot(self) -> list[str]:
        """Services without a health check: jobs that run once and exit (the secure override's
        ``certs``), which the others wait for with ``service_completed_successfully``."""
        return [name for name, svc in self.config()["services"].items() if "healthcheck" not in svc]

    def wait_healthy(self, *, timeout_s: float = 240) -> None:
        """Poll until every service's health check passes (a one-shot service: until it exited
        0); fail at once if one exited (a one-shot one: with another code)."""
        deadline = time.monotonic() + timeout_s
        pending = self.services()
        one_shot = set(self.one_shot())
        while pending:
            for service in list(pending):
                state = self.state(service)
                if service in one_shot and state.get("Status") == "exited" and state.get("ExitCode") == 0:
                    pending.remove(service)
                    continue
                if state.get("Status") in ("exited", "dead"):
                    raise ComposeError(
                        f"service {service} exited with {state.get('ExitCode')}:\n{self.logs(service, tail=60)}"
                    )
                if state.get("Health", {}).get("Status") == "healthy":
                    pending.remove(service)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise ComposeError(f"not healthy within {timeout_s:g}s: {', '.join(pending)}")
            time.sleep(0.5)

    def kill(self, service: str) -> None:
        """``docker kill`` (SIGKILL) the service's container: a crash, no graceful stop."""
        subprocess.run(
            ["docker", "kill", self.container_id(service)], capture_output=True, timeout=60, check=True
        )

    def stop(self, service: str, *, timeout_s: int = 30) -> None:
        """``compose stop``: SIGTERM, the service's graceful shutdown, SIGKILL after ``timeout_s``."""
        self._run("stop", "-t", str(timeout_s), service, timeout_s=timeout_s + 60)

    def run(
        self, service: str, command: Sequence[str], *, timeout_s: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """``compose run --rm --no-deps -T SERVICE COMMAND``: a one-off container of the service
        (its image, environment, volumes and network), removed afterwards; returns the result
        whatever its exit code."""
        cmd = [
            *self.command, "-p", self.project, "-f", str(self.rendered),
            "run", "--rm", "--no-deps", "-T", service, *command,
        ]  # fmt: skip
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=self.env, check=False
        )

    def copy_from(self, service: str, path: str, dest: Path) -> None:
        """``docker cp CONTAINER:path dest`` from the service's container, running or exited
        (its volumes included)."""
        subprocess.run(
            ["docker", "cp", f"{self.container_id(service)}:{path}", str(dest)],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip

    def volume(self, name: str) -> str:
        """The engine's name of the compose file's volume ``name``: ``{project}_{name}``."""
        return f"{self.project}_{name}"

    def logs(self, service: str | None = None, *, tail: int | str = 200) -> str:
        with contextlib.suppress(ComposeError, subprocess.TimeoutExpired):
            return self._run(
                "logs", "--no-color", f"--tail={tail}", *([service] if service else []), timeout_s=60
            )
        return "(no logs)"

    def down(self) -> None:
        """Remove the containers, networks and volumes of this project (never the images)."""
        try:
            self._run("down", "-v", "--remove-orphans", "--timeout", "10", timeout_s=180)
        finally:
            remove_project_leftovers(self.project)


def remove_project_leftovers(project: str) -> None:
    """Remove whatever still carries this compose project's label (after a failed ``down``)."""
    label = f"label=com.docker.compose.project={project}"
    for kind, list_cmd, rm_cmd in (
        ("containers", ["docker", "ps", "-aq", "--filter", label], ["docker", "rm", "-f", "-v"]),
        ("volumes", ["docker", "volume", "ls", "-q", "--filter", label], ["docker", "volume", "rm", "-f"]),
        ("networks", ["docker", "network", "ls", "-q", "--filter", label], ["docker", "network", "rm"]),
    ):
        res = subprocess.run(list_cmd, capture_output=True, text=True, timeout=60, check=False)
        ids = res.stdout.split()
        if ids:
            subprocess.run([*rm_cmd, *ids], capture_output=True, timeout=120, check=False)
            print(f"removed leftover {kind} of {project}: {len(ids)}")
