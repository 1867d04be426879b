"""Where the tests' etcd and S3 servers run: local binaries, or containers of locally built images.

The choice is made here, once per run, by :func:`choice`, and logged once:

- ``DANUBE_TEST_CONTAINERS`` unset or ``0`` (the default): local binaries, the fast path —
  etcd from Debian's ``etcd-server`` (:class:`danube_common.etcd_server.EtcdProcess`) and
  ``moto_server`` from the dev extra (:class:`tests.support.moto.MotoServer`);
- ``DANUBE_TEST_CONTAINERS=1``: containers started with testcontainers from the images
  ``scripts/compose_test.sh`` builds (:data:`ETCD_IMAGE`, :data:`MOTO_IMAGE`, both FROM a
  debootstrapped bookworm: nothing is pulled), on the host's network and free loopback ports. If
  no Docker engine answers or an image is missing, the run falls back to the local binaries and
  says why in a WARNING (and in pytest's header); with ``DANUBE_COMPOSE_REQUIRE=1`` (set by
  scripts/compose_test.sh, which runs tests/contract this way) it stops with the reason instead.

:func:`etcd_server` (the ``etcd_server`` fixture of tests/conftest.py) and ``MotoServer`` follow
the choice; both kinds of server have the same interface (``endpoint`` / ``endpoint_url``,
``start``, ``stop``, context manager), and etcd keeps its data across ``stop``/``start`` in
both. tests/integration/test_server_backends.py forces each branch in turn.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn

import pytest

from danube_common.etcd_server import EtcdProcess, free_port

log = logging.getLogger("tests.containers")

#: Built by scripts/compose_test.sh (deploy/test/*.Dockerfile, deploy/Dockerfile).
BASE_IMAGE = "danube-base:bookworm"
ETCD_IMAGE = "danube-test-etcd:bookworm"
MOTO_IMAGE = "danube-test-moto:bookworm"
PROJECT_IMAGE = "danube-py:test"
SERVER_IMAGES = (ETCD_IMAGE, MOTO_IMAGE)

ENV_VAR = "DANUBE_TEST_CONTAINERS"
#: Set by scripts/compose_test.sh when it could not get an engine going: the reason, in words.
UNAVAILABLE_VAR = "DANUBE_COMPOSE_UNAVAILABLE"
#: Set by scripts/compose_test.sh once the engine answers and the images are built: from then
#: on, what needs them and cannot run fails instead of being skipped or falling back (either
#: would hide a broken deployment).
REQUIRE_VAR = "DANUBE_COMPOSE_REQUIRE"
#: Label on every container started here, so a leftover one can be found and removed.
LABEL = "org.danube.test-server"

Backend = Literal["local", "containers"]


@dataclass(frozen=True)
class Choice:
    backend: Backend
    reason: str
    #: Containers were asked for but cannot run here.
    fell_back: bool = False


def engine_problem(timeout_s: float = 20.0) -> str | None:
    """None when a Docker engine answers; otherwise why not, in words a person can act on."""
    if shutil.which("docker") is None:
        return "no docker command on PATH (apt-get install docker.io, or run scripts/compose_test.sh)"
    try:
        res = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"the Docker engine did not answer `docker info` within {timeout_s:g}s"
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["no output"])[-1]
        return (
            f"the Docker engine does not answer ({last}): start dockerd as root, "
            "or let scripts/compose_test.sh install and start it"
        )
    return None


def missing_images(images: tuple[str, ...] | list[str]) -> list[str]:
    """The images of ``images`` that the engine does not have (it must answer)."""
    missing = []
    for image in images:
        res = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{.Id}}", image],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        if res.returncode != 0:
            missing.append(image)
    return missing


def decide(
    env: Mapping[str, str],
    *,
    engine: Any = engine_problem,
    images: Any = missing_images,
) -> Choice:
    """The choice for ``env`` (pure but for the two probes, which are only called when needed)."""
    raw = env.get(ENV_VAR, "").strip().lower()
    if raw in ("", "0", "false", "no"):
        return Choice("local", f"{ENV_VAR} is not set: etcd-server and moto_server as local processes")
    if raw not in ("1", "true", "yes"):
        raise ValueError(
            f"{ENV_VAR}={env[ENV_VAR]!r} is not understood: use 1 (containers) or 0 (local binaries)"
        )
    problem = engine()
    if problem is None:
        missing = images(SERVER_IMAGES)
        if missing:
            problem = (
                f"image(s) {', '.join(missing)} not built (scripts/compose_test.sh --build-only builds them)"
            )
    if problem is not None:
        if env.get(REQUIRE_VAR) == "1":
            raise RuntimeError(f"{ENV_VAR}=1 and {REQUIRE_VAR}=1, but {problem}")
        return Choice("local", f"{ENV_VAR}=1 but {problem}: falling back to local binaries", fell_back=True)
    return Choice("containers", f"{ENV_VAR}=1: etcd and S3 in containers of {', '.join(SERVER_IMAGES)}")


class DockerUnavailableWarning(UserWarning):
    """A test that needs a Docker engine did not run: said in pytest's warnings summary."""


