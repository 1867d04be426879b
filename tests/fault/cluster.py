"""A cluster to break on purpose, and the faults to break it with.

:class:`FaultCluster` is a :class:`~danube_local.cluster.LocalCluster` of three brokers, each with
its WAL uploader, two leader-service replicas and two load managers (short TTLs so failures are
noticed in seconds), with two things put in between on purpose:

- S3 (``moto_server``) behind a :class:`~tests.support.faulty_proxy.FaultyProxy`: object storage
  can refuse or swallow requests;
- every broker's connection to etcd behind a proxy of its own: a broker can be cut off from etcd
  while its clients still reach it (a network partition between a broker and etcd).

The proxies run on an event loop of their own thread, so they keep forwarding while the test's
loop is blocked (starting or restarting processes is synchronous). When the tests run as root,
each broker's data directory is a small tmpfs, so a WAL disk can be filled up for real.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import grpc
import grpc.aio

from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from danube_local.cluster import LocalCluster
from danube_local.supervise import Supervisor
from tests.e2e.control_plane import ENV as CONTROL_PLANE_ENV
from tests.e2e.control_plane import LEADERSHIP_TTL_S, REGISTRATION_TTL_S
from tests.support import wait_until
from tests.support.faulty_proxy import FaultyProxy, Mode
from tests.support.moto import MotoServer

log = logging.getLogger(__name__)

T = TypeVar("T")

BUCKET = "danube-faults"
#: Size of each broker's tmpfs data directory.
TMPFS_BYTES = 256 * 1024 * 1024

ENV = {
    # The control-plane tests' short timers (TTLs, reconcile, heartbeats; placement by topics and
    # rates only), plus small segments and quick uploads so object storage is exercised.
    **CONTROL_PLANE_ENV,
    "DANUBE_BROKER_WAL__SEGMENT_MAX_BYTES": str(256 * 1024),
    "DANUBE_BROKER_CLOUD_FLUSH_INTERVAL_MS": "50",
    # Retention every second (the scenario retention_under_faults deletes from object storage).
    "DANUBE_BROKER_RETENTION_CHECK_INTERVAL_S": "1",
    "DANUBE_BROKER_TOPIC_OPEN_CLIENT_WAIT_S": "2",
    "DANUBE_BROKER_ETCD__REQUEST_TIMEOUT_S": "2",
    "DANUBE_WAL_UPLOADER_SCAN_INTERVAL_S": "0.2",
    "DANUBE_WAL_UPLOADER_REGISTRATION_TTL_S": str(REGISTRATION_TTL_S),
    # The brokers' wal.commit_sync (auto unless set): DANUBE_FAULT_WAL_COMMIT_SYNC=journal runs
    # every scenario with the commit journal (not in CI: see docs/ownership.md).
    **(
        {"DANUBE_BROKER_WAL__COMMIT_SYNC": os.environ["DANUBE_FAULT_WAL_COMMIT_SYNC"]}
        if os.environ.get("DANUBE_FAULT_WAL_COMMIT_SYNC")
        else {}
    ),
}

ROOT = Path(__file__).resolve().parents[2]


class ProxyThread:
    """Fault proxies served by an event loop on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="fault-proxies", daemon=True)
        self._thread.start()
        self.proxies: list[FaultyProxy] = []

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def add(self, host: str, port: int) -> FaultyProxy:
        proxy = self._run(FaultyProxy(host, port).start())
        self.proxies.append(proxy)
        return proxy

    def set_mode(self, proxy: FaultyProxy, mode: Mode) -> None:
        async def switch() -> None:
            proxy.set_mode(mode)

        self._run(switch())

    def close(self) -> None:
        for proxy in self.proxies:
            with contextlib.suppress(Exception):
                self._run(proxy.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)


def _mount_tmpfs(path: Path) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(path)],
        capture_output=True,
        timeout=10,
    )
    return res.returncode == 0


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=10)


