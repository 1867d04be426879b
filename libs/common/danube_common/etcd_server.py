"""Run a local etcd (Debian's ``etcd-server``) as a child process on loopback.

Used by ``danube-local`` and the test fixtures. Ports are chosen free unless given; the data
directory is a temporary one unless given. With ``tls=`` (:class:`EtcdServerTls`) it serves
clients over TLS (``https://``), optionally requiring client certificates
(``--client-cert-auth``); peers stay on plaintext loopback.
"""

from __future__ import annotations

import collections
import contextlib
import random
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

#: Where the kernel takes the local ports of outgoing connections (and of ``bind(port 0)``).
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Ports :func:`free_port` chooses from lie in [PICK_FROM, the ephemeral range's start).
PICK_FROM = 15000
#: ... when that leaves at least this many; else it lets the kernel choose (``bind`` to port 0).
MIN_PICK_SPAN = 2000
_handed_out: collections.deque[int] = collections.deque(maxlen=4096)


def ephemeral_range() -> tuple[int, int] | None:
    """The kernel's ephemeral port range (Linux), or None where it cannot be read."""
    try:
        low, high = (int(x) for x in EPHEMERAL_RANGE_FILE.read_text().split()[:2])
    except (OSError, ValueError):
        return None
    return low, high


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now, for a server started next.

    Chosen at random below the kernel's ephemeral range when there is room (Linux: 15000-32767):
    a port from ``bind(port 0)`` comes from the range outgoing connections take their local ports
    from, so any connection opened meanwhile (a test's clients, a download next to it) could
    take it before the server binds it ("address already in use"). Only another server can take
    a port below the range. A port handed out recently by this process is not handed out again.
    """
    rng = ephemeral_range()
    if rng is not None and rng[0] - PICK_FROM >= MIN_PICK_SPAN:
        for _ in range(200):
            port = random.randrange(PICK_FROM, rng[0])
            if port in _handed_out:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue  # a server has it (or a closing connection still holds it)
            _handed_out.append(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port = int(s.getsockname()[1])
    _handed_out.append(port)
    return port


class EtcdNotInstalled(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class EtcdServerTls:
    """TLS of etcd's client port: ``--cert-file``/``--key-file`` (the server certificate must
    name the host clients dial, e.g. 127.0.0.1), ``--trusted-ca-file``, ``--client-cert-auth``.

    The health probe trusts ``ca_file`` and, with ``client_cert_auth``, presents the server's
    own certificate as its client certificate (it needs the clientAuth usage, as etcd itself
    requires in that mode)."""

    cert_file: str | Path
    key_file: str | Path
    ca_file: str | Path
    client_cert_auth: bool = False

    def args(self) -> list[str]:
        out = ["--cert-file", str(self.cert_file), "--key-file", str(self.key_file)]
        out += ["--trusted-ca-file", str(self.ca_file)]
        return out + (["--client-cert-auth"] if self.client_cert_auth else [])

    def probe_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        if self.client_cert_auth:
            ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        return ctx


class EtcdProcess:
    def __init__(
        self,
        *,
        data_dir: str | Path | None = None,
        client_port: int | None = None,
        peer_port: int | None = None,
        host: str = "127.0.0.1",
        binary: str = "etcd",
        log_path: str | Path | None = None,
        tls: EtcdServerTls | None = None,
    ) -> None:
        self.host = host
        self.tls = tls
        self.client_port = client_port or free_port(host)
        self.peer_port = peer_port or free_port(host)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="danube-etcd-")
            data_dir = self._tmp.name
        self.data_dir = Path(data_dir)
        self.binary = binary
        self.log_path = Path(log_path) if log_path else self.data_dir.parent / f"etcd-{self.client_port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def client_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.endpoint}"

    def start(self, timeout_s: float = 15.0) -> EtcdProcess:
        exe = shutil.which(self.binary)
        if exe is None:
            raise EtcdNotInstalled(
                "etcd is not on PATH: install it with `sudo apt-get install etcd-server` "
                "(the quickstart script does this for you)"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        client = self.client_url
        peer = f"http://{self.host}:{self.peer_port}"
        args = [
            exe,
            "--name", "danube-local",
            "--data-dir", str(self.data_dir / "etcd"),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"danube-local={peer}",
            "--heartbeat-interval", "10",
            "--election-timeout", "100",
            "--log-level", "warn",
        ]  # fmt: skip
        if self.tls is not None:
            args += self.tls.args()
        probe = self.tls.probe_context() if self.tls is not None else None
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}; see {self.log_path}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{client}/health", timeout=0.5, context=probe) as r,
            ):
                if b'"health":"true"' in r.read():
                    return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"etcd did not become healthy in {timeout_s}s; see {self.log_path}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> EtcdProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
