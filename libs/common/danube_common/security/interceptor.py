"""The server interceptor that authenticates every call and authorizes it by :data:`RULES`.

**Authentication** (who is calling), in this order:

1. a verified client certificate naming one of ``internal_identities`` -> the cluster member
   ``broker_internal:{name}`` (mTLS: the certificate is the proof, no token is looked at);
2. ``authorization: Bearer <jwt>`` -> the token's principal (``{principal_type}:{principal_name}``);
3. any other verified client certificate -> ``user:{common name}`` (with ``client_cert_users``);
4. nothing: UNAUTHENTICATED, reason ``missing`` ("Authentication credentials are missing", as
   Danube says).

A client certificate is only seen when the server requires one (``tls.require_client_cert``);
the header ``x-danube-internal-broker`` that Danube uses is not trusted (cluster members are
recognised by their certificates). With auth disabled the interceptor lets every call through
unchecked (anonymous).

**Authorization** needs the request (the topic of CreateProducer, the namespace of
CreateNamespace, ...), which a grpc.aio interceptor does not see, so the interceptor wraps the
method handler: a unary request is checked before the servicer runs; a client stream is checked
on its first message before the servicer runs and on every later message whose target differs
from the last one checked (or when a re-check is due). Server streams are re-checked before a
response is sent once ``stream_recheck_interval_s`` has passed since the last check, so a
revoked binding or an expired token ends a running stream. A method without a rule is denied.
A call naming only a producer or consumer id is checked on the handle's topic, and the handle
must be the caller's own (its creator; or a super admin or ``manage_topic`` holder:
:mod:`.handles`). A method with a rule that this server does not serve (CreateProducer sent to
the lookup service) is authenticated and authorized like a served one before it gets
UNIMPLEMENTED, so a client that falls back to the wrong server still learns why it was refused.

Failures are aborted here (the interceptor is outermost): UNAUTHENTICATED with the reason,
PERMISSION_DENIED naming principal, permission and resource; both with Danube's trailing
``x-danube-error-code``; each refusal is reported to :attr:`AuthInterceptor.on_denied` when set
(the service's denial counter). The authenticated principal of the running call is
:func:`current_principal` for servicers.
"""

from __future__ import annotations

import contextvars
import fnmatch
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

import grpc
import grpc.aio
from google.protobuf import descriptor, descriptor_pool, message_factory

from danube_common.errors import DanubeError, PermissionDenied, status_metadata
from danube_common.grpc_wrap import rewrap
from danube_common.security.config import AuthConfig
from danube_common.security.handles import check_handle_use
from danube_common.security.principal import (
    AuthSource,
    Principal,
    PrincipalType,
    validate_principal_name,
)
from danube_common.security.rbac import CLUSTER, Authorizer, PolicySource
from danube_common.security.rules import RULES, Handle, HandleInfo, HandleResolver, Rule, Target
from danube_common.security.tls import PeerIdentity, peer_identity
from danube_common.security.tokens import AuthFailure, TokenVerifier, parse_bearer, unauthenticated

log = logging.getLogger(__name__)

AUTHORIZATION = "authorization"
_CURRENT: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("danube_principal", default=None)


def current_principal() -> Principal | None:
    """The principal of the RPC being served (None outside an authenticated call)."""
    return _CURRENT.get()


