"""The SDK over real TLS: a small grpc.aio Discovery server on loopback with certificates made
by ``danube_local.secure``, checking HS256 tokens signed with the secret file it wrote.

Asserts that the SDK connects with the CA, presents its client certificate when asked (mTLS),
sends the bearer token, and that a client without the CA, a plaintext client, a client
without its certificate, and a client with a foreign token each fail with a clear error.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc
import grpc.aio
import jwt
import pytest

from danube_common.errors import Unavailable
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_local.secure import SecureFiles, write_secure_files
from danube_sdk import DanubeClient, TlsOptions, Unauthenticated
from danube_sdk.auth import TLS_HINT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]

ISSUER = "danube-local"


@dataclass
class Discovery(pb_grpc.DiscoveryServicer):
    """Answers TopicPartitions for a caller with a valid token; records who called."""

    secret: str
    subjects: list[str] = field(default_factory=list)
    peers: list[str] = field(default_factory=list)

    async def TopicPartitions(
        self, request: pb.TopicLookupRequest, context: grpc.aio.ServicerContext
    ) -> pb.TopicPartitionsResponse:
        header = dict(context.invocation_metadata() or ()).get("authorization", "")
        if not isinstance(header, str) or not header.startswith("Bearer "):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "Authentication credentials are missing")
        try:
            claims = jwt.decode(header[len("Bearer ") :], self.secret, algorithms=["HS256"], issuer=ISSUER)
        except jwt.InvalidTokenError as exc:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"Invalid token: {exc}")
        self.subjects.append(claims["sub"])
        names = context.auth_context().get("x509_common_name", [])
        self.peers.extend(n.decode() for n in names)
        return pb.TopicPartitionsResponse(request_id=request.request_id, partitions=[request.topic])


@dataclass
class TlsServer:
    files: SecureFiles
    servicer: Discovery
    port: int

    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}"

    def token(self, *, subject: str = "alice", key: str | None = None, ttl_s: int = 300) -> str:
        claims = {"iss": ISSUER, "sub": subject, "exp": int(time.time()) + ttl_s}
        return jwt.encode(claims, key or self.servicer.secret, algorithm="HS256")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> SecureFiles:
    return write_secure_files(tmp_path_factory.mktemp("secure"), ["lookup", "admin"])


async def serve(files: SecureFiles, *, require_client_cert: bool) -> tuple[grpc.aio.Server, TlsServer]:
    assert files.jwt_secret is not None
    cert, key = files.certs["lookup"]
    creds = grpc.ssl_server_credentials(
        [(key.read_bytes(), cert.read_bytes())],
        root_certificates=files.ca_cert.read_bytes() if require_client_cert else None,
        require_client_auth=require_client_cert,
    )
    servicer = Discovery(secret=files.jwt_secret.read_text())
    server = grpc.aio.server()
    pb_grpc.add_DiscoveryServicer_to_server(servicer, server)
    port = server.add_secure_port("127.0.0.1:0", creds)
    await server.start()
    return server, TlsServer(files, servicer, port)


@pytest.fixture
async def tls_server(files: SecureFiles) -> AsyncIterator[TlsServer]:
    server, info = await serve(files, require_client_cert=False)
    try:
        yield info
    finally:
        await server.stop(grace=None)


@pytest.fixture
async def mtls_server(files: SecureFiles) -> AsyncIterator[TlsServer]:
    server, info = await serve(files, require_client_cert=True)
    try:
        yield info
    finally:
        await server.stop(grace=None)


def client(url: str, **kw: object) -> DanubeClient:
    return DanubeClient(url, rpc_timeout_s=2.0, operation_timeout_s=0.5, **kw)  # type: ignore[arg-type]


async def test_connects_with_the_ca_and_sends_the_token(tls_server: TlsServer) -> None:
    tls = TlsOptions(ca_file=tls_server.files.ca_cert)
    async with client(tls_server.url, tls=tls, token=tls_server.token(subject="alice")) as c:
        assert await c.topic_partitions("/default/t") == ["/default/t"]
    async with client(tls_server.url, tls=tls, token_supplier=lambda: tls_server.token(subject="bob")) as c:
        assert await c.topic_partitions("/default/t") == ["/default/t"]
    assert tls_server.servicer.subjects == ["alice", "bob"]
    # 127.0.0.1 is in the certificate too (an IP SAN), so the address works as well as the name.
    async with client(f"https://127.0.0.1:{tls_server.port}", tls=tls, token=tls_server.token()) as c:
        assert await c.topic_partitions("/default/t") == ["/default/t"]


async def test_missing_or_foreign_token_is_unauthenticated(tls_server: TlsServer) -> None:
    tls = TlsOptions(ca_file=tls_server.files.ca_cert)
    async with client(tls_server.url, tls=tls) as c:
        with pytest.raises(Unauthenticated, match=r"credentials are missing.*give the client a JWT"):
            await c.topic_partitions("/default/t")
    foreign = tls_server.token(key="another-secret-of-some-other-cluster-0123456789")
    async with client(tls_server.url, tls=tls, token=foreign) as c:
        with pytest.raises(Unauthenticated, match="Invalid token"):
            await c.topic_partitions("/default/t")
    expired = tls_server.token(ttl_s=-60)
    async with client(tls_server.url, tls=tls, token=expired) as c:
        with pytest.raises(Unauthenticated, match="expired"):
            await c.topic_partitions("/default/t")
    assert tls_server.servicer.subjects == []


async def test_client_without_the_ca_fails_clearly(tls_server: TlsServer) -> None:
    # A token without tls= uses the default roots, which do not trust the local CA. (The
    # address, not "localhost": grpc reports the last address it tried, and ::1 is not served.)
    url = f"https://127.0.0.1:{tls_server.port}"
    async with client(url, token=tls_server.token()) as c:
        with pytest.raises(Unavailable) as info:
            await c.topic_partitions("/default/t")
    message = str(info.value)
    assert f"cannot reach the service at {url}" in message
    assert "CERTIFICATE_VERIFY_FAILED" in message and TLS_HINT in message
    assert tls_server.servicer.subjects == []


async def test_plaintext_client_is_refused(tls_server: TlsServer) -> None:
    async with client(f"http://localhost:{tls_server.port}") as c:
        with pytest.raises(
            Unavailable, match=f"cannot reach the service at http://localhost:{tls_server.port}"
        ):
            await c.topic_partitions("/default/t")


async def test_mtls_presents_the_client_certificate(mtls_server: TlsServer) -> None:
    files = mtls_server.files
    cert, key = files.certs["admin"]
    mtls = TlsOptions(ca_file=files.ca_cert, cert_file=cert, key_file=key)
    async with client(mtls_server.url, tls=mtls, token=mtls_server.token()) as c:
        assert await c.topic_partitions("/default/t") == ["/default/t"]
    assert mtls_server.servicer.peers == ["admin"]
    # Without a client certificate the server refuses the handshake.
    async with client(mtls_server.url, tls=TlsOptions(ca_file=files.ca_cert), token=mtls_server.token()) as c:
        with pytest.raises(Unavailable, match="cannot reach the service"):
            await c.topic_partitions("/default/t")
    assert mtls_server.servicer.subjects == ["alice"]
