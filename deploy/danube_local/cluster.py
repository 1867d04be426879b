"""LocalCluster: etcd, the leader service, one lookup, N brokers and the load managers as child
processes on this machine.

Shared by ``danube-local up`` and the test-suite. Synchronous on purpose: it only starts,
watches and stops processes. Each service is started as ``python -m danube_<service>`` (so
no console script needs to be on PATH) in its own session, with its output in
``{workdir}/logs/{name}.log``. A service reports that it serves by writing a JSON ready
file; ``start`` waits for every one and, if any service dies or is late, stops everything
and raises with the tail of that service's log.

Layout of the work directory::

    {workdir}/data/etcd/        etcd's data (only when we run etcd ourselves)
    {workdir}/logs/*.log        one log per process (appended across restarts)
    {workdir}/run/*.json        ready files
    {workdir}/secure/           CA, certificates, JWT secret and tokens (only with ``secure``)

With ``secure=True`` (:attr:`LocalCluster.security`, a
:class:`~danube_local.secure_mode.SecureMode`), every service serves TLS,
requires client certificates (mTLS, which is how services recognise each other) and checks a
bearer token and RBAC on every call; the demo's role bindings are written to etcd before the
services start, so every service sees them from its first call.
"""

from __future__ import annotations

import atexit
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from danube_common.etcd_server import EtcdNotInstalled, EtcdProcess
from danube_local.procs import (
    StopOutcome,
    loopback_no_proxy,
    port_in_use,
    read_ready_file,
    signal_group,
    stop_processes,
    tail,
)
from danube_local.secure_mode import SecureMode, https

__all__ = ["ClusterError", "EtcdNotInstalled", "LocalCluster", "ServiceFailed", "ServiceProcess"]

#: How long a service gets to stop after SIGTERM before it is killed (a broker's lame duck
#: takes up to its lame_duck_timeout_s, 10 s by default, before its shutdown proper).
STOP_GRACE_S = 20.0
READY_POLL_INTERVAL_S = 0.05
LOG_TAIL_LINES = 40

Progress = Callable[[str], None]


class ClusterError(RuntimeError):
    """The local cluster could not be started or driven as asked."""


class ServiceFailed(ClusterError):
    """A service died or did not become ready; carries the tail of its log."""

    def __init__(self, message: str, *, service: str, log_path: Path, log_tail: str) -> None:
        text = f"{message}\n--- last lines of {log_path} ---\n{log_tail or '(log is empty)'}"
        super().__init__(text)
        self.service = service
        self.log_path = log_path
        self.log_tail = log_tail


#: Flags of a service's listeners, with the ready file's key of the address each got.
_LISTEN_FLAGS = (("--listen", "addr"), ("--admin-listen", "admin_addr"), ("--http-listen", "http_addr"))


def pinned_ports(argv: list[str], info: dict[str, Any]) -> list[str]:
    """``argv`` with each listener asked on port 0 set to the port its ready file ``info``
    reported (the same host): a restart keeps the addresses the rest of the cluster was given."""
    out = list(argv)
    for flag, key in _LISTEN_FLAGS:
        got = str(info.get(key) or "")
        if flag in out and got:
            i = out.index(flag) + 1
            host, _, port = out[i].rpartition(":")
            if port == "0":
                out[i] = f"{host}:{got.rpartition(':')[2]}"
    return out


