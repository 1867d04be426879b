"""Pure translations of the console's JSON API: admin protobufs to JSON, errors to HTTP answers,
the browser's credentials to gRPC metadata, and where the console reaches the admin port.

Nothing here does I/O; :mod:`danube_lookup.console.api` and :mod:`danube_lookup.console.server`
use it, and the unit tests feed it values.
"""

from __future__ import annotations

import json
from typing import Any

import grpc
from google.protobuf.message import Message

from danube_common.errors import DanubeError, InvalidArgument
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.service import split_host_port

#: HTTP status of each gRPC status the admin API answers with. A status not listed is 500.
HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    # The cluster is not in a state that allows the request (a plan no longer proposed, a
    # namespace with topics): a conflict with the resource's current state.
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.CANCELLED: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


def http_status(err: DanubeError) -> int:
    return HTTP_STATUS.get(err.grpc_status, 500)


def error_json(err: DanubeError) -> dict[str, Any]:
    """The body of an error answer: the admin API's stable code and its message (which says
    what to do), the gRPC status, and whether retrying can help."""
    body: dict[str, Any] = {
        "code": err.code,
        "status": err.grpc_status.name,
        "message": err.message,
        "retryable": err.retryable,
    }
    if err.redirect:
        body["redirect"] = err.redirect
    return {"error": body}


def bearer_metadata(authorization: str | None) -> tuple[tuple[str, str], ...]:
    """The browser's ``Authorization`` header as the admin call's metadata (none without one):
    the admin API authenticates and authorizes it exactly as a ``danube-admin`` call."""
    if authorization is None or not authorization.strip():
        return ()
    return (("authorization", authorization.strip()),)


def admin_target(admin_listen_addr: str, port: int) -> str:
    """``host:port`` the console dials for the admin API: the admin listener's own host, or
    loopback when it listens on every address."""
    host, _ = split_host_port(admin_listen_addr)
    host = host.removeprefix("[").removesuffix("]")
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def message_json(msg: Message) -> dict[str, Any]:
    """Every field of ``msg`` by its proto name, defaults included (so the browser never has to
    guess a missing number); 64-bit integers stay numbers (offsets and byte counts fit in a
    double's 53 bits); a message field without presence set is null."""
    out: dict[str, Any] = {}
    for field in msg.DESCRIPTOR.fields:
        value = getattr(msg, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            out[field.name] = dict(value)
        elif field.is_repeated:
            out[field.name] = [message_json(v) if field.message_type is not None else v for v in value]
        elif field.message_type is not None:
            out[field.name] = message_json(value) if msg.HasField(field.name) else None
        elif field.has_presence and not msg.HasField(field.name):
            out[field.name] = None
        else:
            out[field.name] = value
    return out


def document_json(doc: apb.JsonDocument, name: str) -> dict[str, Any]:
    """A JSON document stored in etcd (load report, plan) as ``{"key": ..., name: {...}}``."""
    return {"key": doc.key, name: json.loads(doc.json) if doc.json else None}


# ------------------------------------------------------------------ request bodies and parameters
def body_string(body: dict[str, Any], name: str, *, allowed: tuple[str, ...] | None = None) -> str:
    """A string field of a request body ("" when absent); InvalidArgument naming what is allowed."""
    value = body.get(name, "")
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a string, got {json.dumps(value)}")
    if allowed is not None and value not in allowed:
        raise InvalidArgument(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
    return value


def body_bool(body: dict[str, Any], name: str, *, default: bool) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name} must be true or false, got {json.dumps(value)}")
    return value


def query_limit(raw: str | None, *, default: int, most: int) -> int:
    """A ``limit`` query parameter: 1..``most`` (``default`` when absent)."""
    if raw is None or raw == "":
        return default
    try:
        limit = int(raw)
    except ValueError:
        raise InvalidArgument(f"limit must be a whole number from 1 to {most}, got {raw!r}") from None
    if not 1 <= limit <= most:
        raise InvalidArgument(f"limit must be a whole number from 1 to {most}, got {limit}")
    return limit


def topic_path_name(namespace: str, topic: str) -> str:
    """The topic name of the path ``/api/topics/{namespace}/{topic}`` (validated by the admin API)."""
    return f"/{namespace}/{topic}"
