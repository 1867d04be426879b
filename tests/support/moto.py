"""Run ``moto_server`` (an in-memory S3 endpoint) on a free loopback port.

Mirrors ``danube_common.etcd_server.EtcdProcess``: a sync context manager that starts the
server, polls until it answers, and always stops it (the whole process group) on exit::

    with MotoServer() as moto:
        cfg = S3Config(endpoint_url=moto.endpoint_url, bucket="b", path_style=True, ...)

With ``tls=(cert_file, key_file, ca_file)`` it serves ``https://`` with that certificate
(``moto_server -c/-k``), and the readiness probe trusts ``ca_file`` (local processes only).

By default it is a child process (the binary is looked for next to ``sys.executable``, the venv's
``bin/``, then on PATH). When the run uses containers (``DANUBE_TEST_CONTAINERS=1``, decided in
``tests/support/containers.py``) it is a container of the locally built moto image on the host's
network instead, with the same interface; ``backend=`` forces one or the other.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from danube_common.etcd_server import free_port
from tests.support import containers

#: Credentials moto accepts (it does not check them); any non-empty pair works.
MOTO_ACCESS_KEY_ID = "testing"
MOTO_SECRET_ACCESS_KEY = "testing"
MOTO_REGION = "us-east-1"


class MotoNotInstalled(RuntimeError):
    pass


def moto_binary() -> str:
    beside = Path(sys.executable).parent / "moto_server"
    if beside.exists():
        return str(beside)
    found = shutil.which("moto_server")
    if found is None:
        raise MotoNotInstalled(
            "moto_server is not installed: install the dev extras (`pip install -e .[dev]`, which "
            "brings moto[server]) into the venv that runs the tests"
        )
    return found


class MotoServer:
    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_path: str | Path | None = None,
        backend: containers.Backend | None = None,
        tls: tuple[str | Path, str | Path, str | Path] | None = None,
    ):
        self.backend = containers.backend(backend)
        if tls is not None and self.backend == "containers":
            raise ValueError("MotoServer(tls=...) runs a local moto_server only")
        self.tls = tls
        self._container: containers.MotoContainer | None = None
        self.host = host
        self.port = port or free_port(host)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if log_path is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="danube-moto-")
            log_path = Path(self._tmp.name) / "moto.log"
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    def _answers(self) -> bool:
        # No proxy: this is loopback, whatever the environment says.
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if self.tls is not None:
            ctx = ssl.create_default_context(cafile=str(self.tls[2]))
            handlers.append(urllib.request.HTTPSHandler(context=ctx))
        opener = urllib.request.build_opener(*handlers)
        try:
            with opener.open(f"{self.endpoint_url}/moto-api/data.json", timeout=0.5) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def start(self, timeout_s: float = 30.0) -> MotoServer:
        if self.backend == "containers":
            self._container = containers.MotoContainer(host=self.host, port=self.port).start(timeout_s)
            return self
        exe = moto_binary()
        env = dict(os.environ)
        for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
            env.pop(var, None)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [exe, "-H", self.host, "-p", str(self.port), *self._tls_args()],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own process group: stop() signals the group
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise RuntimeError(f"moto_server exited with {code}; see {self.log_path}")
            if self._answers():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"moto_server did not answer on {self.endpoint_url} in {timeout_s}s")

    def _tls_args(self) -> list[str]:
        return [] if self.tls is None else ["-c", str(self.tls[0]), "-k", str(self.tls[1])]

    def log_tail(self, max_bytes: int = 4000) -> str:
        if self._container is not None:
            return self._container.log_tail(max_bytes)
        try:
            return self.log_path.read_bytes()[-max_bytes:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        container, self._container = self._container, None
        if container is not None:
            container.stop()
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            # Signal the whole group (the server and anything it forked), while its leader is
            # still ours and unreaped, so the group id cannot belong to anyone else.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
