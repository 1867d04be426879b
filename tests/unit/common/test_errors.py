"""The error catalogue, its status mapping, and the server interceptor on a real grpc.aio server.

The server listens on a Unix socket (no network): a servicer raises, the interceptor turns the
error into a status with trailing metadata, and ``error_from_rpc`` on the client side must give
back the same class, message and redirect.
"""

from __future__ import annotations

import inspect
import shutil
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest

import danube_common.errors as errors_mod
from danube_common.errors import (
    ERRORS_BY_CODE,
    MD_ERROR_CODE,
    MD_REDIRECT,
    ConnectionLost,
    ConsumerBusy,
    DanubeError,
    ErrorInterceptor,
    Internal,
    InvalidTopicName,
    NotFound,
    TopicNotOwned,
    Unavailable,
    error_from_rpc,
    error_from_status,
    status_metadata,
)

pytestmark = pytest.mark.unit


def _subclasses(cls: type[DanubeError]) -> list[type[DanubeError]]:
    out: list[type[DanubeError]] = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


#: Every error class of the catalogue module (others, like WatchCompacted, live elsewhere).
CATALOGUE = list(
    dict.fromkeys(
        c
        for name, c in vars(errors_mod).items()
        if not name.startswith("_")  # e.g. a loop variable left at module level
        and inspect.isclass(c)
        and issubclass(c, DanubeError)
        and c.__module__ == errors_mod.__name__
    )
)


def _roundtrip_param(cls: type[DanubeError]) -> Any:
    return pytest.param(cls, id=cls.__name__)


# ---------------------------------------------------------------- the catalogue


def test_every_catalogue_class_has_a_unique_code() -> None:
    codes = [c.code for c in CATALOGUE]
    dupes = sorted({c for c in codes if codes.count(c) > 1})
    assert not dupes, f"codes used by more than one class: {dupes}"


def test_errors_defined_elsewhere_do_not_reuse_catalogue_codes() -> None:
    # A subclass elsewhere (e.g. the SDK's ClientTimeout) may inherit its parent's code; one that
    # defines its own code must not take one the wire mapping already gives to another class.
    catalogue_codes = {c.code for c in CATALOGUE}
    own = [c for c in _subclasses(DanubeError) if c not in CATALOGUE and "code" in vars(c)]
    clashes = [f"{c.__module__}.{c.__name__}={c.code}" for c in own if c.code in catalogue_codes]
    assert not clashes


def test_no_subclass_reuses_the_base_code() -> None:
    assert [c.__name__ for c in _subclasses(DanubeError) if c.code == DanubeError.code] == []


def test_every_catalogue_class_is_registered() -> None:
    missing = [c.__name__ for c in CATALOGUE if c.code not in ERRORS_BY_CODE]
    assert not missing


def test_codes_are_upper_snake_and_statuses_are_grpc() -> None:
    for cls in CATALOGUE:
        assert cls.code.replace("_", "").isalnum() and cls.code == cls.code.upper(), cls
        assert isinstance(cls.grpc_status, grpc.StatusCode), cls


def test_retryable_matches_the_kind_of_failure() -> None:
    assert TopicNotOwned.retryable and TopicNotOwned.grpc_status == grpc.StatusCode.UNAVAILABLE
    assert not InvalidTopicName.retryable and InvalidTopicName.grpc_status == grpc.StatusCode.INVALID_ARGUMENT
    assert not ConsumerBusy.retryable and ConsumerBusy.grpc_status == grpc.StatusCode.FAILED_PRECONDITION
    assert errors_mod.CorruptData.grpc_status == grpc.StatusCode.DATA_LOSS


def test_str_carries_the_code() -> None:
    err = NotFound("no such thing")
    assert str(err) == "no such thing [NOT_FOUND]"
    assert err.message == "no such thing" and err.redirect is None


# ---------------------------------------------------------------- status <-> error


@pytest.mark.parametrize("cls", [_roundtrip_param(c) for c in CATALOGUE])
def test_error_from_status_round_trips_every_class(cls: type[DanubeError]) -> None:
    err = cls("went wrong", redirect="http://10.0.0.7:6650")
    md = dict(status_metadata(err))
    back = error_from_status(err.grpc_status, str(err), md)
    assert type(back) is cls
    assert back.message == "went wrong", "the ' [CODE]' suffix is not doubled"
    assert back.redirect == "http://10.0.0.7:6650"


def test_metadata_has_redirect_only_when_set() -> None:
    assert status_metadata(NotFound("x")) == ((MD_ERROR_CODE, "NOT_FOUND"),)
    assert dict(status_metadata(TopicNotOwned("x", redirect="http://b:1"))) == {
        MD_ERROR_CODE: "TOPIC_NOT_OWNED",
        MD_REDIRECT: "http://b:1",
    }


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (grpc.StatusCode.UNAVAILABLE, Unavailable),
        (grpc.StatusCode.NOT_FOUND, NotFound),
        (grpc.StatusCode.UNIMPLEMENTED, Internal),
    ],
)
def test_status_without_our_metadata_maps_by_status(
    status: grpc.StatusCode, expected: type[DanubeError]
) -> None:
    err = error_from_status(status, "from elsewhere")
    assert type(err) is expected and err.message == "from elsewhere"


