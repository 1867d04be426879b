"""How the client secures its channels: TLS (optionally with a client certificate, mTLS) and a
bearer token on every call.

The rules, the same for every channel of a client (the service URL and every broker a lookup
sends it to):

- ``tls`` given: every channel is TLS with those options, whatever the URL's scheme says
  (``ca_file`` None: gRPC's default roots, or ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``).
- a token (or token supplier) and no ``tls``: every channel is TLS with the default roots, as
  danube-client's ``with_token`` does; the service URL must then be ``https://``, since a token
  is never sent in clear text (an ``http://`` URL with a token is refused when the client is made).
- neither: ``https://`` URLs get TLS with the default roots, others are plaintext.

With a token every RPC (discovery, producer, consumer, health, schema registry, admin) carries
``authorization: Bearer <token>``. A supplier is called once per RPC (a stream is one RPC: its
token is checked when it opens), so it can hand out a refreshed token whenever it likes; it may
be a plain function or a coroutine function, and should cache its token itself if minting one
is slow.
"""

from __future__ import annotations

import collections
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from danube_common.errors import ConfigError, Unauthenticated
from danube_common.grpc_util import CHANNEL_OPTIONS, strip_scheme
from danube_common.observability.grpc_tracing import client_interceptors
from danube_sdk.tracing import active_tracer

#: Gives the token of the next call (a JWT, without the ``Bearer `` prefix).
TokenSupplier = Callable[[], str | Awaitable[str]]

AUTHORIZATION = "authorization"


@dataclass(frozen=True, slots=True)
class TlsOptions:
    """TLS for the client's channels.

    ``ca_file``: PEM of the CA(s) that signed the servers' certificates (None: the default
    roots). ``cert_file`` and ``key_file`` (both or neither): the client's own certificate and
    key, for servers that ask for one (mTLS). A server's certificate must name the host of the
    URL (``localhost`` or ``127.0.0.1`` for a local cluster): gRPC checks it.
    """

    ca_file: str | Path | None = None
    cert_file: str | Path | None = None
    key_file: str | Path | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        """Read the files and build the channel credentials; ConfigError names a bad file."""
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError(
                "TLS client certificate and key go together: give both cert_file and key_file "
                "(--tls-cert and --tls-key), or neither"
            )
        return grpc.ssl_channel_credentials(
            root_certificates=_read_pem(self.ca_file, "CA certificate") if self.ca_file else None,
            private_key=_read_pem(self.key_file, "client key") if self.key_file else None,
            certificate_chain=_read_pem(self.cert_file, "client certificate") if self.cert_file else None,
        )