@dataclass(eq=False)
class ServiceProcess:
    """One service process and what its ready file told us."""

    kind: str  # "lookup" | "broker" | "leader" | "load_manager" | "wal_uploader"
    name: str  # "lookup", "broker-1", ...
    argv: list[str]
    log_path: Path
    ready_file: Path
    broker_id: str | None = None
    #: Environment added for this process only (e.g. a broker's uploader address).
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    #: The ready file's JSON (empty until the service is ready).
    info: dict[str, Any] = field(default_factory=dict)
    #: Serves TLS (its URLs are ``https://``).
    tls: bool = False
    #: Stopped through the cluster (stop_broker, stop): a supervisor leaves it stopped.
    stopped: bool = False

    @property
    def ready(self) -> bool:
        return bool(self.info)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _info(self, key: str) -> str:
        if not self.info:
            raise ClusterError(f"{self.name} is not ready yet (no ready file read)")
        value = self.info.get(key)
        if not value:
            raise ClusterError(f"{self.name}'s ready file has no {key!r}: {self.info}")
        return str(value)

    @property
    def addr(self) -> str:
        """``host:port`` the service listens on (from its ready file)."""
        return self._info("addr")

    @property
    def url(self) -> str:
        url = self._info("url")
        return https(url) if self.tls else url

    @property
    def admin_addr(self) -> str:
        return self._info("admin_addr")

    @property
    def admin_url(self) -> str:
        url = self._info("admin_url")
        return https(url) if self.tls else url

    @property
    def port(self) -> int:
        return int(self.addr.rsplit(":", 1)[1])

    @property
    def http_url(self) -> str:
        """The HTTP endpoint (``/metrics``; the lookup's web console), "" if it serves none."""
        return str(self.info.get("http_url") or "")

    @property
    def metrics_url(self) -> str:
        return str(self.info.get("metrics_url") or "")

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise ClusterError(f"{self.name} was never started")
        return self.proc.pid

    @property
    def label(self) -> str:
        if self.kind == "broker":
            return f"broker {self.broker_id}"
        return self.name if self.kind in ("leader", "load_manager", "wal_uploader", "planner") else self.kind


