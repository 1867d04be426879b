"""The S3 backend without a server: error mapping, exception translation, paging, multipart aborts.

``S3ObjectStore`` takes its client as a constructor argument, so a small fake client stands in
for botocore here; the contract suite runs the same code against moto_server.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import botocore.exceptions as bex
import pytest

from danube_common.errors import FailedPrecondition, NotFound, PermissionDenied, Unavailable
from danube_common.objstore import (
    BucketNotFound,
    InvalidObjectRange,
    ObjectNotFound,
    ObjectStoreAccessDenied,
    ObjectStoreError,
    ObjectStoreRequestFailed,
    ObjectStoreUnavailable,
    PreconditionFailed,
    S3Config,
)
from danube_common.objstore.s3 import S3ObjectStore, s3_error

pytestmark = pytest.mark.unit

MIB = 1024 * 1024


def _err(code: str, status: int) -> ObjectStoreError:
    return s3_error(
        op="get", where="s3://b/k", code=code, status=status, message="m", endpoint="http://e:9000"
    )


@pytest.mark.parametrize(
    ("code", "status", "cls", "hint"),
    [
        ("NoSuchKey", 404, ObjectNotFound, "s3://b/k"),
        ("404", 404, ObjectNotFound, "s3://b/k"),  # HEAD: no body, bare status
        ("NoSuchBucket", 404, BucketNotFound, "s3.bucket"),
        ("PreconditionFailed", 412, PreconditionFailed, "already exists"),
        ("InvalidRange", 416, InvalidObjectRange, "InvalidRange"),
        ("ConditionalRequestConflict", 409, ObjectStoreUnavailable, "ConditionalRequestConflict"),
        ("SlowDown", 503, ObjectStoreUnavailable, "SlowDown"),
        ("InternalError", 500, ObjectStoreUnavailable, "HTTP 500"),
        ("RequestTimeout", 400, ObjectStoreUnavailable, "RequestTimeout"),
        ("", 502, ObjectStoreUnavailable, "HTTP 502"),
        ("TooManyRequests", 429, ObjectStoreUnavailable, "429"),
        ("NoSuchUpload", 404, ObjectStoreUnavailable, "upload again"),
        ("AccessDenied", 403, ObjectStoreAccessDenied, "s3.access_key_id"),
        ("InvalidAccessKeyId", 403, ObjectStoreAccessDenied, "s3.secret_access_key"),
        ("SignatureDoesNotMatch", 403, ObjectStoreAccessDenied, "s3.region"),
        ("RequestTimeTooSkewed", 403, ObjectStoreAccessDenied, "clock"),
        ("NotImplemented", 501, ObjectStoreRequestFailed, "s3.conditional_writes=false"),
        ("PermanentRedirect", 301, ObjectStoreRequestFailed, "s3.region"),
        ("AuthorizationHeaderMalformed", 400, ObjectStoreRequestFailed, "s3.endpoint_url"),
        ("MalformedXML", 400, ObjectStoreRequestFailed, "MalformedXML"),
    ],
)
def test_s3_error_codes_map_to_our_classes(
    code: str, status: int, cls: type[ObjectStoreError], hint: str
) -> None:
    err = _err(code, status)
    assert type(err) is cls
    assert hint in str(err)


def test_classes_keep_the_catalogue_semantics() -> None:
    assert isinstance(_err("SlowDown", 503), Unavailable) and _err("SlowDown", 503).retryable
    assert isinstance(_err("NoSuchKey", 404), NotFound) and not _err("NoSuchKey", 404).retryable
    assert isinstance(_err("PreconditionFailed", 412), FailedPrecondition)
    assert isinstance(_err("AccessDenied", 403), PermissionDenied) and not _err("AccessDenied", 403).retryable
    codes = {type(_err(c, s)).code for c, s in [("NoSuchKey", 404), ("SlowDown", 503), ("AccessDenied", 403)]}
    assert codes == {"OBJECT_NOT_FOUND", "OBJECT_STORE_UNAVAILABLE", "OBJECT_STORE_ACCESS_DENIED"}


# ---------------------------------------------------------------- a fake client


def _client_error(code: str, status: int, op: str = "Op") -> bex.ClientError:
    return bex.ClientError(
        {"Error": {"Code": code, "Message": "fake"}, "ResponseMetadata": {"HTTPStatusCode": status}}, op
    )


class FakeClient:
    """Just enough of an S3 client: listing with pages, and scripted multipart failures."""

    def __init__(self, keys: list[str] | None = None) -> None:
        self.keys = sorted(keys or [])
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail_part: int | None = None
        self.part_error: BaseException = _client_error("SlowDown", 503, "UploadPart")
        self.raise_on: dict[str, BaseException] = {}

    def _call(self, name: str, kwargs: dict[str, Any]) -> None:
        self.calls.append((name, kwargs))
        if name in self.raise_on:
            raise self.raise_on[name]

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    async def list_objects_v2(self, **kw: Any) -> dict[str, Any]:
        self._call("list_objects_v2", kw)
        pool = [k for k in self.keys if k.startswith(kw["Prefix"]) and k > kw.get("StartAfter", "")]
        start = int(kw.get("ContinuationToken", 0))
        page = pool[start : start + kw["MaxKeys"]]
        more = start + len(page) < len(pool)
        now = datetime.now(UTC)
        return {
            "Contents": [{"Key": k, "Size": 1, "ETag": '"e"', "LastModified": now} for k in page],
            "IsTruncated": more,
            **({"NextContinuationToken": str(start + len(page))} if more else {}),
        }

    async def head_object(self, **kw: Any) -> dict[str, Any]:
        self._call("head_object", kw)
        if kw["Key"] not in self.keys:
            raise _client_error("404", 404, "HeadObject")
        return {"ContentLength": 1, "ETag": '"e"', "LastModified": datetime.now(UTC)}

    async def put_object(self, **kw: Any) -> dict[str, Any]:
        self._call("put_object", kw)
        return {"ETag": '"e"', "ResponseMetadata": {"HTTPHeaders": {"date": "Tue, 01 Jul 2025 10:00:00 GMT"}}}

    async def create_multipart_upload(self, **kw: Any) -> dict[str, Any]:
        self._call("create_multipart_upload", kw)
        return {"UploadId": "up-1"}

    async def upload_part(self, **kw: Any) -> dict[str, Any]:
        self._call("upload_part", kw)
        if kw["PartNumber"] == self.fail_part:
            raise self.part_error
        return {"ETag": f'"p{kw["PartNumber"]}"', "ChecksumCRC32": "AAAAAA=="}

    async def complete_multipart_upload(self, **kw: Any) -> dict[str, Any]:
        self._call("complete_multipart_upload", kw)
        return {"ETag": '"m-3"'}

    async def abort_multipart_upload(self, **kw: Any) -> dict[str, Any]:
        self._call("abort_multipart_upload", kw)
        return {}


def _store(client: FakeClient, **over: Any) -> S3ObjectStore:
    fields: dict[str, Any] = {
        "bucket": "bkt",
        "endpoint_url": "http://127.0.0.1:9",
        "list_page_size": 3,
        "multipart_threshold_bytes": 5 * MIB,
        "multipart_part_size_bytes": 5 * MIB,
        "multipart_concurrency": 2,
        "request_timeout_s": 5.0,
    }
    fields.update(over)
    return S3ObjectStore(client, S3Config(**fields), prefix="p/", stack=contextlib.AsyncExitStack())


# ---------------------------------------------------------------- translation of exceptions


@pytest.mark.parametrize(
    ("exc", "cls", "hint"),
    [
        (_client_error("NoSuchKey", 404), ObjectNotFound, "s3://bkt/p/k"),
        (
            bex.EndpointConnectionError(endpoint_url="http://127.0.0.1:9"),
            ObjectStoreUnavailable,
            "127.0.0.1:9",
        ),
        (bex.ConnectTimeoutError(endpoint_url="http://x"), ObjectStoreUnavailable, "s3.connect_timeout_s"),
        (bex.ReadTimeoutError(endpoint_url="http://x"), ObjectStoreUnavailable, "s3.read_timeout_s"),
        (bex.ConnectionClosedError(endpoint_url="http://x"), ObjectStoreUnavailable, "cannot talk"),
        (aiohttp.ServerDisconnectedError(), ObjectStoreUnavailable, "cannot talk"),
        (aiohttp.ClientPayloadError("cut"), ObjectStoreUnavailable, "cannot talk"),
        (ConnectionResetError(104, "reset"), ObjectStoreUnavailable, "cannot talk"),
        (TimeoutError(), ObjectStoreUnavailable, "s3.request_timeout_s"),
        (bex.NoCredentialsError(), ObjectStoreAccessDenied, "s3.access_key_id"),
        (bex.ParamValidationError(report="bad"), ObjectStoreRequestFailed, "ParamValidationError"),
    ],
)
async def test_library_exceptions_are_translated_at_the_boundary(
    exc: Exception, cls: type[ObjectStoreError], hint: str
) -> None:
    client = FakeClient()
    client.raise_on["head_object"] = exc
    with pytest.raises(cls, match=hint.replace(".", r"\.")) as err:
        await _store(client).head("k")
    assert err.value.__cause__ is exc


async def test_the_request_cap_cuts_a_call_that_never_returns() -> None:
    class Stuck(FakeClient):
        async def head_object(self, **kw: Any) -> dict[str, Any]:
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    with pytest.raises(ObjectStoreUnavailable, match=r"request_timeout_s=0\.05"):
        await _store(Stuck(), request_timeout_s=0.05).head("k")


async def test_cancellation_is_not_translated() -> None:
    class Stuck(FakeClient):
        async def head_object(self, **kw: Any) -> dict[str, Any]:
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    task = asyncio.create_task(_store(Stuck()).head("k"))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_closed_store_refuses_calls() -> None:
    store = _store(FakeClient())
    await store.aclose()
    await store.aclose()
    with pytest.raises(ObjectStoreUnavailable, match="closed"):
        await store.head("k")


# ---------------------------------------------------------------- paging


async def test_list_fetches_pages_until_done_and_strips_the_prefix() -> None:
    client = FakeClient([f"p/s/{i:02d}" for i in range(10)] + ["p/t/x", "other/s/1"])
    store = _store(client)
    keys = [o.key for o in await store.list("s/")]
    assert keys == [f"s/{i:02d}" for i in range(10)]
    calls = [kw for name, kw in client.calls if name == "list_objects_v2"]
    assert len(calls) == 4  # pages of 3
    assert all(kw["Prefix"] == "p/s/" and kw["MaxKeys"] == 3 for kw in calls)
    assert [kw.get("ContinuationToken") for kw in calls] == [None, "3", "6", "9"]


async def test_list_limit_and_start_after_shape_the_requests() -> None:
    client = FakeClient([f"p/s/{i:02d}" for i in range(10)])
    store = _store(client)
    keys = [o.key for o in await store.list("s/", start_after="s/01", limit=4)]
    assert keys == ["s/02", "s/03", "s/04", "s/05"]
    calls = [kw for name, kw in client.calls if name == "list_objects_v2"]
    assert [kw["MaxKeys"] for kw in calls] == [3, 1]  # never asks for more than the limit needs
    assert calls[0]["StartAfter"] == "p/s/01"
    assert await store.list("s/", limit=0) == []


# ---------------------------------------------------------------- multipart


async def test_multipart_upload_sends_parts_with_checksums_and_completes(tmp_path: Path) -> None:
    src = tmp_path / "seg"
    src.write_bytes(b"x" * (12 * MIB))
    client = FakeClient()
    info = await _store(client).put_file("k", src, if_absent=True)
    assert info.size == 12 * MIB and info.etag == "m-3"
    parts = sorted((kw["PartNumber"], len(kw["Body"])) for name, kw in client.calls if name == "upload_part")
    assert parts == [(1, 5 * MIB), (2, 5 * MIB), (3, 2 * MIB)]
    (complete,) = [kw for name, kw in client.calls if name == "complete_multipart_upload"]
    assert complete["IfNoneMatch"] == "*"
    assert [p["PartNumber"] for p in complete["MultipartUpload"]["Parts"]] == [1, 2, 3]
    assert all(p["ChecksumCRC32"] for p in complete["MultipartUpload"]["Parts"])
    assert "abort_multipart_upload" not in client.names()


async def test_a_failed_part_aborts_the_upload_and_raises_our_error(tmp_path: Path) -> None:
    src = tmp_path / "seg"
    src.write_bytes(b"x" * (12 * MIB))
    client = FakeClient()
    client.fail_part = 2
    with pytest.raises(ObjectStoreUnavailable, match="SlowDown") as err:
        await _store(client).put_file("k", src)
    assert isinstance(err.value.__cause__, bex.ClientError)
    assert client.names().count("abort_multipart_upload") == 1
    assert "complete_multipart_upload" not in client.names()


async def test_a_cancelled_multipart_upload_is_aborted(tmp_path: Path) -> None:
    src = tmp_path / "seg"
    src.write_bytes(b"x" * (12 * MIB))
    started = asyncio.Event()

    class Slow(FakeClient):
        async def upload_part(self, **kw: Any) -> dict[str, Any]:
            started.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    client = Slow()
    task = asyncio.create_task(_store(client).put_file("k", src))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert client.names().count("abort_multipart_upload") == 1


# ---------------------------------------------------------------- conditional writes


async def test_conditional_put_sends_if_none_match() -> None:
    client = FakeClient()
    info = await _store(client).put("k", b"abc", if_absent=True)
    (put,) = [kw for name, kw in client.calls if name == "put_object"]
    assert put["IfNoneMatch"] == "*" and put["Key"] == "p/k"
    assert info.last_modified == datetime(2025, 7, 1, 10, 0, tzinfo=UTC)  # the server's Date


async def test_without_conditional_writes_a_head_check_stands_in() -> None:
    client = FakeClient(["p/taken"])
    store = _store(client, conditional_writes=False)
    await store.put("free", b"1", if_absent=True)
    assert "IfNoneMatch" not in client.calls[-1][1]
    assert client.names() == ["head_object", "put_object"]
    with pytest.raises(PreconditionFailed, match="checked with HEAD"):
        await store.put("taken", b"2", if_absent=True)