def _read_pem(path: str | Path, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the TLS {what} file {path}: {exc.strerror or exc}") from exc
    if b"-----BEGIN " not in data:
        raise ConfigError(f"the TLS {what} file {path} is not PEM (no '-----BEGIN ...' line)")
    return data


def check_token(token: str, *, source: str = "token") -> str:
    """A token as it goes into the header: non-empty, one line, no ``Bearer`` prefix."""
    if not token:
        raise ConfigError(f"the {source} is empty: give the JWT itself")
    if token.lower().startswith("bearer "):
        raise ConfigError(f"the {source} starts with 'Bearer ': give the JWT alone, the client adds it")
    if any(ch.isspace() for ch in token):
        raise ConfigError(f"the {source} contains whitespace or a line break: give the JWT on one line")
    return token


class BearerToken:
    """Where each call's token comes from: a fixed token, or a supplier called per RPC."""

    def __init__(self, token: str | None = None, supplier: TokenSupplier | None = None) -> None:
        if (token is None) == (supplier is None):
            raise ValueError("give exactly one of token or token_supplier")
        self._token = check_token(token) if token is not None else None
        self._supplier = supplier

    async def header(self) -> str:
        """The ``authorization`` value of the next call."""
        if self._token is not None:
            return f"Bearer {self._token}"
        assert self._supplier is not None
        try:
            value = self._supplier()
            token = await value if inspect.isawaitable(value) else value
        except Exception as exc:
            raise Unauthenticated(f"the token supplier failed: {exc!r}") from exc
        if not isinstance(token, str):
            raise Unauthenticated(f"the token supplier returned {type(token).__name__}, not a str")
        try:
            return f"Bearer {check_token(token, source='token from the supplier')}"
        except ConfigError as exc:
            raise Unauthenticated(exc.message) from exc

    def fixed_header(self) -> str:
        """The header of a fixed token (synchronous channels take no supplier)."""
        if self._token is None:
            raise ValueError("a synchronous channel needs a fixed token, not a supplier")
        return f"Bearer {self._token}"


class ChannelSecurity:
    """The security of one client's channels (see the module docstring for the rules).

    Files are read here, once, so a bad path fails when the client is made, not at the
    first call.
    """

    def __init__(
        self,
        service_url: str,
        *,
        tls: TlsOptions | None = None,
        token: str | None = None,
        token_supplier: TokenSupplier | None = None,
    ) -> None:
        if token is not None and token_supplier is not None:
            raise ValueError("give token or token_supplier, not both")
        self.bearer = (
            BearerToken(token, token_supplier) if token is not None or token_supplier is not None else None
        )
        if self.bearer is not None and tls is None and not service_url.startswith("https://"):
            raise ConfigError(
                f"a token is only sent over TLS, but {service_url} is plaintext: give "
                "tls=TlsOptions(ca_file=...) (on the command line --tls-ca), or an https:// URL to "
                "check the server against the default roots"
            )
        self.tls = tls
        self._tls_creds = tls.credentials() if tls is not None else None
        interceptors = _aio_interceptors(self.bearer) if self.bearer is not None else []
        if active_tracer() is not None:  # unary calls get CLIENT spans, context in metadata
            interceptors = [*interceptors, *client_interceptors()]
        self._interceptors = interceptors or None

    @property
    def always_tls(self) -> bool:
        return self.tls is not None or self.bearer is not None

    def _credentials_for(self, url: str) -> grpc.ChannelCredentials | None:
        if self._tls_creds is not None:
            return self._tls_creds
        if self.bearer is not None or url.startswith("https://"):
            return grpc.ssl_channel_credentials()
        return None

    def open_channel(self, url: str) -> grpc.aio.Channel:
        """An asyncio channel to ``url`` (``http(s)://host:port`` or ``host:port``)."""
        target = strip_scheme(url)
        creds = self._credentials_for(url)
        if creds is None:
            return grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS, interceptors=self._interceptors)
        return grpc.aio.secure_channel(
            target, creds, options=CHANNEL_OPTIONS, interceptors=self._interceptors
        )

    def open_sync_channel(self, url: str) -> grpc.Channel:
        """A blocking channel (the admin CLI's), with a fixed token if any."""
        target = strip_scheme(url)
        creds = self._credentials_for(url)
        channel = (
            grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
            if creds is None
            else grpc.secure_channel(target, creds, options=CHANNEL_OPTIONS)
        )
        if self.bearer is None:
            return channel
        return grpc.intercept_channel(channel, _SyncBearer(self.bearer.fixed_header()))


def tls_failure(details: str) -> bool:
    """Whether a transport failure's text says the TLS handshake failed (untrusted or wrongly
    named certificate, or a TLS client against a plaintext server)."""
    text = details.lower()
    return any(word in text for word in ("ssl", "handshake", "certificate", "tls"))


TLS_HINT = (
    "the TLS handshake failed: give the CA that signed the server's certificate (TlsOptions(ca_file=...), "
    "--tls-ca), check that the certificate names the URL's host, and that the server serves TLS at all"
)


# ---------------------------------------------------------------------------- interceptors


def _with_header(details: grpc.aio.ClientCallDetails, header: str) -> grpc.aio.ClientCallDetails:
    md = grpc.aio.Metadata(*(details.metadata or ()))
    md[AUTHORIZATION] = header
    return grpc.aio.ClientCallDetails(
        details.method, details.timeout, md, details.credentials, details.wait_for_ready
    )


class _Bearer:
    def __init__(self, bearer: BearerToken) -> None:
        self._bearer = bearer

    async def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        return _with_header(details, await self._bearer.header())


class _UnaryUnary(_Bearer, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(await self._details(client_call_details), request)


class _UnaryStream(_Bearer, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(await self._details(client_call_details), request)


class _StreamUnary(_Bearer, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        return await continuation(await self._details(client_call_details), request_iterator)


class _StreamStream(_Bearer, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        return await continuation(await self._details(client_call_details), request_iterator)


def _aio_interceptors(bearer: BearerToken) -> list[grpc.aio.ClientInterceptor]:
    # grpc.aio files an interceptor under its first matching kind, so one class per kind.
    return [_UnaryUnary(bearer), _UnaryStream(bearer), _StreamUnary(bearer), _StreamStream(bearer)]


class _SyncCallDetails(
    collections.namedtuple(
        "_SyncCallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    pass


class _SyncBearer(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    def __init__(self, header: str) -> None:
        self._header = header

    def _details(self, d: Any) -> _SyncCallDetails:
        md = [(k, v) for k, v in (d.metadata or ()) if k != AUTHORIZATION]
        md.append((AUTHORIZATION, self._header))
        return _SyncCallDetails(
            d.method, d.timeout, md, d.credentials, d.wait_for_ready, getattr(d, "compression", None)
        )

    def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return continuation(self._details(client_call_details), request)

    def intercept_stream_unary(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        return continuation(self._details(client_call_details), request_iterator)

    def intercept_stream_stream(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        return continuation(self._details(client_call_details), request_iterator)