class LocalCluster:
    """etcd + lookup + brokers on one machine; see the module docstring."""

    def __init__(
        self,
        *,
        brokers: int = 1,
        leaders: int = 0,
        load_managers: int = 0,
        uploaders: bool = False,
        object_store: dict[str, str] | None = None,
        planner: str | None = None,
        workdir: Path,
        cluster: str = "danube",
        etcd_endpoint: str | None = None,
        lookup_port: int = 0,
        admin_port: int = 0,
        console_port: int = 0,
        broker_ports: list[int] | None = None,
        host: str = "127.0.0.1",
        log_level: str = "INFO",
        extra_env: dict[str, str] | None = None,
        python: str = sys.executable,
        lookup_config: Path | None = None,
        broker_config: Path | None = None,
        progress: Progress | None = None,
        stop_grace_s: float = STOP_GRACE_S,
        secure: bool = False,
    ) -> None:
        if brokers < 0:
            raise ClusterError(f"brokers must be >= 0, got {brokers}")
        if broker_ports is not None and len(broker_ports) > brokers:
            raise ClusterError(f"{len(broker_ports)} broker ports given for {brokers} broker(s)")
        if leaders < 0 or load_managers < 0:
            raise ClusterError("leaders and load_managers must be >= 0")
        if load_managers and not leaders:
            raise ClusterError("load managers campaign through the leader service: start at least one leader")
        self.n_brokers = brokers
        self.n_leaders = leaders
        self.n_load_managers = load_managers
        #: One WAL uploader per broker, all sharing the local object store ``objects_dir``.
        self.with_uploaders = uploaders
        #: Object store settings instead of ``objects_dir``, as ObjectStoreConfig fields in
        #: environment form (``{"BACKEND": "s3", "S3__ENDPOINT_URL": ..., "S3__BUCKET": ...}``),
        #: given to every broker and uploader.
        self.object_store = dict(object_store or {})
        #: Run the Spark planner (danube-planner) with this engine ("spark" or "python"); None: no planner.
        self.planner_engine = planner
        self.planner: ServiceProcess | None = None
        self.workdir = Path(workdir).resolve()
        self.cluster = cluster
        self.host = host
        self.lookup_port = lookup_port
        self.admin_port = admin_port
        #: The lookup's HTTP endpoint: the web console (and its /metrics). Every other service's
        #: HTTP endpoint (/metrics) gets a free port.
        self.console_port = console_port
        self.broker_ports = list(broker_ports or [])
        self.log_level = log_level
        self.extra_env = dict(extra_env or {})
        self.python = python
        self.lookup_config = Path(lookup_config).resolve() if lookup_config else None
        self.broker_config = Path(broker_config).resolve() if broker_config else None
        self._progress = progress or (lambda _msg: None)
        self.stop_grace_s = stop_grace_s
        #: TLS, mTLS, tokens and RBAC for every service (None: plaintext, no auth).
        self.security = SecureMode(self.workdir, host=host) if secure else None
        self._given_etcd = etcd_endpoint
        self._etcd: EtcdProcess | None = None
        self._lookup: ServiceProcess | None = None
        self.brokers: list[ServiceProcess] = []
        self.leaders: list[ServiceProcess] = []
        self.load_managers: list[ServiceProcess] = []
        #: broker id -> its WAL uploader.
        self.uploaders: dict[str, ServiceProcess] = {}
        #: Extra flags for every load manager (e.g. a short --leadership-ttl in tests).
        self.load_manager_flags: list[str] = []
        #: Extra flags for every leader service replica.
        self.leader_flags: list[str] = []
        #: etcd endpoint per broker id, instead of the cluster's (e.g. a fault-injecting proxy).
        self.broker_etcd_endpoints: dict[str, str] = {}
        #: How signals reach a service's process group (replaced by fakes in unit tests).
        self._send_signal: Callable[[Any, int], None] = signal_group
        self._lock = threading.RLock()
        self._started = False
        self._stopped = False

    # ------------------------------------------------------------------ paths and commands
    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    @property
    def run_dir(self) -> Path:
        return self.workdir / "run"

    @property
    def etcd_data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def objects_dir(self) -> Path:
        """The local object store every broker and uploader share (reliable topics' history)."""
        return self.workdir / "objects"

    def broker_data_dir(self, broker_id: str) -> Path:
        return self.workdir / "data" / f"broker-{broker_id}"

    @property
    def etcd_endpoint(self) -> str:
        if self._given_etcd:
            return self._given_etcd
        if self._etcd is None:
            raise ClusterError("etcd is not started yet")
        return self._etcd.endpoint

    @property
    def etcd(self) -> EtcdProcess | None:
        """Our own etcd process (None when using an existing etcd)."""
        return self._etcd

    @property
    def lookup(self) -> ServiceProcess:
        if self._lookup is None:
            raise ClusterError("the cluster is not started")
        return self._lookup

    @property
    def service_url(self) -> str:
        return self.lookup.url

    @property
    def admin_url(self) -> str:
        return self.lookup.admin_url

    def _common_flags(
        self, ready_file: Path, *, etcd_endpoint: str | None = None, http_port: int = 0
    ) -> list[str]:
        return [
            "--etcd-endpoints", etcd_endpoint or self.etcd_endpoint,
            "--cluster", self.cluster,
            "--ready-file", str(ready_file),
            "--log-level", self.log_level,
            "--http-listen", f"{self.host}:{http_port}",
        ]  # fmt: skip

    def lookup_argv(self) -> list[str]:
        ready = self.run_dir / "lookup.json"
        argv = [
            self.python, "-m", "danube_lookup",
            "--listen", f"{self.host}:{self.lookup_port}",
            "--admin-listen", f"{self.host}:{self.admin_port}",
            *self._common_flags(ready, http_port=self.console_port),
        ]  # fmt: skip
        if self.lookup_config:
            argv += ["--config", str(self.lookup_config)]
        return argv

    def broker_argv(self, broker_id: str, port: int) -> list[str]:
        ready = self.run_dir / f"broker-{broker_id}.json"
        argv = [
            self.python, "-m", "danube_broker",
            "--broker-id", broker_id,
            "--listen", f"{self.host}:{port}",
            "--advertised-host", self.host,
            *self._common_flags(ready, etcd_endpoint=self.broker_etcd_endpoints.get(broker_id)),
        ]  # fmt: skip
        if self.security is not None:  # services call brokers there, with their certificates
            argv += ["--internal-listen", f"{self.host}:0"]
        if self.broker_config:
            argv += ["--config", str(self.broker_config)]
        return argv

    @property
    def leader_endpoints(self) -> str:
        """Comma-separated addresses of the leader service replicas (once started)."""
        return ",".join(svc.addr for svc in self.leaders)

    def leader_argv(self, index: int) -> list[str]:
        ready = self.run_dir / f"leader-{index}.json"
        return [
            self.python, "-m", "danube_leader",
            "--listen", f"{self.host}:0",
            *self._common_flags(ready),
            *self.leader_flags,
        ]  # fmt: skip

    def load_manager_argv(self, index: int) -> list[str]:
        ready = self.run_dir / f"load-manager-{index}.json"
        return [
            self.python, "-m", "danube_load_manager",
            "--candidate-id", f"lm-{index}",
            "--listen", f"{self.host}:0",
            "--leader-endpoints", self.leader_endpoints,
            *self._common_flags(ready),
            *self.load_manager_flags,
        ]  # fmt: skip

    def uploader_argv(self, broker_id: str) -> list[str]:
        ready = self.run_dir / f"wal-uploader-{broker_id}.json"
        return [
            self.python, "-m", "danube_wal_uploader",
            "--broker-id", broker_id,
            "--data-dir", str(self.broker_data_dir(broker_id)),
            *(() if self.object_store else ("--object-store-dir", str(self.objects_dir))),
            "--listen", f"{self.host}:0",
            *self._common_flags(ready),
        ]  # fmt: skip

    def _uploader_service(self, broker_id: str) -> ServiceProcess:
        name = f"wal-uploader-{broker_id}"
        return ServiceProcess(
            kind="wal_uploader",
            name=name,
            argv=self.uploader_argv(broker_id),
            log_path=self.log_dir / f"{name}.log",
            ready_file=self.run_dir / f"{name}.json",
            broker_id=broker_id,
            env={f"DANUBE_WAL_UPLOADER_OBJECT_STORE__{k}": v for k, v in self.object_store.items()},
        )

    def _storage_env(self, broker_id: str) -> dict[str, str]:
        """A broker's object-store settings: the shared local store and its uploader's address."""
        uploader = self.uploaders.get(broker_id)
        if uploader is None:
            return {}
        store = self.object_store or {"BACKEND": "local", "LOCAL_DIR": str(self.objects_dir)}
        return {
            "DANUBE_BROKER_DATA_DIR": str(self.broker_data_dir(broker_id)),
            "DANUBE_BROKER_UPLOADER_ADDR": uploader.addr,
            **{f"DANUBE_BROKER_OBJECT_STORE__{k}": v for k, v in store.items()},
        }

    def _start_uploader(self, broker_id: str, deadline: float, timeout_s: float) -> None:
        svc = self._uploader_service(broker_id)
        self.uploaders[broker_id] = svc
        self._spawn(svc)
        self._wait_ready([svc], deadline, timeout_s)

    def planner_argv(self) -> list[str]:
        ready = self.run_dir / "planner.json"
        return [
            self.python, "-m", "danube_planner",
            "--engine", self.planner_engine or "spark",
            "--candidate-id", "planner-1",
            "--leader-endpoints", self.leader_endpoints,
            "--history-dir", str(self.objects_dir),
            *self._common_flags(ready),
        ]  # fmt: skip

    def _indexed_service(self, kind: str, index: int, argv: list[str]) -> ServiceProcess:
        name = f"{kind.replace('_', '-')}-{index}"
        return ServiceProcess(
            kind=kind,
            name=name,
            argv=argv,
            log_path=self.log_dir / f"{name}.log",
            ready_file=self.run_dir / f"{name}.json",
        )

    def child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.extra_env)
        env["PYTHONUNBUFFERED"] = "1"
        loopback_no_proxy(env, ["127.0.0.1", "localhost", self.host])
        return env

    def _lookup_service(self) -> ServiceProcess:
        return ServiceProcess(
            kind="lookup",
            name="lookup",
            argv=self.lookup_argv(),
            log_path=self.log_dir / "lookup.log",
            ready_file=self.run_dir / "lookup.json",
        )

    def _broker_service(self, broker_id: str, port: int) -> ServiceProcess:
        return ServiceProcess(
            kind="broker",
            name=f"broker-{broker_id}",
            argv=self.broker_argv(broker_id, port),
            log_path=self.log_dir / f"broker-{broker_id}.log",
            ready_file=self.run_dir / f"broker-{broker_id}.json",
            broker_id=broker_id,
            env=self._storage_env(broker_id),
        )

    def _broker_port(self, index: int) -> int:
        return self.broker_ports[index] if index < len(self.broker_ports) else 0

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout_s: float = 30.0) -> LocalCluster:
        """Start etcd (unless given), then lookup and brokers at once; wait until all are ready."""
        with self._lock:
            if self._stopped:
                raise ClusterError("this LocalCluster was stopped; create a new one")
            if self._started:
                raise ClusterError("this LocalCluster is already started")
            self._started = True
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout_s
        try:
            self._check_ports()
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._prepare_security_files()
            self._start_etcd(timeout_s)
            self._grant_demo_roles(deadline)
            # The leader service first: load managers need its (free-port) addresses.
            self.leaders = [
                self._indexed_service("leader", i + 1, self.leader_argv(i + 1)) for i in range(self.n_leaders)
            ]
            ids = [str(i + 1) for i in range(self.n_brokers)]
            uploaders = [self._uploader_service(b) for b in ids] if self.with_uploaders else []
            self.uploaders = {u.broker_id or "": u for u in uploaders}
            for svc in [*self.leaders, *uploaders]:
                self._spawn(svc)
            # Brokers need their uploader's (free-port) address.
            self._wait_ready([*self.leaders, *uploaders], deadline, timeout_s)
            self._lookup = self._lookup_service()
            self.brokers = [
                self._broker_service(str(i + 1), self._broker_port(i)) for i in range(self.n_brokers)
            ]
            self.load_managers = [
                self._indexed_service("load_manager", i + 1, self.load_manager_argv(i + 1))
                for i in range(self.n_load_managers)
            ]
            services = [self._lookup, *self.brokers, *self.load_managers]
            if self.planner_engine:
                if not self.leaders:
                    raise ClusterError(
                        "the planner campaigns through the leader service: start at least one leader"
                    )
                self.planner = ServiceProcess(
                    kind="planner",
                    name="planner",
                    argv=self.planner_argv(),
                    log_path=self.log_dir / "planner.log",
                    ready_file=self.run_dir / "planner.json",
                )
                services.append(self.planner)
            for svc in services:
                self._spawn(svc)
            self._wait_ready(services, deadline, timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _check_ports(self) -> None:
        wanted = [("lookup", self.lookup_port), ("admin", self.admin_port), ("console", self.console_port)]
        wanted += [(f"broker {i + 1}", p) for i, p in enumerate(self.broker_ports)]
        busy = [f"{what} port {port}" for what, port in wanted if port_in_use(self.host, port)]
        if busy:
            raise ClusterError(
                f"already in use on {self.host}: {', '.join(busy)}. Stop whatever listens there "
                "(another `danube-local up`?) or choose other ports (0 = any free port)."
            )

    def _start_etcd(self, timeout_s: float) -> None:
        if self._given_etcd:
            host, _, port = self._given_etcd.removeprefix("http://").rpartition(":")
            try:
                with socket.create_connection((host or "127.0.0.1", int(port)), timeout=2.0):
                    pass
            except (OSError, ValueError) as exc:
                raise ClusterError(
                    f"cannot reach etcd at {self._given_etcd} ({exc}); start it or drop --etcd-endpoint "
                    "to let danube-local run its own"
                ) from exc
            self._progress(f"etcd      {self._given_etcd} (existing)")
            return
        tls = None
        if self.security is not None:
            self.security.etcd_tls = True
            tls = self.security.etcd_server_tls()
        self._etcd = EtcdProcess(
            data_dir=self.etcd_data_dir, host=self.host, log_path=self.log_dir / "etcd.log", tls=tls
        )
        self._etcd.start(timeout_s=min(timeout_s, 15.0))
        pid = self._etcd.proc.pid if self._etcd.proc else "?"
        self._progress(f"etcd      {self._etcd.endpoint}  (pid {pid})")

    def _prepare_security_files(self) -> None:
        """With ``secure``: the CA, secret, client certificate and tokens (before etcd: it
        serves TLS with a certificate of that CA)."""
        if self.security is None:
            return
        try:
            self.security.prepare()
        except (OSError, ValueError) as exc:
            raise ClusterError(
                f"cannot make the secure cluster's files in {self.security.directory}: {exc}"
            ) from exc

    def _grant_demo_roles(self, deadline: float) -> None:
        """With ``secure``: the demo's bindings in etcd (before any service loads its RBAC view)."""
        if self.security is None:
            return
        timeout_s = max(1.0, deadline - time.monotonic())
        try:
            self.security.grant_demo_roles_sync(self.etcd_endpoint, self.cluster, timeout_s=timeout_s)
        except Exception as exc:
            raise ClusterError(f"cannot write the demo's role bindings to etcd: {exc}") from exc
        self._progress(
            f"secure    TLS (mTLS between services, and to etcd), tokens and RBAC; credentials in "
            f"{self.security.directory}"
        )

    def _security_env(self, svc: ServiceProcess) -> dict[str, str]:
        if self.security is None:
            return {}
        svc.tls = svc.kind != "planner"
        try:
            return self.security.service_env(svc.kind, svc.name)
        except (OSError, ValueError) as exc:
            raise ClusterError(
                f"cannot make {svc.name}'s certificate in {self.security.directory}: {exc}"
            ) from exc

    def _spawn(self, svc: ServiceProcess) -> None:
        svc.info = {}
        svc.stopped = False
        svc.ready_file.unlink(missing_ok=True)
        svc.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**self.child_env(), **svc.env, **self._security_env(svc)}
        with open(svc.log_path, "ab") as log:
            stamp = datetime.now().isoformat(timespec="seconds")
            log.write(f"==== {stamp} danube-local starts: {shlex.join(svc.argv)}\n".encode())
            log.flush()
            svc.proc = subprocess.Popen(
                svc.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                # Services resolve relative paths (a broker's default data_dir) in the workdir.
                cwd=self.workdir,
                start_new_session=True,
            )

    def _wait_ready(self, services: Iterable[ServiceProcess], deadline: float, timeout_s: float) -> None:
        pending = list(services)
        while pending:
            for svc in list(pending):
                info = read_ready_file(svc.ready_file)
                if info is not None:
                    self._accept_ready(svc, info)
                    pending.remove(svc)
                    continue
                assert svc.proc is not None
                rc = svc.proc.poll()
                if rc is not None:
                    raise ServiceFailed(
                        f"{svc.name} exited with code {rc} before it was ready",
                        service=svc.name,
                        log_path=svc.log_path,
                        log_tail=tail(svc.log_path, LOG_TAIL_LINES),
                    )
            if not pending:
                return
            if time.monotonic() >= deadline:
                late = pending[0]
                names = ", ".join(s.name for s in pending)
                raise ServiceFailed(
                    f"not ready within {timeout_s:g}s: {names} (no ready file at {late.ready_file})",
                    service=late.name,
                    log_path=late.log_path,
                    log_tail=tail(late.log_path, LOG_TAIL_LINES),
                )
            time.sleep(READY_POLL_INTERVAL_S)

    def _accept_ready(self, svc: ServiceProcess, info: dict[str, Any]) -> None:
        if info.get("service") != svc.kind:
            raise ServiceFailed(
                f"{svc.name}'s ready file says service={info.get('service')!r}, expected {svc.kind!r}",
                service=svc.name,
                log_path=svc.log_path,
                log_tail=tail(svc.log_path, LOG_TAIL_LINES),
            )
        if svc.kind in ("broker", "wal_uploader") and str(info.get("broker_id")) != svc.broker_id:
            raise ServiceFailed(
                f"{svc.name}'s ready file says broker_id={info.get('broker_id')!r}",
                service=svc.name,
                log_path=svc.log_path,
                log_tail=tail(svc.log_path, LOG_TAIL_LINES),
            )
        svc.info = info
        if svc.kind == "lookup":
            self._progress(f"lookup    {svc.url}  admin {svc.admin_url}  (pid {svc.pid})")
        elif svc.kind == "broker":
            self._progress(f"broker {svc.broker_id}  {svc.url}  (pid {svc.pid})")
        elif svc.kind == "planner":
            self._progress(f"planner   engine {info.get('engine')}  (pid {svc.pid})")
        else:
            self._progress(f"{svc.name}  {svc.url}  (pid {svc.pid})")

    # ------------------------------------------------------------------ brokers
    def _find_broker(self, i_or_id: int | str) -> ServiceProcess:
        if isinstance(i_or_id, int):
            if not 0 <= i_or_id < len(self.brokers):
                raise ClusterError(f"no broker at index {i_or_id} (have {len(self.brokers)})")
            return self.brokers[i_or_id]
        for b in self.brokers:
            if b.broker_id == i_or_id:
                return b
        raise ClusterError(f"no broker with id {i_or_id!r} (have {[b.broker_id for b in self.brokers]})")

    def _require_running_cluster(self) -> None:
        if not self._started or self._stopped:
            raise ClusterError("the cluster is not running")

    def add_broker(self, *, timeout_s: float = 30.0) -> ServiceProcess:
        """Start one more broker (next free id) and wait until it is ready."""
        self._require_running_cluster()
        next_id = max((int(b.broker_id or 0) for b in self.brokers), default=0) + 1
        deadline = time.monotonic() + timeout_s
        if self.with_uploaders:
            self._start_uploader(str(next_id), deadline, timeout_s)
        svc = self._broker_service(str(next_id), self._broker_port(len(self.brokers)))
        self.brokers.append(svc)
        self._spawn(svc)
        self._wait_ready([svc], deadline, timeout_s)
        return svc

    def stop_broker(self, i_or_id: int | str, *, kill: bool = False) -> StopOutcome | None:
        """SIGTERM (graceful, waits up to the grace period) or SIGKILL one broker.

        The broker stays in :attr:`brokers` (stopped) so it can be restarted with its id and port.
        """
        svc = self._find_broker(i_or_id)
        if svc.proc is None:
            return None
        svc.stopped = True
        if kill:
            self._send_signal(svc.proc, signal.SIGKILL)
            svc.proc.wait(timeout=10)
            outcome = StopOutcome(svc.proc.pid, "killed", svc.proc.returncode)
        else:
            outcome = stop_processes([svc.proc], grace_s=self.stop_grace_s, send=self._send_signal)[0]
        self._progress(f"stopped {svc.label} (pid {outcome.pid}, {outcome.how}, exit {outcome.returncode})")
        return outcome

    def restart_broker(
        self, i_or_id: int | str, *, kill: bool = False, timeout_s: float = 30.0
    ) -> ServiceProcess:
        """Stop a broker (if running) and start it again with the same id and port."""
        self._require_running_cluster()
        svc = self._find_broker(i_or_id)
        port = svc.port if svc.info else self._broker_port(self.brokers.index(svc))
        if svc.running:
            self.stop_broker(i_or_id, kill=kill)
        assert svc.broker_id is not None
        svc.argv = pinned_ports(self.broker_argv(svc.broker_id, port), svc.info)
        svc.env = self._storage_env(svc.broker_id)
        self._spawn(svc)
        self._wait_ready([svc], time.monotonic() + timeout_s, timeout_s)
        return svc

    # ------------------------------------------------------------------ any service
    @property
    def stopping(self) -> bool:
        """:meth:`stop` was called."""
        return self._stopped

    def services(self) -> list[ServiceProcess]:
        """The lookup, brokers, leaders, load managers and uploaders (those created so far)."""
        found = [self._lookup, *self.brokers, *self.leaders, *self.load_managers, *self.uploaders.values()]
        return [s for s in found if s is not None]

    def service(self, name: str) -> ServiceProcess:
        """A service by name: ``lookup``, ``broker-1``, ``leader-2``, ``load-manager-1``."""
        for svc in self.services():
            if svc.name == name:
                return svc
        raise ClusterError(f"no service named {name!r}")

    def signal(self, name: str, sig: int) -> None:
        """Send ``sig`` (SIGKILL, SIGSTOP, SIGCONT, ...) to a service's process group."""
        svc = self.service(name)
        if svc.proc is None:
            raise ClusterError(f"{name} was never started")
        self._send_signal(svc.proc, sig)
        if sig == signal.SIGKILL:
            svc.proc.wait(timeout=10)
        self._progress(f"sent {signal.Signals(sig).name} to {svc.label} (pid {svc.proc.pid})")

    def restart(self, name: str, *, timeout_s: float = 30.0) -> ServiceProcess:
        """Start a stopped (or killed) service again, as it was first started and on the ports
        it got then (others were given its addresses: a leader's load managers, an uploader's
        broker, the lookup's clients)."""
        svc = self.service(name)
        if svc.running:
            raise ClusterError(f"{name} is still running")
        if svc.kind == "broker":
            assert svc.broker_id is not None
            return self.restart_broker(svc.broker_id, timeout_s=timeout_s)
        svc.argv = pinned_ports(svc.argv, svc.info)
        self._spawn(svc)
        self._wait_ready([svc], time.monotonic() + timeout_s, timeout_s)
        return svc

    # ------------------------------------------------------------------ stop
    def stop(self) -> None:
        """Stop every service (SIGTERM, then SIGKILL after the grace period), then etcd. Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        try:
            # The control plane first, and to the end: once the load managers have resigned,
            # a stopping broker sees no leader and releases its topics at once, instead of
            # waiting its lame_duck_timeout_s for a handover to brokers that stop too. Then the
            # data plane and the leader service together.
            self._stop_services([self.planner, *self.load_managers])
            self._stop_services([self._lookup, *self.brokers, *self.uploaders.values(), *self.leaders])
            if self._etcd is not None:
                self._progress(f"stopping etcd {self._etcd.endpoint}")
                self._etcd.stop()
                self._progress("stopped  etcd")
        finally:
            atexit.unregister(self.stop)

    def _stop_services(self, order: list[ServiceProcess | None]) -> None:
        """SIGTERM the running ones at once, SIGKILL what is left after the grace period."""
        running = [s for s in order if s is not None and s.proc is not None and s.running]
        for s in running:
            s.stopped = True
        for s in running:
            self._progress(f"stopping {s.label} (pid {s.pid})")
        procs = [s.proc for s in running if s.proc is not None]
        outcomes = stop_processes(procs, grace_s=self.stop_grace_s, send=self._send_signal)
        for s, outcome in zip(running, outcomes, strict=True):
            self._progress(f"stopped  {s.label} ({outcome.how}, exit {outcome.returncode})")

    def __enter__(self) -> LocalCluster:
        if not self._started:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