class Authenticator:
    """Metadata and peer certificate -> Principal (pure: the interceptor extracts both)."""

    def __init__(
        self,
        *,
        verifier: TokenVerifier | None,
        internal_identities: Iterable[str] = (),
        client_cert_users: bool = True,
    ) -> None:
        self.verifier = verifier
        self.internal_identities = tuple(internal_identities)
        self.client_cert_users = client_cert_users

    def _internal_name(self, peer: PeerIdentity) -> str | None:
        for name in peer.names:
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in self.internal_identities):
                return name
        return None

    def authenticate(self, metadata: Mapping[str, str], peer: PeerIdentity | None) -> Principal:
        if peer is not None:
            internal = self._internal_name(peer)
            if internal is not None:
                return Principal(PrincipalType.BROKER_INTERNAL, internal, AuthSource.MTLS, subject=internal)
        header = metadata.get(AUTHORIZATION)
        if header is not None:
            token = parse_bearer(header)
            if self.verifier is None:
                raise unauthenticated(
                    AuthFailure.TOKENS_NOT_ACCEPTED,
                    "this server accepts no bearer tokens (no JWT key is configured): "
                    "authenticate with a client certificate",
                )
            claims = self.verifier.verify(token)
            return Principal(
                claims.principal_type,
                claims.principal_name,
                AuthSource.JWT,
                subject=claims.subject,
                expires_at=claims.expires_at,
            )
        if peer is not None and self.client_cert_users:
            name = peer.common_name or peer.names[0]
            try:
                validate_principal_name(name)
            except DanubeError:
                raise unauthenticated(
                    AuthFailure.UNTRUSTED_CERTIFICATE,
                    f"the client certificate's name {name!r} is not a usable principal name; send a bearer token",
                ) from None
            return Principal(PrincipalType.USER, name, AuthSource.MTLS, subject=name)
        raise unauthenticated(
            AuthFailure.MISSING,
            "Authentication credentials are missing: send `authorization: Bearer <jwt>` "
            "(get a token with `danube-admin security tokens create`)",
        )


def _metadata(context: grpc.aio.ServicerContext) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in context.invocation_metadata() or ():
        key, value = item[0], item[1]
        if isinstance(value, str):
            out[key.lower()] = value
    return out


class _Gate:
    """One call's authorization state: who, under which rule, what was last checked when."""

    __slots__ = ("_icp", "last_check", "last_target", "principal", "rule")

    def __init__(self, icp: AuthInterceptor, rule: Rule, principal: Principal) -> None:
        self._icp = icp
        self.rule = rule
        self.principal = principal
        self.last_target: Target | None = None
        self.last_check = 0.0

    def _due(self) -> bool:
        return time.monotonic() - self.last_check >= self._icp.stream_recheck_interval_s

    def check(self, request: Any, *, force: bool = False) -> None:
        target = self.rule.target(request)
        if not force and target == self.last_target and not self._due():
            return
        self._icp.check_expiry(self.principal)
        self._icp.authorize(self.principal, self.rule, target)
        self.last_target, self.last_check = target, time.monotonic()

    def recheck(self) -> None:
        """Before a response of a long stream: the last target again, when due."""
        if self.last_target is None or not self._due():
            return
        self._icp.check_expiry(self.principal)
        self._icp.authorize(self.principal, self.rule, self.last_target)
        self.last_check = time.monotonic()


