"""Wiring of the WAL uploader: etcd, object store, the upload loop, the broker watch, gRPC.

Start-up: connect to etcd (bounded wait); open the object store (retrying while it is
unreachable: a broker never waits for its uploader, so there is no hurry, only a WARNING); read
the broker's registration; bind and start the API; register ``/{cluster}/uploaders/{broker_id}``
on a lease; start the loops; announce readiness (callback and/or ready file).

Shutdown (stop event; SIGINT/SIGTERM): stop the API (in-flight Flush calls get
``shutdown_grace_s``), cancel the loops (an upload cut short is redone from its first step by
the next run: every step is safe to repeat), revoke the registration lease, close the object
store and etcd. The uploader keeps no state of its own beyond etcd and the object store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from danube_common import gc_tuning
from danube_common.aio import cancel_and_wait
from danube_common.errors import ConfigError, DanubeError
from danube_common.grpc_util import install_stop_signals
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.metadata.lease import KeptLease
from danube_common.metadata.store import MetadataStore
from danube_common.objstore import ObjectStore, ObjectStoreError, backoff_delays, open_object_store
from danube_common.observability.http import HttpEndpoint
from danube_common.observability.metrics import new_registry
from danube_common.pb import DanubeWalUploader_pb2_grpc as upb_grpc
from danube_common.service import (
    ServiceFailure,
    ServiceReady,
    ServiceSecurity,
    remove_ready_file,
    start_http,
    start_security,
    wait_for_stop,
    write_ready_file,
)
from danube_common.service import running as service_running
from danube_wal_uploader.config import WalUploaderConfig
from danube_wal_uploader.grpc_api import WalUploaderApi
from danube_wal_uploader.metrics import UploaderCollector
from danube_wal_uploader.uploader import BrokerWatch, Uploader

log = logging.getLogger(__name__)


class UploaderFailure(ServiceFailure):
    """The uploader stopped because one of its loops failed."""


class Registration:
    """``/{cluster}/uploaders/{broker_id}`` on a kept lease; registered again if the lease is lost."""

    def __init__(self, store: MetadataStore, key: str, value: dict[str, Any], *, ttl_s: int) -> None:
        self._store = store
        self._key = key
        self._value = value
        self._ttl_s = ttl_s
        self._lease: KeptLease | None = None

    async def start(self) -> None:
        lease = KeptLease(self._store, self._ttl_s, name="uploader registration")
        await lease.start()
        self._lease = lease
        await self._store.put(self._key, self._value, lease=lease.lease_id)

    async def run(self) -> None:
        """Register again whenever the lease is lost (etcd unreachable for a whole TTL)."""
        while True:
            assert self._lease is not None
            await self._lease.lost.wait()
            await self._lease.aclose(revoke=False)
            for delay in backoff_delays(initial_s=0.5, max_s=float(self._ttl_s)):
                try:
                    await self.start()
                except DanubeError as exc:
                    log.warning("registering %s again failed (retrying in %.1fs): %s", self._key, delay, exc)
                    await asyncio.sleep(delay)
                    continue
                log.info("registered %s again", self._key)
                break

    async def aclose(self) -> None:
        if self._lease is not None:
            await self._lease.aclose(revoke=True)


async def open_objects(cfg: WalUploaderConfig, stop: asyncio.Event) -> ObjectStore | None:
    """Open the object store, retrying while it is unreachable (None: stopped meanwhile).
    Settings it refuses (bucket missing, access denied) fail at once."""
    for delay in backoff_delays(initial_s=cfg.retry_initial_s, max_s=cfg.retry_max_s):
        try:
            return await open_object_store(cfg.object_store)
        except ObjectStoreError as exc:
            if not exc.retryable:
                raise
            log.warning("object store not reachable yet (retrying in %.1fs): %s", delay, exc.message)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
        if stop.is_set():
            return None
    return None  # unreachable: the delays never end


async def run(
    cfg: WalUploaderConfig,
    *,
    ready: Callable[[ServiceReady], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until ``stop`` is set (default: until SIGINT/SIGTERM)."""
    if not cfg.broker_id:
        raise ConfigError(
            "broker_id is required: the id of the broker whose data directory this uploader serves"
        )
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop)
    keys = Keys(cfg.etcd.cluster)
    store = EtcdStore.from_config(cfg.etcd)
    objects: ObjectStore | None = None
    server: Any = None
    http: HttpEndpoint | None = None
    security: ServiceSecurity | None = None
    registration: Registration | None = None
    loops: dict[asyncio.Task[None], str] = {}
    try:
        await store.wait_ready(cfg.etcd.connect_timeout_s)
        security = await start_security(cfg, store, keys)
        loops.update(security.loops())
        server = security.new_server()
        objects = await open_objects(cfg, stop)
        if objects is None:
            return
        uploader = Uploader(cfg, store, objects, keys)
        watch = BrokerWatch(store, keys.broker(cfg.broker_id), uploader.set_broker_alive)
        alive = await watch.read()
        upb_grpc.add_WalUploaderServicer_to_server(WalUploaderApi(uploader), server)
        port = security.bind(server, cfg.listen_addr)
        await server.start()
        metrics = new_registry()
        metrics.register(UploaderCollector(uploader.figures, max_topics=cfg.metrics.max_topics))
        http = await start_http(
            cfg, security, metrics, service="WAL uploader", advertised_host=cfg.advertised_host
        )
        info = ServiceReady(
            "wal_uploader", f"{cfg.advertised_host}:{port}", os.getpid(), {"broker_id": cfg.broker_id}
        ).with_http(http)
        registration = Registration(
            store,
            keys.uploader(cfg.broker_id),
            {"broker_id": cfg.broker_id, "addr": info.addr, "started_at_ms": time.time_ns() // 1_000_000},
            ttl_s=cfg.registration_ttl_s,
        )
        await registration.start()
        for coro, what in (
            (uploader.run(), "the upload loop"),
            (watch.run(), "the broker watch"),
            (registration.run(), "the registration"),
        ):
            loops[asyncio.create_task(coro, name=f"wal-uploader: {what}")] = what
        if cfg.ready_file:
            write_ready_file(cfg.ready_file, info.to_json())
        gc_tuning.serving(cfg.gc)
        log.info(
            "WAL uploader of broker %s up: API on %s, data dir %s, object store %s, broker %s (cluster %s)",
            cfg.broker_id,
            info.url,
            cfg.data_path,
            cfg.object_store.backend,
            "registered" if alive else "NOT registered (dead or not started): uploading open segments too",
            cfg.etcd.cluster,
        )
        if ready is not None:
            ready(info)
        ended = await wait_for_stop(stop, loops)
        if ended is not None:
            raise UploaderFailure(str(ended)) from ended.error
    finally:
        if server is not None:
            await server.stop(cfg.shutdown_grace_s)
        if http is not None:
            await http.aclose()
        await cancel_and_wait(*loops)
        if security is not None:
            await security.aclose()
        if registration is not None:
            await registration.aclose()
        if objects is not None:
            await objects.aclose()
        await store.aclose()
        if cfg.ready_file:
            remove_ready_file(cfg.ready_file)
    log.info("WAL uploader of broker %s stopped", cfg.broker_id)


@contextlib.asynccontextmanager
async def running(cfg: WalUploaderConfig) -> AsyncIterator[ServiceReady]:
    """Run the uploader in this event loop for the duration of the block (embedding, tests)."""
    async with service_running(run, cfg, name="wal-uploader") as info:
        yield info