def skip_without_engine(what: str, *, images: Sequence[str] = SERVER_IMAGES) -> None:
    """Return when a Docker engine answers and has ``images``; otherwise skip the test loudly
    (a :class:`DockerUnavailableWarning` plus the skip reason, both naming what failed), or
    fail it under ``DANUBE_COMPOSE_REQUIRE=1``."""
    problem = os.environ.get(UNAVAILABLE_VAR) or engine_problem()
    if problem is None:
        missing = missing_images(list(images))
        if missing:
            problem = f"image(s) not built: {', '.join(missing)}"
    if problem is not None:
        not_run(what, problem)


def not_run(what: str, problem: str) -> NoReturn:
    msg = f"{what} not run: {problem}"
    if os.environ.get(REQUIRE_VAR) == "1":
        pytest.fail(f"{msg} ({REQUIRE_VAR}=1)", pytrace=False)
    warnings.warn(DockerUnavailableWarning(msg), stacklevel=3)
    pytest.skip(f"{msg}; scripts/compose_test.sh installs Docker, starts the engine and builds the images")


@functools.cache
def choice() -> Choice:
    """This run's choice, decided and logged once."""
    made = decide(os.environ)
    level = logging.WARNING if made.fell_back else logging.INFO
    log.log(level, "test servers: %s (%s)", made.backend, made.reason)
    if made.fell_back:  # also in pytest's warnings summary, which -q does not hide
        warnings.warn(DockerUnavailableWarning(f"test servers: {made.reason}"), stacklevel=2)
    return made


def backend(requested: Backend | None = None) -> Backend:
    return requested or choice().backend


# ---- containers ------------------------------------------------------------------------------


def _docker_container(image: str, command: list[str], *, user: bool = True) -> Any:
    """A testcontainers container on the host's network; Ryuk (a pulled image) stays off."""
    from testcontainers.core.config import testcontainers_config
    from testcontainers.core.container import DockerContainer

    # The reaper is an image from a registry, which this machine cannot pull; every container
    # started here is removed by its owner's stop() instead (and carries LABEL).
    testcontainers_config.ryuk_disabled = True
    kwargs: dict[str, Any] = {"network_mode": "host", "labels": {LABEL: str(os.getpid())}}
    if user:
        kwargs["user"] = f"{os.getuid()}:{os.getgid()}"
    return DockerContainer(image).with_command(command).with_kwargs(**kwargs)


def _remove(container: Any) -> None:
    with contextlib.suppress(Exception):  # already gone: nothing to clean up
        container.stop(force=True, delete_volume=True)


