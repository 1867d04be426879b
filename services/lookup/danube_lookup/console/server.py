"""The web console's HTTP routes on the lookup's HTTP endpoint: the single-page app (``/``,
``/assets/...``, files packaged with this module) and its JSON API (``/api/...``).

The API is a thin proxy: each route makes one call to this lookup's own admin API over a
loopback channel (:class:`~danube_lookup.console.api.ConsoleApi`), forwarding the browser's
``Authorization: Bearer`` header. With TLS on, the channel trusts ``tls.ca_file`` and checks the
admin port's certificate against ``advertised_host``, but presents no client certificate, so
the only identity the admin API sees is the user's token. Errors become HTTP statuses with a
JSON body ``{"error": {"code", "status", "message", "retryable"}}``
(:func:`~danube_lookup.console.mapping.http_status`).

Actions are POSTs with a JSON body (``Content-Type: application/json``): a page on another site
cannot send one without the browser asking first (CORS), and the console allows no other
origin. Every answer carries a restrictive Content-Security-Policy and no caching of API data.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from typing import Any

import grpc
import grpc.aio
from aiohttp import web

from danube_common.errors import DanubeError, Internal, InvalidArgument, NotFound
from danube_common.grpc_util import CHANNEL_OPTIONS, open_channel
from danube_common.security.tls import TlsConfig, load_material
from danube_lookup.config import LookupConfig
from danube_lookup.console.api import AdminStubs, ConsoleApi
from danube_lookup.console.mapping import (
    admin_target,
    body_bool,
    body_string,
    error_json,
    http_status,
    query_limit,
    topic_path_name,
)

log = logging.getLogger(__name__)

#: Plans the planner page lists by default (newest first), and the most a request may ask for.
DEFAULT_PLANS = 20
MOST_PLANS = 200
BROKER_STATES = ("draining", "active")

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}

Handler = Callable[[web.Request], Awaitable[Any]]


# ------------------------------------------------------------------ static files
@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


def load_assets(root: Traversable | None = None) -> dict[str, Asset]:
    """Every file under ``static/`` by its path there (``app.js``, ``js/chart.js``), read once:
    they are package data, found the same way in an editable and a normal install."""
    if root is None:
        root = importlib.resources.files("danube_lookup.console").joinpath("static")
    assets: dict[str, Asset] = {}

    def walk(node: Traversable, prefix: str) -> None:
        for child in node.iterdir():
            path = f"{prefix}{child.name}"
            if child.is_dir():
                walk(child, f"{path}/")
                continue
            suffix = "." + child.name.rpartition(".")[2]
            if suffix not in CONTENT_TYPES:
                continue
            body = child.read_bytes()
            etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
            assets[path] = Asset(body, CONTENT_TYPES[suffix], etag)

    walk(root, "")
    if "index.html" not in assets:
        raise RuntimeError(
            f"the web console's files are missing (no index.html in {root}): reinstall danube-py "
            "(its package data danube_lookup/console/static/ was not installed)"
        )
    return assets


# ------------------------------------------------------------------ answers
def _headers(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**SECURITY_HEADERS, **(extra or {})}


def json_response(status: int, body: Any) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(body, separators=(",", ":")).encode(),
        content_type="application/json",
        headers=_headers({"Cache-Control": "no-store"}),
    )


def error_response(err: DanubeError) -> web.Response:
    resp = json_response(http_status(err), error_json(err))
    if resp.status == 401:
        resp.headers["WWW-Authenticate"] = "Bearer"
    return resp


def api_route(fn: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """``fn`` returns the JSON body of a 200; a DanubeError it raises becomes the error answer."""

    async def handler(request: web.Request) -> web.StreamResponse:
        try:
            return json_response(200, await fn(request))
        except DanubeError as exc:
            return error_response(exc)
        except Exception as exc:
            log.exception("console: %s %s failed", request.method, request.path)
            return error_response(Internal(f"the console failed: {type(exc).__name__}: {exc}"))

    return handler


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object body. Actions must send ``Content-Type: application/json``
    (which no cross-site form can)."""
    if request.content_type != "application/json":
        raise InvalidArgument(
            f"send the body as JSON with Content-Type: application/json (got {request.content_type!r})"
        )
    try:
        body = await request.json()
    except ValueError as exc:
        raise InvalidArgument(f"the body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidArgument("the body must be a JSON object")
    return body


# ------------------------------------------------------------------ the console
def admin_channel(cfg: LookupConfig, admin_port: int) -> tuple[str, grpc.aio.Channel]:
    """(target, channel) of the console's loopback channel to the admin port."""
    target = admin_target(cfg.admin_listen_addr, admin_port)
    if not cfg.tls.enabled:
        return target, open_channel(target)
    return target, open_channel(
        target, browser_credentials(cfg.tls), options=[*CHANNEL_OPTIONS, *name_override(cfg, target)]
    )


def browser_credentials(tls: TlsConfig) -> grpc.ChannelCredentials:
    """Trust ``tls.ca_file`` (else the system's roots); present no client certificate."""
    return grpc.ssl_channel_credentials(root_certificates=load_material(tls).ca)


def name_override(cfg: LookupConfig, target: str) -> list[tuple[str, str]]:
    """Check the admin port's certificate against ``advertised_host`` (the name clients reach
    this lookup by) when the console dials another address."""
    host = target.rpartition(":")[0].removeprefix("[").removesuffix("]")
    if cfg.advertised_host == host:
        return []
    return [("grpc.ssl_target_name_override", cfg.advertised_host)]


class Console:
    """The console's routes; :meth:`aclose` closes its channel (after the HTTP endpoint)."""

    def __init__(
        self,
        api: ConsoleApi,
        *,
        auth_enabled: bool,
        channel: grpc.aio.Channel | None = None,
        assets: dict[str, Asset] | None = None,
    ) -> None:
        self.api = api
        self.auth_enabled = auth_enabled
        self._channel = channel
        self.assets = load_assets() if assets is None else assets

    @classmethod
    def open(cls, cfg: LookupConfig, admin_port: int) -> Console:
        target, channel = admin_channel(cfg, admin_port)
        api = ConsoleApi(AdminStubs.on(channel), timeout_s=cfg.console.rpc_timeout_s, target=target)
        return cls(api, auth_enabled=cfg.auth.enabled, channel=channel)

    async def aclose(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()

    def routes(self) -> list[web.RouteDef]:
        a = api_route
        return [
            web.get("/", self._index),
            web.get("/assets/{path:.+}", self._asset),
            web.get("/api/info", a(self._info)),
            web.get("/api/brokers", a(self._brokers)),
            web.post("/api/brokers/{broker_id}/state", a(self._set_broker_state)),
            web.get("/api/leaders", a(self._leaders)),
            web.get("/api/namespaces", a(self._namespaces)),
            web.get("/api/topics", a(self._topics)),
            web.get("/api/topics/{namespace}/{topic}", a(self._topic)),
            web.get("/api/topics/{namespace}/{topic}/stats", a(self._topic_stats)),
            web.post("/api/topics/{namespace}/{topic}/move", a(self._move_topic)),
            web.get("/api/load-report", a(self._load_report)),
            web.get("/api/plans", a(self._plans)),
            web.post("/api/plans/{plan_id}/apply", a(self._apply_plan)),
            web.post("/api/rebalance", a(self._rebalance)),
            web.route("*", "/api/{tail:.*}", a(self._no_route)),
        ]

    # ------------------------------------------------------------------ the app
    def _file(self, request: web.Request, path: str) -> web.StreamResponse:
        asset = self.assets.get(path)
        if asset is None:
            return web.Response(status=404, text=f"no console file {path}\n", headers=_headers())
        headers = _headers({"ETag": asset.etag, "Cache-Control": "no-cache"})
        if request.headers.get("If-None-Match") == asset.etag:
            return web.Response(status=304, headers=headers)
        return web.Response(body=asset.body, headers={**headers, "Content-Type": asset.content_type})

    async def _index(self, request: web.Request) -> web.StreamResponse:
        return self._file(request, "index.html")

    async def _asset(self, request: web.Request) -> web.StreamResponse:
        return self._file(request, request.match_info["path"])

    # ------------------------------------------------------------------ API
    async def _info(self, request: web.Request) -> dict[str, Any]:
        """What the app needs before its first call: whether to ask for a token."""
        return {"auth": self.auth_enabled}

    async def _brokers(self, request: web.Request) -> dict[str, Any]:
        return await self.api.brokers(_auth(request))

    async def _set_broker_state(self, request: web.Request) -> dict[str, Any]:
        state = body_string(await json_body(request), "state", allowed=BROKER_STATES)
        return await self.api.set_broker_state(_auth(request), request.match_info["broker_id"], state)

    async def _leaders(self, request: web.Request) -> dict[str, Any]:
        return await self.api.leaders(_auth(request))

    async def _namespaces(self, request: web.Request) -> dict[str, Any]:
        return await self.api.namespaces(_auth(request))

    async def _topics(self, request: web.Request) -> dict[str, Any]:
        return await self.api.topics(_auth(request), request.query.get("namespace", ""))

    async def _topic(self, request: web.Request) -> dict[str, Any]:
        return await self.api.topic(_auth(request), _topic_name(request))

    async def _topic_stats(self, request: web.Request) -> dict[str, Any]:
        return await self.api.topic_stats(_auth(request), _topic_name(request))

    async def _move_topic(self, request: web.Request) -> dict[str, Any]:
        to_broker = body_string(await json_body(request), "to_broker")
        return await self.api.move_topic(_auth(request), _topic_name(request), to_broker)

    async def _load_report(self, request: web.Request) -> dict[str, Any]:
        return await self.api.load_report(_auth(request))

    async def _plans(self, request: web.Request) -> dict[str, Any]:
        limit = query_limit(request.query.get("limit"), default=DEFAULT_PLANS, most=MOST_PLANS)
        return await self.api.plans(_auth(request), limit)

    async def _apply_plan(self, request: web.Request) -> dict[str, Any]:
        await json_body(request)  # nothing in it, but only the app can send one
        return await self.api.apply_plan(_auth(request), request.match_info["plan_id"])

    async def _rebalance(self, request: web.Request) -> dict[str, Any]:
        dry_run = body_bool(await json_body(request), "dry_run", default=True)
        return await self.api.request_rebalance(_auth(request), dry_run=dry_run)

    async def _no_route(self, request: web.Request) -> dict[str, Any]:
        raise NotFound(f"no console API route {request.method} {request.path}")


def _auth(request: web.Request) -> str | None:
    return request.headers.get("Authorization")


def _topic_name(request: web.Request) -> str:
    return topic_path_name(request.match_info["namespace"], request.match_info["topic"])
