"""MetadataStore on etcd v3, through aetcd's generated etcd stubs on a grpc.aio channel.

We drive the KV, Lease and Watch stubs directly (rather than aetcd's higher-level client)
to own three things: a deadline on every call, watches that resume after a reconnect from
the last delivered revision, and mapping of every failure to our error classes.

Services open it with :meth:`EtcdStore.from_config`, which applies the TLS of ``etcd:``
(``ca_file``, the client certificate ``cert_file``/``key_file`` for etcd's
``--client-cert-auth``, ``server_name``). A TLS failure is reported with what to check (the CA,
the client certificate, the name), not only gRPC's text.

Tracing: while a sampled span is current, each unary call is a CLIENT child span (``etcd Range``,
``etcd Txn``, ...) naming the key(s) it touches, never a value (:func:`span_attributes`); with no
sampled span current (background loops) nothing is recorded. Watches and lease keep-alives are
streams: no spans.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

import grpc
import grpc.aio
from aetcd import rpc
from aetcd.utils import prefix_range_end
from opentelemetry.trace import SpanKind

from danube_common.config import EtcdConfig
from danube_common.errors import InvalidArgument, MetadataUnavailable, Timeout
from danube_common.metadata.store import (
    Compare,
    KeyValue,
    MetadataStore,
    Op,
    TxnResult,
    WatchCompacted,
    WatchEvent,
    encode_value,
)
from danube_common.observability import tracing
from danube_common.security.tls import TlsMaterial, load_pem_files

log = logging.getLogger(__name__)

_TARGETS = {
    "version": rpc.Compare.VERSION,
    "create": rpc.Compare.CREATE,
    "mod": rpc.Compare.MOD,
    "value": rpc.Compare.VALUE,
    "lease": rpc.Compare.LEASE,
}
_OPS = {"==": rpc.Compare.EQUAL, "!=": rpc.Compare.NOT_EQUAL, "<": rpc.Compare.LESS, ">": rpc.Compare.GREATER}

#: Keys per page of a prefix listing.
_PAGE_KEYS = 1000
#: Largest answer accepted from etcd (a page of big values, a large transaction).
_MAX_RECEIVE_BYTES = 64 * 1024 * 1024


_TRACER_NAME = "danube.etcd"
#: Keys named on the span of one transaction, at most (its op count is always there).
_SPAN_KEYS = 16


def _op_key(op: Any) -> bytes:
    which = op.WhichOneof("request")
    return bytes(getattr(op, which).key) if which else b""


def span_attributes(method: str, request: Any, target: str) -> dict[str, Any]:
    """The attributes of the span of one etcd call: the key(s) it names, never a value."""
    attrs: dict[str, Any] = {
        "db.system": "etcd",
        "db.system.name": "etcd",
        "db.operation.name": method,
        "server.address": target,
    }
    if method == "Txn":
        keys = [bytes(c.key) for c in request.compare]
        for branch in (request.success, request.failure):
            keys.extend(_op_key(op) for op in branch)
        unique = list(dict.fromkeys(k.decode(errors="replace") for k in keys if k))
        attrs["db.etcd.keys"] = unique[:_SPAN_KEYS]
        attrs["db.etcd.txn.compares"] = len(request.compare)
        attrs["db.etcd.txn.success_ops"] = len(request.success)
        attrs["db.etcd.txn.failure_ops"] = len(request.failure)
    elif method in ("Range", "Put", "DeleteRange"):
        attrs["db.etcd.key"] = bytes(request.key).decode(errors="replace")
        if method != "Put" and request.range_end:
            attrs["db.etcd.prefix"] = True
    elif method == "LeaseGrant":
        attrs["db.etcd.lease.ttl_s"] = int(request.TTL)
    return attrs


def _target(endpoints: Sequence[str]) -> str:
    """A gRPC target for one or several ``host:port`` endpoints (several: IPv4 literals only)."""
    eps = [e.removeprefix("http://").removeprefix("https://") for e in endpoints]
    if not eps:
        raise ValueError("no etcd endpoints configured")
    if len(eps) == 1:
        return eps[0]
    return "ipv4:" + ",".join(eps)


def etcd_tls_material(cfg: EtcdConfig) -> TlsMaterial | None:
    """The checked PEM files of the TLS to etcd (None: plaintext); ConfigError naming the
    file and what to do. Called at start-up, so a bad file stops the process (exit 2)."""
    if not cfg.tls_enabled:
        return None
    return load_pem_files(
        "etcd",
        cert_file=cfg.cert_file,
        key_file=cfg.key_file,
        ca_file=cfg.ca_file,
        off="unset etcd.ca_file, etcd.cert_file and etcd.key_file (and use host:port endpoints) "
        "to reach etcd in plaintext",
    )


def tls_hint(details: str, *, tls: bool) -> str:
    """What to check, for gRPC's text of a failed connection to etcd ("" when it does not
    look like a TLS problem)."""
    if not tls:
        if "Socket closed" in details:
            return " (if etcd serves TLS (https), set etcd.ca_file)"
        return ""
    if "CERTIFICATE_VERIFY_FAILED" in details:
        return (
            " (TLS: etcd's server certificate is not signed by a CA in etcd.ca_file: give the CA "
            "that signed etcd's --cert-file)"
        )
    if "Hostname Verification" in details:
        return (
            " (TLS: etcd's certificate does not name the host we dialled: set etcd.server_name to a "
            "name among its subject alternative names, or dial a name it carries)"
        )
    if "TSI_DATA_CORRUPTED" in details or "BAD_CERTIFICATE" in details or "CERTIFICATE_REQUIRED" in details:
        return (
            " (TLS: etcd closed the connection after the handshake: it probably requires a client "
            "certificate (--client-cert-auth) signed by its --trusted-ca-file: set etcd.cert_file and "
            "etcd.key_file)"
        )
    if "WRONG_VERSION_NUMBER" in details or "handshake" in details.lower():
        return " (TLS: the handshake with etcd failed: does etcd serve TLS (https) on this port?)"
    return ""


def _channel_options(server_name: str | None) -> list[tuple[str, Any]]:
    """The options of a channel to etcd (``server_name``: TLS only, see EtcdStore)."""
    options: list[tuple[str, Any]] = [
        ("grpc.keepalive_time_ms", 10_000),
        ("grpc.keepalive_timeout_ms", 5_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1_000),
        ("grpc.max_receive_message_length", _MAX_RECEIVE_BYTES),
    ]
    if server_name:
        options.append(("grpc.ssl_target_name_override", server_name))
    return options


def _credentials(cfg: EtcdConfig) -> grpc.ChannelCredentials | None:
    """``cfg``'s TLS as channel credentials (None: plaintext); its files are read and checked."""
    material = etcd_tls_material(cfg)
    if material is None:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=material.ca,
        private_key=material.private_key,
        certificate_chain=material.cert_chain,
    )


