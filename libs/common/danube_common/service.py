"""What every service process shares: base config, common flags, the id rule, the ready
record and file, waiting for a stop, ``main()``.

A service's ``__main__`` adds its own flags next to :func:`add_common_flags`, maps them with
:func:`common_flags`, and hands its ``run(cfg)`` coroutine to :func:`run_main`, which owns the
event loop (uvloop when installed), exit codes and the error messages a person can act on:

    0  stopped on request (SIGINT/SIGTERM)
    1  failed: etcd unreachable, a port in use, a fatal internal error
    2  bad configuration or flags
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import re
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import grpc
import grpc.aio
from aiohttp import web
from prometheus_client import CollectorRegistry
from pydantic import Field, field_validator

from danube_common import gc_tuning
from danube_common.aio import cancel_and_wait
from danube_common.config import EtcdConfig, Frozen, split_list
from danube_common.errors import ConfigError, DanubeError, InvalidNamespaceName, MetadataUnavailable, Timeout
from danube_common.grpc_util import SERVER_OPTIONS, new_server
from danube_common.keys import Keys
from danube_common.logs import setup_logging
from danube_common.metadata.etcd import etcd_tls_material
from danube_common.metadata.store import MetadataStore
from danube_common.objstore.config import ObjectStoreConfig
from danube_common.observability import metric_names
from danube_common.observability.http import HttpEndpoint
from danube_common.observability.metrics import MetricsConfig
from danube_common.observability.tracing import process_tracing
from danube_common.security.config import AuthConfig
from danube_common.security.interceptor import AuthInterceptor
from danube_common.security.rules import HandleResolver
from danube_common.security.security_view import SecurityView
from danube_common.security.tls import TlsConfig, bind_server, channel_credentials, load_material
from danube_common.topic_name import validate_namespace

log = logging.getLogger(__name__)

R_co = TypeVar("R_co", covariant=True)

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

#: Broker ids and election candidate ids: they appear in etcd keys, file names and logs.
_ID = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


class ServiceFailure(RuntimeError):
    """A service stopped because something it depends on failed, not because it was asked to.
    :func:`run_main` logs it and exits 1; each service has its own subclass."""


def check_id(value: str, what: str) -> str:
    """``value`` if it is a valid id (1-64 letters, digits, '_', '-' or '.'); else ValueError
    naming ``what`` (e.g. "broker id"), for a config validator."""
    if not _ID.match(value):
        raise ValueError(f"invalid {what} {value!r}: use 1-64 letters, digits, '_', '-' or '.'")
    return value


def check_leader_endpoints(endpoints: list[str], *, required: bool = True) -> list[str]:
    """The leader service addresses of an elected service: each HOST:PORT (an optional
    ``http://`` prefix allowed), at least one if ``required``."""
    if required and not endpoints:
        raise ValueError("at least one leader service address is needed, e.g. 127.0.0.1:6680")
    for addr in endpoints:
        split_host_port(addr.removeprefix("http://"))
    return endpoints


def split_host_port(addr: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) -> (host, port); ValueError with what is allowed."""
    host, sep, port_s = addr.rpartition(":")
    if not sep or not host or not port_s.isdigit() or not 0 <= int(port_s) <= 65535:
        raise ValueError(f"{addr!r} is not HOST:PORT (port 0-65535; 0 picks a free port)")
    return host.removeprefix("[").removesuffix("]"), int(port_s)


class ServiceConfig(Frozen):
    """Fields every service process has."""

    etcd: EtcdConfig = Field(default_factory=EtcdConfig)
    #: Namespaces created (if missing) at every start.
    bootstrap_namespaces: list[str] = Field(default_factory=lambda: ["default"])
    #: Once serving, a JSON file with the bound addresses is written here (atomically).
    ready_file: str | None = None
    log_level: str = "INFO"
    #: TLS of this service's servers and of the channels it opens to other services (its own
    #: certificate is its mTLS identity). Default: plaintext.
    tls: TlsConfig = Field(default_factory=TlsConfig)
    #: Authentication and RBAC of every RPC this service serves. Default: off (anyone may call).
    auth: AuthConfig = Field(default_factory=AuthConfig)
    #: The HTTP endpoint (``/metrics`` for Prometheus, ``/healthz``; the lookup's web console)
    #: host:port; port 0 picks a free port; None (or "off") serves none. Each service has its
    #: own default port.
    http_listen_addr: str | None = None
    #: What ``/metrics`` shows (the per-topic series bound).
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    #: The process's garbage collector (thresholds, freezing start-up objects).
    gc: gc_tuning.GcConfig = Field(default_factory=gc_tuning.GcConfig)
    #: How long a thread may hold the GIL while another waits for it; 0 (default) keeps
    #: CPython's 5 ms. Shorter lets the WAL's commit threads take the GIL back sooner after each
    #: system call, but costs the event loop more switches: on the broker 0.1 ms measured worse
    #: and 1 ms no better than the default (docs/benchmarks.md, "the GIL convoy").
    gil_switch_interval_ms: float = Field(default=0.0, ge=0)

    @field_validator("bootstrap_namespaces")
    @classmethod
    def _namespaces(cls, v: list[str]) -> list[str]:
        for ns in v:
            try:
                validate_namespace(ns)
            except InvalidNamespaceName as exc:
                raise ValueError(exc.message) from exc
        return v

    @field_validator("http_listen_addr", mode="before")
    @classmethod
    def _http_addr(cls, v: object) -> object:
        if isinstance(v, str) and v.strip().lower() in ("", "off", "none"):
            return None
        if isinstance(v, str):
            split_host_port(v)
        return v

    @field_validator("log_level")
    @classmethod
    def _level(cls, v: str) -> str:
        level = v.upper()
        if level not in LOG_LEVELS:
            raise ValueError(f"unknown log level {v!r}: use {', '.join(LOG_LEVELS)}")
        return level


def add_common_flags(p: argparse.ArgumentParser, *, ready_fields: str) -> None:
    p.add_argument("--config", metavar="FILE", help="YAML config file")
    p.add_argument(
        "--etcd-endpoints", metavar="A,B", help="comma-separated etcd host:port list; default 127.0.0.1:2379"
    )
    p.add_argument("--cluster", metavar="NAME", help="cluster name (root of every etcd key); default danube")
    p.add_argument(
        "--ready-file",
        metavar="PATH",
        help=f"once serving, write {{{ready_fields}}} here as JSON (atomically)",
    )
    p.add_argument("--log-level", metavar="LEVEL", help="DEBUG, INFO (default), WARNING or ERROR")
    p.add_argument(
        "--http-listen",
        metavar="HOST:PORT",
        help="HTTP endpoint (/metrics, /healthz) address; port 0 = free port; 'off' = none",
    )


def common_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The dotted config paths of the flags :func:`add_common_flags` defines (None = not given)."""
    return {
        "etcd.endpoints": split_list(args.etcd_endpoints),
        "etcd.cluster": args.cluster,
        "ready_file": args.ready_file,
        "log_level": args.log_level,
        "http_listen_addr": args.http_listen,
    }


def write_ready_file(path: str | Path, info: Mapping[str, Any]) -> None:
    """Write atomically (temporary file + rename), so a reader never sees a partial file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(dict(info)) + "\n")
    os.replace(tmp, target)


def remove_ready_file(path: str | Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        Path(path).unlink()


@dataclass(frozen=True, slots=True)
class ServiceReady:
    """Where a running service answers: what ``ready`` callbacks get and the ready file holds
    (``{"service", <extra fields>, "addr", "url", ["admin_addr", "admin_url",] "pid"}``)."""

    service: str
    #: host:port of the service's gRPC API; "" for a service that serves none (the planner).
    addr: str
    pid: int
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: A second listener (the lookup service's admin API), "" if none.
    admin_addr: str = ""
    #: The HTTP endpoint (metrics; the lookup's console), "" if none; ``http_scheme`` is
    #: ``https`` with TLS.
    http_addr: str = ""
    http_scheme: str = "http"
    #: The running service's live state, for embedding and in-process tests (the broker's
    #: topic registry); never written to the ready file.
    live: Any = field(default=None, repr=False, compare=False)

    @property
    def url(self) -> str:
        return f"http://{self.addr}" if self.addr else ""

    @property
    def admin_url(self) -> str:
        return f"http://{self.admin_addr}" if self.admin_addr else ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"service": self.service, **self.extra}
        if self.addr:
            out |= {"addr": self.addr, "url": self.url}
        if self.admin_addr:
            out |= {"admin_addr": self.admin_addr, "admin_url": self.admin_url}
        if self.http_addr:
            out |= {"http_addr": self.http_addr, "http_url": self.http_url, "metrics_url": self.metrics_url}
        return out | {"pid": self.pid}

    def with_http(self, http: HttpEndpoint | None) -> ServiceReady:
        """This record with the HTTP endpoint's address (unchanged when it serves none)."""
        if http is None:
            return self
        return dataclasses.replace(self, http_addr=http.advertised, http_scheme=http.scheme)

    @property
    def http_url(self) -> str:
        return f"{self.http_scheme}://{self.http_addr}" if self.http_addr else ""

    @property
    def metrics_url(self) -> str:
        return f"{self.http_url}/metrics" if self.http_addr else ""


@dataclass(frozen=True, slots=True)
class Ended:
    """Why a service stopped without being asked: which of its loops (or conditions) ended,
    and the exception it ended with, if any."""

    what: str
    error: BaseException | None = None

    def __str__(self) -> str:
        return f"{self.what} ended unexpectedly" + (f": {self.error!r}" if self.error else "")


async def wait_for_stop(
    stop: asyncio.Event,
    loops: Mapping[Any, str],
    *,
    conditions: Mapping[asyncio.Event, str] | None = None,
) -> Ended | None:
    """Wait until ``stop`` is set (None: a requested stop), one of a service's long-running
    ``loops`` (asyncio tasks; None for one that is not running) ends (it should never: logged as
    an error), or one of ``conditions`` is set (e.g. the broker's lease lost; the caller says
    why)."""
    tasks = {t: what for t, what in loops.items() if t is not None}
    events = dict(conditions or {})
    waits = {asyncio.create_task(e.wait(), name=f"wait: {what}"): what for e, what in events.items()}
    stop_task = asyncio.create_task(stop.wait(), name="wait-stop")
    try:
        await asyncio.wait({stop_task, *waits, *tasks}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        err = await cancel_and_wait(stop_task, *waits)
        if err is not None:
            raise err
    if stop.is_set():
        log.info("stop requested: shutting down")
        return None
    for event, what in events.items():
        if event.is_set():
            return Ended(what)
    for task, what in tasks.items():
        if task.done():
            exc = None if task.cancelled() else task.exception()
            log.error("%s ended unexpectedly: stopping", what, exc_info=exc)
            return Ended(what, exc)
    return Ended("an unknown wait")  # unreachable: one of the waits finished


def check_security_files(cfg: ServiceConfig) -> None:
    """Read and check every TLS file and the JWT key of ``cfg`` (ConfigError naming the file
    and what to do): a service that cannot use them refuses to start (exit 2). That is the
    ``tls`` section, etcd's TLS (``etcd.ca_file``, ``etcd.cert_file``/``key_file``) and, for the
    services with object storage (a field named ``object_store``), ``object_store.s3.ca_file``."""
    if cfg.tls.enabled or cfg.tls.ca_file:
        load_material(cfg.tls)
    etcd_tls_material(cfg.etcd)
    objects = getattr(cfg, "object_store", None)
    if isinstance(objects, ObjectStoreConfig) and objects.backend == "s3":
        objects.s3.check_files()
    if cfg.auth.enabled and cfg.auth.jwt is not None:
        cfg.auth.jwt.verifier()


def internal_credentials(cfg: ServiceConfig) -> grpc.ChannelCredentials | None:
    """The credentials of the channels this service opens to other services (None: plaintext):
    with TLS enabled, trust ``tls.ca_file`` and present the service's own certificate (mTLS)."""
    return channel_credentials(cfg.tls) if cfg.tls.enabled else None


@dataclass(slots=True)
class ServiceSecurity:
    """A service's server-side security: how its servers are built and bound, and the RBAC
    cache its AuthInterceptor reads (None with auth off). Build it with :func:`start_security`."""

    tls: TlsConfig
    #: None with auth disabled (servers get no auth interceptor: behaviour unchanged).
    interceptor: AuthInterceptor | None = None
    view: SecurityView | None = None

    def new_server(self, *, options: list[tuple[str, int]] | None = None) -> grpc.aio.Server:
        extra = [self.interceptor] if self.interceptor is not None else []
        return new_server(extra, options=SERVER_OPTIONS if options is None else options)

    def bind(self, server: grpc.aio.Server, addr: str, *, tls: TlsConfig | None = None) -> int:
        """Bind ``addr`` (TLS when enabled; ConfigError when its files are unusable). ``tls``:
        other settings than the service's (the broker's internal listener requires client
        certificates)."""
        return bind_server(server, addr, self.tls if tls is None else tls)

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The RBAC watch, for :func:`wait_for_stop` (None with auth off)."""
        return self.view.task if self.view is not None else None

    def loops(self) -> dict[asyncio.Task[None], str]:
        """``{task: what}`` to add to a service's supervised loops (empty with auth off)."""
        task = self.task
        return {task: "the security (RBAC) watch"} if task is not None else {}

    async def aclose(self) -> None:
        if self.view is not None:
            await self.view.aclose()


async def start_security(
    cfg: ServiceConfig,
    store: MetadataStore,
    keys: Keys,
    *,
    resolve_handle: HandleResolver | None = None,
) -> ServiceSecurity:
    """Check the TLS files; with auth enabled, load the RBAC view (and follow its watch) and
    build the AuthInterceptor. Call :meth:`ServiceSecurity.aclose` at shutdown."""
    check_security_files(cfg)
    if not cfg.auth.enabled:
        return ServiceSecurity(cfg.tls)
    view = SecurityView(store, keys)
    interceptor = AuthInterceptor.from_config(cfg.auth, view, resolve_handle=resolve_handle)
    await view.start()
    return ServiceSecurity(cfg.tls, interceptor, view)


async def start_http(
    cfg: ServiceConfig,
    security: ServiceSecurity,
    registry: CollectorRegistry,
    *,
    service: str,
    advertised_host: str | None = None,
    routes: Iterable[web.AbstractRouteDef] = (),
) -> HttpEndpoint | None:
    """Serve the service's HTTP endpoint (``/metrics`` from ``registry``, ``/healthz``, and
    ``routes``) on ``cfg.http_listen_addr``, with the service's TLS and auth; None when it is
    off. With auth on, ``registry`` also counts the refused calls (``danube_authz_deny_total``
    by code). Close it with :meth:`HttpEndpoint.aclose` at shutdown."""
    if cfg.http_listen_addr is None:
        return None
    if security.interceptor is not None and security.interceptor.authenticator is not None:
        denied = metric_names.AUTHZ_DENIED.counter(registry)
        security.interceptor.on_denied = lambda code: denied.labels(code.name).inc()
    http = HttpEndpoint(registry, tls=cfg.tls, auth=security.interceptor, service=service)
    http.add_routes(routes)
    await http.start(cfg.http_listen_addr, advertised_host=advertised_host)
    return http


class ServiceRun(Protocol[R_co]):
    """A service's ``run(cfg, *, ready, stop)``: serve until ``stop``, call ``ready`` once serving."""

    def __call__(
        self, cfg: Any, *, ready: Callable[[Any], None] | None = ..., stop: asyncio.Event | None = ...
    ) -> Coroutine[Any, Any, None]: ...


@contextlib.asynccontextmanager
async def running(run: ServiceRun[R_co], cfg: Any, *, name: str) -> AsyncIterator[Any]:
    """Run a service in this event loop for the duration of the block (embedding, tests).

    Yields what the service passed to ``ready``; raises the start-up error if it never got
    ready, and re-raises a crash that happened while the block ran.
    """
    stop = asyncio.Event()
    started: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(run(cfg, ready=started.set_result, stop=stop), name=name)
    try:
        waiting: set[asyncio.Future[Any]] = {started, task}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if not started.done():
            await task  # raises the start-up error
            raise RuntimeError(f"{name} exited before it was ready")
        yield started.result()
    except BaseException:
        stop.set()
        with contextlib.suppress(Exception):
            await task
        raise
    stop.set()
    await task  # raises if the service crashed while the block ran


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


C = TypeVar("C", bound=ServiceConfig)


def service_main(
    load: Callable[[], C],
    run: Callable[[C], Coroutine[Any, Any, None]],
    *,
    name: Callable[[C], str],
    service: str,
    fatal: tuple[type[BaseException], ...] = (),
) -> int:
    """A service's whole ``main()``: load the config (a bad one: message, exit 2), set up
    logging under ``name(cfg)`` and tracing (from ``OTEL_*``; ``service`` is its default
    ``service.name``, ``name(cfg)`` its instance id), then :func:`run_main`."""
    try:
        cfg = load()
        check_security_files(cfg)
    except ConfigError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    setup_logging(cfg.log_level, service=name(cfg))
    tune_process(cfg)
    with process_tracing(
        service, instance_id=name(cfg), attributes={"service.namespace": cfg.etcd.cluster}
    ) as ok:
        if not ok:
            return 2
        return run_main(lambda: run(cfg), etcd_endpoints=cfg.etcd.endpoints, fatal=fatal)


def tune_process(cfg: ServiceConfig) -> None:
    """The interpreter settings of a service process: its garbage collector and the GIL's
    switch interval (at start, by the service's command; not when embedded in a program)."""
    gc_tuning.tune(cfg.gc)
    if cfg.gil_switch_interval_ms:
        sys.setswitchinterval(cfg.gil_switch_interval_ms / 1000.0)


def run_main(
    main: Callable[[], Coroutine[Any, Any, None]],
    *,
    etcd_endpoints: list[str],
    fatal: tuple[type[BaseException], ...] = (),
) -> int:
    """Run a service's main coroutine; map how it ended to an exit code and a clear message.

    ``fatal`` lists further exceptions that mean "failed" (logged, exit 1), besides
    :class:`ServiceFailure`.
    """
    failures: tuple[type[BaseException], ...] = (ServiceFailure, *fatal)
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(main())
    except KeyboardInterrupt:  # interrupted before the signal handlers were installed
        return 0
    except (MetadataUnavailable, Timeout) as exc:
        log.error("%s", exc.message)
        print(
            f"error: {exc.message}\nhint: is etcd running at {','.join(etcd_endpoints)}? "
            "pass --etcd-endpoints, or start a local cluster with `danube-local up`",
            file=sys.stderr,
        )
        return 1
    except DanubeError as exc:
        log.error("%s", exc.message)
        return 1
    except OSError as exc:  # e.g. the port is in use
        log.error("%s", exc)
        return 1
    except failures as exc:
        log.error("%s", exc)
        return 1
    return 0