def _container_logs(container: Any, max_bytes: int = 4000) -> str:
    try:
        out, err = container.get_logs()
    except Exception as exc:  # the container is gone: say so instead of failing the caller
        return f"(no logs: {type(exc).__name__})"
    return (out + err)[-max_bytes:].decode(errors="replace")


def _answers(url: str, needle: bytes | None = None) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy
    try:
        with opener.open(url, timeout=0.5) as r:
            return r.status == 200 and (needle is None or needle in r.read())
    except OSError:
        return False


class EtcdContainer:
    """etcd in a container of :data:`ETCD_IMAGE`; the interface of ``EtcdProcess``.

    The data directory is a host directory mounted into the container, so ``stop()`` then
    ``start()`` is an etcd restart that keeps its data; ``close()`` (or leaving the ``with``
    block) also deletes the directory.
    """

    def __init__(
        self, *, host: str = "127.0.0.1", client_port: int | None = None, peer_port: int | None = None
    ):
        self.host = host
        self.client_port = client_port or free_port(host)
        self.peer_port = peer_port or free_port(host)
        self._tmp = tempfile.TemporaryDirectory(prefix="danube-etcd-container-")
        self.data_dir = Path(self._tmp.name)
        self._container: Any = None

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.client_port}"

    def start(self, timeout_s: float = 30.0) -> EtcdContainer:
        client = f"http://{self.host}:{self.client_port}"
        peer = f"http://{self.host}:{self.peer_port}"
        command = [
            "etcd",
            "--name", "danube-test",
            "--data-dir", "/data/etcd",
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"danube-test={peer}",
            "--heartbeat-interval", "10",
            "--election-timeout", "100",
            "--log-level", "warn",
        ]  # fmt: skip
        self._container = (
            _docker_container(ETCD_IMAGE, command)
            .with_volume_mapping(str(self.data_dir), "/data", "rw")
            .start()
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if _answers(f"{client}/health", b'"health":"true"'):
                return self
            time.sleep(0.05)
        logs = _container_logs(self._container)
        self.stop()
        raise RuntimeError(f"etcd in a container did not become healthy in {timeout_s}s:\n{logs}")

    def stop(self) -> None:
        container, self._container = self._container, None
        if container is not None:
            _remove(container)

    def close(self) -> None:
        self.stop()
        self._tmp.cleanup()

    def __enter__(self) -> EtcdContainer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class MotoContainer:
    """moto_server in a container of :data:`MOTO_IMAGE`, for ``MotoServer``'s containers branch."""

    def __init__(self, *, host: str, port: int):
        self.host = host
        self.port = port
        self._container: Any = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> MotoContainer:
        command = ["moto_server", "-H", self.host, "-p", str(self.port)]
        self._container = _docker_container(MOTO_IMAGE, command).start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if _answers(f"{self.endpoint_url}/moto-api/data.json"):
                return self
            time.sleep(0.05)
        logs = _container_logs(self._container)
        self.stop()
        raise RuntimeError(f"moto_server in a container did not answer in {timeout_s}s:\n{logs}")

    def log_tail(self, max_bytes: int = 4000) -> str:
        return _container_logs(self._container, max_bytes) if self._container is not None else ""

    def stop(self) -> None:
        container, self._container = self._container, None
        if container is not None:
            _remove(container)


@contextlib.contextmanager
def etcd_server(requested: Backend | None = None) -> Any:
    """A started etcd (process or container, as chosen), stopped on exit."""
    if backend(requested) == "containers":
        with EtcdContainer() as server:
            yield server
        return
    if shutil.which("etcd") is None:
        raise RuntimeError(
            "etcd is not installed: run ./test.sh (it installs etcd-server) or apt-get install etcd-server"
        )
    # A data directory of our own (EtcdProcess deletes a temporary one it made at stop()), so
    # that stop() then start() keeps the data, as with the container.
    with (
        tempfile.TemporaryDirectory(prefix="danube-etcd-") as data_dir,
        EtcdProcess(data_dir=data_dir) as proc,
    ):
        yield proc
