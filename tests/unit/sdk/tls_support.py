"""Helpers of the SDK's TLS tests: certificates from danube_local.secure, server credentials,
and a server interceptor recording each call's authorization header."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import grpc.aio

from danube_local.secure import write_secure_files


def make_certs(directory: Path) -> Path:
    """A CA, a server certificate ``broker-1`` and a client certificate ``admin`` in ``directory``."""
    write_secure_files(directory, ["broker-1", "admin"])
    return directory


def server_creds(certs: Path) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials(
        [((certs / "broker-1.key").read_bytes(), (certs / "broker-1.pem").read_bytes())]
    )


class Recorder(grpc.aio.ServerInterceptor):
    """Records (method, authorization header) of every call; refuses methods listed in ``deny``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []
        self.deny: dict[str, tuple[grpc.StatusCode, str]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        md = dict(handler_call_details.invocation_metadata or ())  # type: ignore[attr-defined]
        method: str = handler_call_details.method  # type: ignore[attr-defined]
        auth = md.get("authorization")
        self.calls.append((method, str(auth) if auth is not None else None))
        refusal = next((v for k, v in self.deny.items() if method.endswith(k)), None)
        if refusal is not None:
            code, details = refusal

            async def refuse(request: object, context: grpc.aio.ServicerContext) -> None:
                await context.abort(code, details)

            return grpc.unary_unary_rpc_method_handler(refuse)
        return await continuation(handler_call_details)

    def methods(self) -> set[str]:
        return {m.rsplit("/", 1)[-1] for m, _ in self.calls}

    def headers(self) -> list[str | None]:
        return [h for _, h in self.calls]