@pytest.mark.parametrize("status", [grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN])
def test_bare_internal_or_unknown_is_a_lost_connection_and_retryable(status: grpc.StatusCode) -> None:
    # grpc reports a peer killed mid-call as INTERNAL "Internal error from Core", with none of
    # the metadata our servers always attach.
    err = error_from_status(status, "Internal error from Core")
    assert isinstance(err, ConnectionLost) and err.retryable
    assert "Internal error from Core" in err.message
    ours = error_from_status(status, "boom [INTERNAL]", {MD_ERROR_CODE: "INTERNAL"})
    assert type(ours) is Internal and not ours.retryable


def test_unknown_code_falls_back_to_status() -> None:
    err = error_from_status(grpc.StatusCode.NOT_FOUND, "x", {MD_ERROR_CODE: "FROM_THE_FUTURE"})
    assert type(err) is NotFound


# ---------------------------------------------------------------- the interceptor on a real server

SERVICE = "danube.test.Errors"


def _raise_for(request: bytes) -> None:
    """Requests name what to raise: ``CODE`` or ``CODE|redirect``; ``ValueError``; ``ok``."""
    text = request.decode()
    if text == "ok":
        return
    if text == "ValueError":
        raise ValueError("plain bug")
    code, _, redirect = text.partition("|")
    raise ERRORS_BY_CODE[code]("raised by the servicer", redirect=redirect or None)


async def _unary(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    _raise_for(request)
    return b"fine"


async def _server_stream(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    yield b"1"
    yield b"2"
    _raise_for(request)
    yield b"end"


async def _client_stream(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> bytes:
    last = b"ok"
    async for r in requests:
        last = r
    _raise_for(last)
    return b"fine"


async def _bidi(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    async for r in requests:
        yield b"echo"
        _raise_for(r)


@pytest.fixture
async def channel() -> AsyncIterator[grpc.aio.Channel]:
    sock_dir = tempfile.mkdtemp(prefix="dgrpc")  # short path: Unix socket paths are limited
    addr = f"unix:{sock_dir}/s"
    server = grpc.aio.server(interceptors=[ErrorInterceptor()])
    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(_unary),
        "ServerStream": grpc.unary_stream_rpc_method_handler(_server_stream),
        "ClientStream": grpc.stream_unary_rpc_method_handler(_client_stream),
        "Bidi": grpc.stream_stream_rpc_method_handler(_bidi),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_insecure_port(addr)
    await server.start()
    ch = grpc.aio.insecure_channel(addr)
    try:
        yield ch
    finally:
        await ch.close()
        await server.stop(None)
        shutil.rmtree(sock_dir, ignore_errors=True)


async def _requests(*items: bytes) -> AsyncIterator[bytes]:
    for i in items:
        yield i


@pytest.mark.parametrize("cls", [_roundtrip_param(c) for c in CATALOGUE])
async def test_unary_error_round_trips_through_grpc(
    channel: grpc.aio.Channel, cls: type[DanubeError]
) -> None:
    call = channel.unary_unary(f"/{SERVICE}/Unary")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call(f"{cls.code}|http://elsewhere:6650".encode())
    assert info.value.code() == cls.grpc_status
    err = error_from_rpc(info.value)
    assert type(err) is cls
    assert err.message == "raised by the servicer"
    assert err.redirect == "http://elsewhere:6650"


async def test_unary_success_passes_through(channel: grpc.aio.Channel) -> None:
    assert await channel.unary_unary(f"/{SERVICE}/Unary")(b"ok") == b"fine"


async def test_server_stream_delivers_items_then_the_error(channel: grpc.aio.Channel) -> None:
    call = channel.unary_stream(f"/{SERVICE}/ServerStream")(b"TOPIC_NOT_OWNED|http://b2:6650")
    got: list[bytes] = []
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for item in call:
            got.append(item)
    assert got == [b"1", b"2"]
    err = error_from_rpc(info.value)
    assert type(err) is TopicNotOwned and err.redirect == "http://b2:6650" and err.retryable


async def test_client_stream_error(channel: grpc.aio.Channel) -> None:
    call = channel.stream_unary(f"/{SERVICE}/ClientStream")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call(_requests(b"ok", b"CONSUMER_BUSY"))
    assert type(error_from_rpc(info.value)) is ConsumerBusy


async def test_bidi_stream_error(channel: grpc.aio.Channel) -> None:
    call = channel.stream_stream(f"/{SERVICE}/Bidi")(_requests(b"ok", b"DATA_LOSS"))
    got: list[bytes] = []
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for item in call:
            got.append(item)
    assert got == [b"echo", b"echo"]
    assert info.value.code() == grpc.StatusCode.DATA_LOSS
    assert type(error_from_rpc(info.value)) is errors_mod.DataLoss


async def test_other_exceptions_become_internal(channel: grpc.aio.Channel) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await channel.unary_unary(f"/{SERVICE}/Unary")(b"ValueError")
    assert info.value.code() == grpc.StatusCode.INTERNAL
    err = error_from_rpc(info.value)
    assert type(err) is Internal and not err.retryable
    assert "ValueError: plain bug" in err.message


async def test_other_exceptions_in_a_stream_become_internal(channel: grpc.aio.Channel) -> None:
    call = channel.unary_stream(f"/{SERVICE}/ServerStream")(b"ValueError")
    got: list[bytes] = []
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for item in call:
            got.append(item)
    assert got == [b"1", b"2"]
    assert type(error_from_rpc(info.value)) is Internal
