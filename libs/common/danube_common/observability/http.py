"""Every service's HTTP endpoint (aiohttp, in the service's event loop): ``/metrics``
(Prometheus text format from the service's own registry), ``/healthz``, and whatever the service
adds (the lookup's web console).

TLS follows the service's ``tls`` section (HTTPS with the same certificate). With ``auth``
enabled, ``/metrics`` needs a bearer token whose principal holds ``lookup`` on the cluster
(Prometheus: ``authorization: {credentials_file: ...}``); a route a service adds decides for
itself (the console forwards the caller's token to the admin API). ``/healthz`` is open. A
401/403 counts as a denial (``danube_authz_deny_total``), like a refused RPC.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from danube_common.errors import DanubeError
from danube_common.security.rbac import CLUSTER, Permission
from danube_common.security.tls import TlsConfig, load_material

if TYPE_CHECKING:
    from danube_common.security.interceptor import AuthInterceptor

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def server_ssl_context(tls: TlsConfig) -> ssl.SSLContext | None:
    """The HTTPS context of a service with TLS enabled (its certificate and key), else None."""
    if not tls.enabled:
        return None
    assert tls.cert_file is not None and tls.key_file is not None
    load_material(tls)  # ConfigError naming a bad file, as for the gRPC servers
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tls.cert_file, tls.key_file)
    return ctx


class HttpEndpoint:
    """An aiohttp server with ``/metrics`` and ``/healthz``; :meth:`add_routes` before
    :meth:`start`. ``auth`` (the service's AuthInterceptor, None with auth off) guards
    ``/metrics``."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        tls: TlsConfig | None = None,
        auth: AuthInterceptor | None = None,
        service: str = "",
    ) -> None:
        self.registry = registry
        self.tls = tls or TlsConfig()
        self.auth = auth if auth is not None and auth.authenticator is not None else None
        self.service = service
        self.app = web.Application(client_max_size=1024 * 1024)
        self.app.router.add_get("/metrics", self._metrics)
        self.app.router.add_get("/healthz", self._healthz)
        self._runner: web.AppRunner | None = None
        #: ``host:port`` to reach it at (the real port when asked for port 0); "" before
        #: :meth:`start`.
        self.advertised = ""

    def add_routes(self, routes: Iterable[web.AbstractRouteDef]) -> None:
        self.app.router.add_routes(list(routes))

    @property
    def scheme(self) -> str:
        return "https" if self.tls.enabled else "http"

    async def start(self, addr: str, *, advertised_host: str | None = None) -> int:
        """Serve on ``addr`` (host:port; port 0 picks a free one); return the port. OSError when
        the port is taken, ConfigError when the TLS files are unusable. ``advertised_host``: the
        host in :attr:`advertised` (default: the listen host, 127.0.0.1 for a wildcard)."""
        host, _, port_s = addr.rpartition(":")
        host = host.removeprefix("[").removesuffix("]") or "0.0.0.0"
        ssl_ctx = server_ssl_context(self.tls)
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host, int(port_s), ssl_context=ssl_ctx, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise OSError(f"cannot listen on {addr} (HTTP: metrics/console): {exc.strerror or exc}") from exc
        self._runner = runner
        port = int(runner.addresses[0][1])
        shown = advertised_host or ("127.0.0.1" if host in ("0.0.0.0", "::", "") else host)
        self.advertised = f"[{shown}]:{port}" if ":" in shown else f"{shown}:{port}"
        log.info(
            "%s HTTP endpoint on %s://%s (/metrics)", self.service or "service", self.scheme, self.advertised
        )
        return port

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.advertised}" if self.advertised else ""

    async def aclose(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    # ------------------------------------------------------------------ handlers
    async def _healthz(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok\n")

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        refused = self.check_token(request, Permission.LOOKUP)
        if refused is not None:
            return refused
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def check_token(self, request: web.Request, permission: Permission) -> web.Response | None:
        """None when the request may go on (auth off, or a bearer token whose principal holds
        ``permission`` on the cluster); else the 401/403 answer, saying what to send."""
        if self.auth is None:
            return None
        assert self.auth.authenticator is not None and self.auth.authorizer is not None
        header = request.headers.get("Authorization")  # case-insensitive
        headers = {"authorization": header} if header is not None else {}
        try:
            principal = self.auth.authenticator.authenticate(headers, None)
            self.auth.check_expiry(principal)
        except DanubeError as exc:
            self.auth.denied(exc)
            return web.Response(status=401, text=f"{exc.message}\n", headers={"WWW-Authenticate": "Bearer"})
        try:
            self.auth.authorizer.require(principal, permission, CLUSTER)
        except DanubeError as exc:
            self.auth.denied(exc)
            return web.Response(status=403, text=f"{exc.message}\n")
        return None