class FaultCluster:
    def __init__(self, workdir: Path, *, brokers: int = 3) -> None:
        self.workdir = workdir
        self.n_brokers = brokers
        workdir.mkdir(parents=True, exist_ok=True)
        self.moto = MotoServer(log_path=workdir / "moto.log")
        self.etcd_server = EtcdProcess(data_dir=workdir / "etcd", log_path=workdir / "etcd.log")
        self.proxies = ProxyThread()
        self.s3_proxy: FaultyProxy | None = None
        self.etcd_proxies: dict[str, FaultyProxy] = {}
        self.tmpfs: dict[str, Path] = {}
        self.cluster: LocalCluster | None = None
        self._store: EtcdStore | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FaultCluster:
        try:
            self.moto.__enter__()
            self.s3_proxy = self.proxies.add("127.0.0.1", self.moto.port)
            store = {
                "BACKEND": "s3",
                "S3__ENDPOINT_URL": self.s3_proxy.endpoint_url,
                "S3__BUCKET": BUCKET,
                "S3__PATH_STYLE": "true",
                "S3__CREATE_BUCKET": "true",
                "S3__ACCESS_KEY_ID": "danube",
                "S3__SECRET_ACCESS_KEY": "danube-secret",
                "S3__CONNECT_TIMEOUT_S": "1",
                "S3__READ_TIMEOUT_S": "2",
                "S3__REQUEST_TIMEOUT_S": "3",
                "S3__MAX_ATTEMPTS": "1",
            }
            self.etcd_server.start(timeout_s=30)
            c = LocalCluster(
                brokers=self.n_brokers,
                leaders=2,
                load_managers=2,
                uploaders=True,
                object_store=store,
                workdir=self.workdir,
                extra_env=ENV,
                etcd_endpoint=self.etcd_server.endpoint,
            )
            c.load_manager_flags = ["--leadership-ttl", str(LEADERSHIP_TTL_S)]
            self.cluster = c
            host, port = self.etcd_server.endpoint.rsplit(":", 1)
            for i in range(self.n_brokers):
                bid = str(i + 1)
                proxy = self.proxies.add(host, int(port))
                self.etcd_proxies[bid] = proxy
                c.broker_etcd_endpoints[bid] = f"{proxy.host}:{proxy.port}"
                data = c.broker_data_dir(bid)
                if _mount_tmpfs(data):
                    self.tmpfs[bid] = data
            c.start(timeout_s=120)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.stop()
        self.etcd_server.stop()
        for path in self.tmpfs.values():
            _umount(path)
        self.proxies.close()
        with contextlib.suppress(Exception):
            self.moto.__exit__(None, None, None)

    @property
    def c(self) -> LocalCluster:
        assert self.cluster is not None
        return self.cluster

    @property
    def service_url(self) -> str:
        return self.c.service_url

    @property
    def admin_addr(self) -> str:
        """The lookup's admin API (host:port)."""
        return self.c.lookup.admin_addr

    @property
    def keys(self) -> Keys:
        return Keys(self.c.cluster)

    # ------------------------------------------------------------------ etcd reads
    @contextlib.asynccontextmanager
    async def etcd(self) -> AsyncIterator[Resources]:
        store = EtcdStore([self.etcd_server.endpoint], request_timeout_s=5.0)
        await store.wait_ready(10)
        try:
            yield Resources(store, self.keys)
        finally:
            await store.aclose()

    async def owner(self, res: Resources, topic: str) -> str | None:
        own = await res.get_owner(TopicName.parse(topic))
        return own.broker_id if own is not None else None

    def broker_ids(self) -> list[str]:
        return [b.broker_id or "" for b in self.c.brokers]

    def running_brokers(self) -> list[str]:
        return [b.broker_id or "" for b in self.c.brokers if b.running]

    # ------------------------------------------------------------------ admin
    async def admin(self, *args: str, check: bool = True) -> str:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "danube_sdk.cli.admin", "--admin-url", self.c.admin_url, *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        async with asyncio.timeout(60):
            out, err = await proc.communicate()
        if check and proc.returncode != 0:
            raise AssertionError(f"danube-admin {' '.join(args)} failed: {out.decode()} {err.decode()}")
        return out.decode() + err.decode()

    async def create_topic(
        self, topic: str, *, durability: str = "fsync", retention_size_bytes: int | None = None
    ) -> None:
        """A reliable topic keeping an hour of history (the final read starts at offset 0), or
        with ``retention_size_bytes``: that much acknowledged history (retention deletes from
        object storage). Set-up, so straight through the admin API (what ``danube-admin topics
        create`` calls), without a CLI process to start."""
        req = apb.CreateTopicRequest(
            name=topic,
            dispatch_strategy="reliable",
            durability=durability,
            retention_time_s=3600 if retention_size_bytes is None else 0,
            retention_size_bytes=retention_size_bytes or 0,
        )
        async with grpc.aio.insecure_channel(self.admin_addr) as channel:
            await apb_grpc.TopicAdminStub(channel).CreateTopic(req, timeout=60)

    async def move_topic(self, topic: str, *, to: str) -> None:
        """Ask for a move of ``topic`` to broker ``to`` (set-up: the admin API, as ``create_topic``)."""
        async with grpc.aio.insecure_channel(self.admin_addr) as channel:
            await apb_grpc.TopicAdminStub(channel).MoveTopic(
                apb.MoveTopicRequest(name=topic, to_broker=to), timeout=60
            )

    # ------------------------------------------------------------------ faults
    async def _sync(self, fn: Any, *args: Any, **kw: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kw)

    async def kill(self, broker: str) -> None:
        await self._sync(self.c.stop_broker, broker, kill=True)

    async def restart(self, broker: str) -> None:
        await self._sync(self.c.restart_broker, broker, timeout_s=60)

    async def ensure_running(self) -> None:
        """Every broker, uploader and load manager runs again (after a scenario), and every broker
        is registered and active: a broker that lost its lease during the scenario stops itself,
        perhaps after this looked, so the supervisor restarts whatever exits meanwhile."""
        for b in self.c.brokers:
            if b.proc is not None and b.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self.c.signal(b.name, signal.SIGCONT)
        for svc in [*self.c.load_managers, *self.c.leaders]:
            if svc.proc is not None and svc.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self.c.signal(svc.name, signal.SIGCONT)
        for bid, proxy in self.etcd_proxies.items():
            if proxy.mode != "pass":
                self.proxies.set_mode(proxy, "pass")
            self.free_disk(bid)
        if self.s3_proxy is not None and self.s3_proxy.mode != "pass":
            self.proxies.set_mode(self.s3_proxy, "pass")
        for b in self.c.brokers:
            if not b.running:
                assert b.broker_id is not None
                await self.restart(b.broker_id)
        for svc in self.c.load_managers:
            if not svc.running:
                await self._sync(self.c.restart, svc.name)
        async with self.etcd() as res, self.supervised():
            await wait_until(
                lambda: self.is_whole(res),
                timeout_s=60,
                interval_s=0.2,
                what="every broker running and registered",
            )

    async def is_whole(self, res: Resources) -> bool:
        """Does every broker run, registered and active in etcd?"""
        active = {b.broker_id for b in await res.list_brokers() if b.state == "active"}
        return all(b.running and b.broker_id in active for b in self.c.brokers)

    def pause(self, name: str) -> None:
        self.c.signal(name, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        self.c.signal(name, signal.SIGCONT)

    def cut_from_etcd(self, broker: str) -> None:
        self.proxies.set_mode(self.etcd_proxies[broker], "blackhole")

    def reconnect_to_etcd(self, broker: str) -> None:
        self.proxies.set_mode(self.etcd_proxies[broker], "pass")

    def object_store(self, mode: Mode) -> None:
        assert self.s3_proxy is not None
        self.proxies.set_mode(self.s3_proxy, mode)

    @contextlib.asynccontextmanager
    async def supervised(self) -> AsyncIterator[dict[str, int]]:
        """While inside, services that exit on their own are restarted, as ``danube-local up``
        does (:class:`~danube_local.supervise.Supervisor`, checking every 0.2 s); yields the
        restarts so far, by service name."""
        sup = Supervisor(self.c, say=log.info, min_backoff_s=0.5, max_backoff_s=4.0, restart_timeout_s=60)
        done = asyncio.Event()

        async def loop() -> None:
            while not done.is_set():
                await asyncio.to_thread(sup.check)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), 0.2)

        task = asyncio.create_task(loop())
        try:
            yield sup.restarts
        finally:
            done.set()
            await task  # a restart in progress (in its thread) ends before anyone else starts services

    def pause_etcd(self) -> None:
        assert self.etcd_server.proc is not None
        self.etcd_server.proc.send_signal(signal.SIGSTOP)

    def resume_etcd(self) -> None:
        assert self.etcd_server.proc is not None
        self.etcd_server.proc.send_signal(signal.SIGCONT)

    async def restart_etcd(self, *, down_s: float) -> None:
        await self._sync(self.etcd_server.stop)
        await asyncio.sleep(down_s)
        await self._sync(self.etcd_server.start, 30)

    def _ballast(self, broker: str) -> Path:
        return self.c.broker_data_dir(broker) / ".ballast"

    def can_fill_disk(self, broker: str) -> bool:
        return broker in self.tmpfs

    def fill_disk(self, broker: str) -> None:
        """Fill the broker's WAL file system (a tmpfs) until a write fails with ENOSPC."""
        fd = os.open(self._ballast(broker), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in (1 << 20, 4096, 1):
                with contextlib.suppress(OSError):
                    while os.write(fd, b"\0" * size):
                        pass
        finally:
            os.close(fd)

    def free_disk(self, broker: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._ballast(broker).unlink()

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.c.log_dir / f"{name}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


def now() -> float:
    return time.monotonic()