def _translate(exc: grpc.RpcError, target: str, timeout_s: float, *, tls: bool) -> Exception:
    """A failed etcd call (a grpc.aio or a blocking gRPC error) as one of our errors."""
    code: grpc.StatusCode = exc.code()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return Timeout(f"etcd at {target} did not answer within {timeout_s}s")
    details: str = exc.details() or ""
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE):
        return InvalidArgument(f"etcd refused the request: {details}")
    return MetadataUnavailable(f"etcd at {target} failed: {code.name}: {details}{tls_hint(details, tls=tls)}")


def _kv(kv: Any) -> KeyValue:
    return KeyValue(kv.key.decode(), kv.value, kv.create_revision, kv.mod_revision, kv.version, kv.lease)


class EtcdStore(MetadataStore):
    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        request_timeout_s: float = 5.0,
        watch_retry_max_s: float = 2.0,
        credentials: grpc.ChannelCredentials | None = None,
        server_name: str | None = None,
    ) -> None:
        """``credentials``: TLS (None: plaintext); ``server_name``: the name etcd's certificates
        are checked against instead of the endpoint's host (needed with several endpoints)."""
        self._target = _target(endpoints)
        self._timeout = request_timeout_s
        self._watch_retry_max_s = watch_retry_max_s
        self._tls = credentials is not None
        options = _channel_options(server_name if credentials is not None else None)
        if credentials is None:
            self._channel = grpc.aio.insecure_channel(self._target, options=options)
        else:
            self._channel = grpc.aio.secure_channel(self._target, credentials, options=options)
        self._kv_stub = rpc.KVStub(self._channel)
        self._lease_stub = rpc.LeaseStub(self._channel)
        self._watch_stub = rpc.WatchStub(self._channel)
        self._closed = False

    @classmethod
    def from_config(cls, cfg: EtcdConfig, *, watch_retry_max_s: float = 2.0) -> EtcdStore:
        """The store a service uses: ``cfg``'s endpoints, deadline and TLS (its files are read
        and checked here: ConfigError naming the file)."""
        return cls(
            cfg.endpoints,
            request_timeout_s=cfg.request_timeout_s,
            watch_retry_max_s=watch_retry_max_s,
            credentials=_credentials(cfg),
            server_name=cfg.server_name,
        )

    @property
    def target(self) -> str:
        return self._target

    @property
    def tls(self) -> bool:
        return self._tls

    async def _call(self, method: str, fn: Any, request: Any) -> Any:
        """One unary etcd call (``method``: its name in etcd's API, e.g. ``Txn``) with the
        deadline, errors translated; a CLIENT child span when a sampled span is current."""
        if tracing.in_sampled_span():
            return await self._traced_call(method, fn, request)
        try:
            return await fn(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as exc:
            raise self._translate(exc) from exc

    async def _traced_call(self, method: str, fn: Any, request: Any) -> Any:
        with tracing.tracer(_TRACER_NAME).start_as_current_span(
            f"etcd {method}", kind=SpanKind.CLIENT, attributes=span_attributes(method, request, self._target)
        ) as span:
            try:
                resp = await fn(request, timeout=self._timeout)
            except grpc.aio.AioRpcError as exc:
                raise self._translate(exc) from exc
            if method == "Txn":
                span.set_attribute("db.etcd.txn.succeeded", bool(resp.succeeded))
            return resp

    def _translate(self, exc: grpc.aio.AioRpcError) -> Exception:
        return _translate(exc, self._target, self._timeout, tls=self._tls)

    async def wait_ready(self, timeout_s: float) -> None:
        """Wait until etcd answers a read, or raise MetadataUnavailable."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last: Exception | None = None
        while loop.time() < deadline:
            try:
                await self.get("/__ping__")
                return
            except (MetadataUnavailable, Timeout) as exc:
                last = exc
                await asyncio.sleep(0.1)
        raise MetadataUnavailable(f"etcd at {self._target} not reachable after {timeout_s}s: {last}")

    # ---- reads and writes
    async def get(self, key: str) -> KeyValue | None:
        resp = await self._call("Range", self._kv_stub.Range, rpc.RangeRequest(key=key.encode()))
        return _kv(resp.kvs[0]) if resp.kvs else None

    async def get_prefix(self, prefix: str) -> tuple[list[KeyValue], int]:
        """Every key under ``prefix``, read in pages of ``_PAGE_KEYS`` at one revision (a large
        prefix never hits gRPC's message size limit, and the listing is still one snapshot)."""
        k = prefix.encode()
        end = prefix_range_end(k)
        out: list[KeyValue] = []
        revision = 0
        start = k
        while True:
            req = rpc.RangeRequest(
                key=start,
                range_end=end,
                sort_order=rpc.RangeRequest.ASCEND,
                sort_target=rpc.RangeRequest.KEY,
                limit=_PAGE_KEYS,
                revision=revision,
            )
            resp = await self._call("Range", self._kv_stub.Range, req)
            if not revision:
                revision = int(resp.header.revision)
            out.extend(_kv(kv) for kv in resp.kvs)
            if not resp.more or not resp.kvs:
                return out, revision
            start = resp.kvs[-1].key + b"\0"

    async def put(self, key: str, value: bytes | str | dict[str, Any] | list[Any], *, lease: int = 0) -> int:
        req = rpc.PutRequest(key=key.encode(), value=encode_value(value), lease=lease)
        resp = await self._call("Put", self._kv_stub.Put, req)
        return int(resp.header.revision)

    async def delete(self, key: str) -> bool:
        resp = await self._call(
            "DeleteRange", self._kv_stub.DeleteRange, rpc.DeleteRangeRequest(key=key.encode())
        )
        return bool(resp.deleted)

    async def delete_prefix(self, prefix: str) -> int:
        k = prefix.encode()
        resp = await self._call(
            "DeleteRange",
            self._kv_stub.DeleteRange,
            rpc.DeleteRangeRequest(key=k, range_end=prefix_range_end(k)),
        )
        return int(resp.deleted)

    @staticmethod
    def _compare(c: Compare) -> Any:
        msg = rpc.Compare(key=c.key.encode(), target=_TARGETS[c.target], result=_OPS[c.op])
        if c.target == "version":
            msg.version = int(c.value)
        elif c.target == "create":
            msg.create_revision = int(c.value)
        elif c.target == "mod":
            msg.mod_revision = int(c.value)
        elif c.target == "lease":
            msg.lease = int(c.value)
        else:
            if not isinstance(c.value, bytes):
                raise TypeError("a value compare needs bytes")
            msg.value = c.value
        return msg

    @staticmethod
    def _op(op: Op) -> Any:
        if op.kind == "put":
            return rpc.RequestOp(
                request_put=rpc.PutRequest(key=op.key.encode(), value=op.value, lease=op.lease)
            )
        if op.kind == "delete":
            return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=op.key.encode()))
        if op.kind == "delete_prefix":
            k = op.key.encode()
            return rpc.RequestOp(
                request_delete_range=rpc.DeleteRangeRequest(key=k, range_end=prefix_range_end(k))
            )
        return rpc.RequestOp(request_range=rpc.RangeRequest(key=op.key.encode()))

    async def txn(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        req = rpc.TxnRequest(
            compare=[self._compare(c) for c in compares],
            success=[self._op(o) for o in success],
            failure=[self._op(o) for o in failure],
        )
        resp = await self._call("Txn", self._kv_stub.Txn, req)
        gets: list[KeyValue | None] = []
        for r in resp.responses:
            if r.WhichOneof("response") == "response_range":
                kvs = r.response_range.kvs
                gets.append(_kv(kvs[0]) if kvs else None)
        return TxnResult(bool(resp.succeeded), int(resp.header.revision), gets)

    # ---- leases
    async def grant_lease(self, ttl_s: int) -> int:
        resp = await self._call("LeaseGrant", self._lease_stub.LeaseGrant, rpc.LeaseGrantRequest(TTL=ttl_s))
        if resp.error:
            raise MetadataUnavailable(f"etcd refused a lease: {resp.error}")
        return int(resp.ID)

    async def keepalive(self, lease_id: int) -> int:
        try:
            call = self._lease_stub.LeaseKeepAlive(
                iter([rpc.LeaseKeepAliveRequest(ID=lease_id)]), timeout=self._timeout
            )
            async for reply in call:
                return int(reply.TTL) if reply.TTL > 0 else 0
            return 0
        except grpc.aio.AioRpcError as exc:
            raise self._translate(exc) from exc

    async def revoke_lease(self, lease_id: int) -> None:
        await self._call("LeaseRevoke", self._revoke, rpc.LeaseRevokeRequest(ID=lease_id))

    async def _revoke(self, request: Any, *, timeout: float) -> Any:
        """LeaseRevoke, where an unknown lease (NOT_FOUND) is not an error."""
        try:
            return await self._lease_stub.LeaseRevoke(request, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise

    # ---- watches
    async def watch_prefix(
        self, prefix: str, *, start_revision: int | None = None
    ) -> AsyncIterator[WatchEvent]:
        self.open_watches += 1
        try:
            async for ev in self._watch_prefix(prefix, start_revision):
                yield ev
        finally:
            self.open_watches -= 1

    async def _watch_prefix(self, prefix: str, start_revision: int | None) -> AsyncIterator[WatchEvent]:
        key = prefix.encode()
        next_rev = start_revision
        if next_rev is None:
            _, rev = await self.get_prefix("/__watch_anchor__/")
            next_rev = rev + 1
        backoff = 0.05
        while not self._closed:
            stop = asyncio.Event()

            async def requests(from_rev: int = next_rev, stop: asyncio.Event = stop) -> AsyncIterator[Any]:
                yield rpc.WatchRequest(
                    create_request=rpc.WatchCreateRequest(
                        key=key, range_end=prefix_range_end(key), start_revision=from_rev
                    )
                )
                await stop.wait()

            call = self._watch_stub.Watch(requests())
            try:
                async for resp in call:
                    if resp.compact_revision:
                        raise WatchCompacted(
                            f"watch on {prefix} from revision {next_rev} was compacted "
                            f"(oldest available: {resp.compact_revision})",
                            compact_revision=int(resp.compact_revision),
                        )
                    if resp.canceled:
                        raise MetadataUnavailable(
                            f"etcd cancelled the watch on {prefix}: {resp.cancel_reason}"
                        )
                    for ev in resp.events:
                        kv = ev.kv
                        rev = int(kv.mod_revision)
                        kind: Literal["put", "delete"] = "delete" if ev.type == rpc.Event.DELETE else "put"
                        yield WatchEvent(kind, kv.key.decode(), kv.value, rev, int(kv.create_revision))
                        next_rev = rev + 1
                    backoff = 0.05
            except grpc.aio.AioRpcError as exc:
                if self._closed:
                    return
                log.warning(
                    "etcd watch on %s broke (%s); resuming from revision %d",
                    prefix,
                    exc.code().name,
                    next_rev,
                )
            finally:
                stop.set()
                call.cancel()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._watch_retry_max_s)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._channel.close()


class EtcdKeepalive:
    """Lease renewals over a *blocking* gRPC channel: the client of a lease's renewal thread
    (``KeptLease(keepalive_client=...)``), made and used on that thread.

    Not a grpc.aio channel: every event loop that uses grpc.aio in a process puts a reader on
    grpc's one completion-queue socket, so a second loop (the renewal thread's) is woken by every
    gRPC event of the main loop and hands most of them back to it through
    ``call_soon_threadsafe``: measured on the broker, ~800 extra wake-ups per second and GIL
    hand-offs at 500 msg/s. A blocking call waits on its own completion queue, without the GIL,
    and wakes only for its own answer. ``keepalive`` blocks its caller (the renewal thread's
    private loop, which has nothing else to run) for at most ``timeout_s``."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        timeout_s: float = 5.0,
        credentials: grpc.ChannelCredentials | None = None,
        server_name: str | None = None,
    ) -> None:
        self._target = _target(endpoints)
        self._timeout = timeout_s
        self._tls = credentials is not None
        options = _channel_options(server_name if credentials is not None else None)
        if credentials is None:
            self._channel = grpc.insecure_channel(self._target, options=options)
        else:
            self._channel = grpc.secure_channel(self._target, credentials, options=options)
        self._lease_stub = rpc.LeaseStub(self._channel)

    @classmethod
    def from_config(cls, cfg: EtcdConfig, *, timeout_s: float | None = None) -> EtcdKeepalive:
        """``cfg``'s endpoints and TLS; each renewal waits ``timeout_s`` at most (default: the
        config's request deadline)."""
        return cls(
            cfg.endpoints,
            timeout_s=cfg.request_timeout_s if timeout_s is None else timeout_s,
            credentials=_credentials(cfg),
            server_name=cfg.server_name,
        )

    async def keepalive(self, lease_id: int) -> int:
        """Renew ``lease_id``; its remaining TTL in seconds (0: it is gone). Blocks."""
        call = self._lease_stub.LeaseKeepAlive(
            iter([rpc.LeaseKeepAliveRequest(ID=lease_id)]), timeout=self._timeout
        )
        try:
            for reply in call:
                return int(reply.TTL) if reply.TTL > 0 else 0
            return 0
        except grpc.RpcError as exc:
            raise _translate(exc, self._target, self._timeout, tls=self._tls) from exc
        finally:
            call.cancel()

    async def aclose(self) -> None:
        self._channel.close()