async def _abort(context: grpc.aio.ServicerContext, err: DanubeError) -> None:
    await context.abort(err.grpc_status, str(err), trailing_metadata=status_metadata(err))


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Authentication + RBAC for every RPC (pass ``authenticator=None`` to disable both)."""

    def __init__(
        self,
        *,
        authenticator: Authenticator | None,
        authorizer: Authorizer | None,
        rules: Mapping[str, Rule] = RULES,
        resolve_handle: HandleResolver | None = None,
        stream_recheck_interval_s: float = 0.5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if authenticator is not None and authorizer is None:
            raise ValueError("an authenticator needs an authorizer (default deny needs a policy)")
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.rules = rules
        #: Producer/consumer id -> its topic and creator, from the serving broker. Unset:
        #: id-only calls are checked at cluster scope (topic-scoped grants do not reach them).
        self.resolve_handle = resolve_handle
        self.stream_recheck_interval_s = stream_recheck_interval_s
        self._clock = clock
        #: Told the status of every refusal (UNAUTHENTICATED, PERMISSION_DENIED): the service's
        #: metrics set it (None: not counted).
        self.on_denied: Callable[[grpc.StatusCode], None] | None = None

    @classmethod
    def from_config(
        cls,
        cfg: AuthConfig,
        policy: PolicySource,
        *,
        resolve_handle: HandleResolver | None = None,
        rules: Mapping[str, Rule] = RULES,
    ) -> AuthInterceptor:
        """Build from the ``auth:`` section (reads the JWT key file: ConfigError naming it)."""
        if not cfg.enabled:
            return cls(authenticator=None, authorizer=None, rules=rules)
        authenticator = Authenticator(
            verifier=cfg.jwt.verifier() if cfg.jwt is not None else None,
            internal_identities=cfg.internal_identities,
            client_cert_users=cfg.client_cert_users,
        )
        return cls(
            authenticator=authenticator,
            authorizer=Authorizer(policy, super_admins=cfg.super_admins),
            rules=rules,
            resolve_handle=resolve_handle,
            stream_recheck_interval_s=cfg.stream_recheck_interval_s,
        )

    # ------------------------------------------------------------------ checks
    def authenticate(self, context: grpc.aio.ServicerContext) -> Principal:
        assert self.authenticator is not None
        return self.authenticator.authenticate(_metadata(context), peer_identity(context))

    def denied(self, err: DanubeError) -> None:
        """Report a refusal (``err``: its status) to :attr:`on_denied`."""
        if self.on_denied is not None:
            self.on_denied(err.grpc_status)

    def check_expiry(self, principal: Principal) -> None:
        if principal.expires_at is not None and self._clock() >= principal.expires_at:
            raise unauthenticated(AuthFailure.EXPIRED, "the token expired during the call; get a new token")

    def authorize(self, principal: Principal, rule: Rule, target: Target) -> None:
        """The rule's permission on the target; for a handle, on its topic, and then the handle
        must be the caller's (:mod:`.handles`)."""
        assert self.authorizer is not None
        if isinstance(target, tuple):  # a multiplexed frame: every handle it names
            for one in target:
                self.authorize(principal, rule, one)
            return
        if not isinstance(target, Handle):
            self.authorizer.require(principal, rule.permission, target)
            return
        if self.resolve_handle is None:
            self.authorizer.require(principal, rule.permission, CLUSTER)
            return
        info = self.resolve_handle(target)
        if info is None:  # not attached here: the servicer answers NOT_FOUND
            return
        self.authorizer.require(principal, rule.permission, info.topic)
        check_handle_use(self.authorizer, principal, target, info)

    def check_takeover(self, principal: Principal, handle: Handle, info: HandleInfo, name: str) -> None:
        """For the broker: may ``principal`` take over the attached ``handle`` by its ``name``
        (CreateProducer / Subscribe naming another principal's producer or consumer)?
        PermissionDenied if not."""
        if self.authorizer is not None:
            check_handle_use(self.authorizer, principal, handle, info, by_name=name)

    async def _admit(self, context: grpc.aio.ServicerContext, method: str) -> _Gate:
        """Authenticate; abort the call on failure (also for methods without a rule)."""
        try:
            principal = self.authenticate(context)
        except DanubeError as err:
            log.info("refused %s: %s", method, err)
            self.denied(err)
            await _abort(context, err)
            raise  # unreachable: abort raises
        rule = self.rules.get(method)
        if rule is None:
            log.warning("refused %s for %s: no rule", method, principal)
            no_rule = PermissionDenied(
                f"{method} has no authorization rule: denied to everyone (default deny)"
            )
            self.denied(no_rule)
            await _abort(context, no_rule)
        assert rule is not None
        # grpc.aio serves each RPC in its own task: the value lives exactly as long as the call.
        _CURRENT.set(principal)
        return _Gate(self, rule, principal)

    async def _check(
        self, context: grpc.aio.ServicerContext, method: str, gate: _Gate, fn: Callable[[], None]
    ) -> None:
        try:
            fn()
        except DanubeError as err:
            log.info("refused %s for %s: %s", method, gate.principal, err)
            self.denied(err)
            await _abort(context, err)

    # ------------------------------------------------------------------ wrapping
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if self.authenticator is None:
            return handler
        method = handler_call_details.method
        if handler is None:
            return self._unserved(method)
        return rewrap(
            handler,
            unary_unary=lambda b: self._unary_unary(method, b),
            unary_stream=lambda b: self._unary_stream(method, b),
            stream_unary=lambda b: self._stream_unary(method, b),
            stream_stream=lambda b: self._stream_stream(method, b),
        )

    def _unserved(self, method: str) -> grpc.RpcMethodHandler | None:
        """A method with a rule that this server does not serve: refuse the caller as the serving
        server would (UNAUTHENTICATED, PERMISSION_DENIED), and only then UNIMPLEMENTED.

        The real danube-client swallows a refused TopicLookup and sends CreateProducer to the
        service URL (the lookup service, which serves no producers): without this it reports
        "Method not found!" instead of why it was refused. Id-only targets are not resolved here.
        """
        desc = _method_descriptor(method)
        if method not in self.rules or desc is None or desc.client_streaming:
            return None  # grpc answers UNIMPLEMENTED

        async def refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:
            gate = await self._admit(context, method)

            def check() -> None:
                if not isinstance(gate.rule.target(request), Handle):
                    gate.check(request, force=True)

            await self._check(context, method, gate, check)
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not served here")

        async def refuse_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            await refuse(request, context)
            yield  # unreachable: refuse aborts

        request_class = message_factory.GetMessageClass(desc.input_type)
        if desc.server_streaming:
            return grpc.unary_stream_rpc_method_handler(
                refuse_stream, request_deserializer=request_class.FromString
            )
        return grpc.unary_unary_rpc_method_handler(refuse, request_deserializer=request_class.FromString)

    def _unary_unary(self, method: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
        async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
            gate = await self._admit(context, method)
            await self._check(context, method, gate, lambda: gate.check(request, force=True))
            return await behavior(request, context)

        return wrapper

    def _unary_stream(self, method: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
        async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            gate = await self._admit(context, method)
            await self._check(context, method, gate, lambda: gate.check(request, force=True))
            async for item in behavior(request, context):
                await self._check(context, method, gate, gate.recheck)
                yield item

        return wrapper

    def _checked_requests(
        self,
        method: str,
        gate: _Gate,
        context: grpc.aio.ServicerContext,
        first: Any,
        rest: AsyncIterator[Any],
    ) -> AsyncIterator[Any]:
        async def requests() -> AsyncIterator[Any]:
            yield first
            async for req in rest:
                await self._check(context, method, gate, functools.partial(gate.check, req))
                yield req

        return requests()

    async def _first(
        self, method: str, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> tuple[_Gate, AsyncIterator[Any]]:
        gate = await self._admit(context, method)
        rest = request_iterator.__aiter__()
        try:
            first = await rest.__anext__()
        except StopAsyncIteration:
            return gate, _empty()
        await self._check(context, method, gate, lambda: gate.check(first, force=True))
        return gate, self._checked_requests(method, gate, context, first, rest)

    def _stream_unary(self, method: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
        async def wrapper(request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
            _gate, requests = await self._first(method, request_iterator, context)
            return await behavior(requests, context)

        return wrapper

    def _stream_stream(self, method: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
        async def wrapper(
            request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Any]:
            gate, requests = await self._first(method, request_iterator, context)
            async for item in behavior(requests, context):
                await self._check(context, method, gate, gate.recheck)
                yield item

        return wrapper


def _method_descriptor(method: str) -> descriptor.MethodDescriptor | None:
    """``/pkg.Service/Method`` -> its descriptor (None unless its protobuf module is loaded)."""
    service, _, name = method.lstrip("/").partition("/")
    try:
        return descriptor_pool.Default().FindServiceByName(service).FindMethodByName(name)
    except KeyError:
        return None


async def _empty() -> AsyncIterator[Any]:
    return
    yield  # an async generator that yields nothing


__all__ = ["RULES", "AuthInterceptor", "Authenticator", "current_principal"]
