"""One suite, two backends: the local directory must behave like S3 (moto_server) and both like
the semantics in ``danube_common.objstore.base``.

Every ``ctx`` test runs against ``LocalObjectStore`` on ``tmp_path`` (marked unit) and
``S3ObjectStore`` on moto with a fresh bucket (marked integration). Both stores carry the key
prefix ``pfx/``, which callers never see. Where the local backend deviates from S3 on purpose
(a key cannot also be a "directory" of other keys), the test says so and checks each side.

The last section runs the S3 backend through ``FaultyProxy``: refused connections and a server
that never answers must raise ``ObjectStoreUnavailable`` within the configured timeouts, and the
store must work again once the network heals.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aioboto3
import pytest

from danube_common.etcd_server import free_port
from danube_common.objstore import (
    BucketNotFound,
    InvalidObjectKey,
    InvalidObjectRange,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreConfig,
    ObjectStoreUnavailable,
    PreconditionFailed,
    open_object_store,
)
from tests.contract.conftest import TEST_LIST_PAGE_SIZE, TEST_PART_SIZE_BYTES, moto_s3_config
from tests.support.faulty_proxy import FaultyProxy
from tests.support.moto import MOTO_ACCESS_KEY_ID, MOTO_REGION, MOTO_SECRET_ACCESS_KEY, MotoServer

PREFIX = "pfx/"


@dataclass
class Ctx:
    kind: str  # "local" | "s3"
    cfg: ObjectStoreConfig
    store: ObjectStore
    _others: list[ObjectStore] = field(default_factory=list)

    async def open_other(self, **over: Any) -> ObjectStore:
        """Another store over the same directory or bucket (e.g. another prefix)."""
        store = await open_object_store(self.cfg.model_copy(update=over))
        self._others.append(store)
        return store


@pytest.fixture(
    params=[
        pytest.param("local", marks=pytest.mark.unit),
        pytest.param("s3", marks=pytest.mark.integration),
    ]
)
async def ctx(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Ctx]:
    if request.param == "local":
        cfg = ObjectStoreConfig(backend="local", local_dir=str(tmp_path / "objects"), prefix=PREFIX)
    else:
        cfg = ObjectStoreConfig(backend="s3", prefix=PREFIX, s3=request.getfixturevalue("s3_config"))
    store = await open_object_store(cfg)
    c = Ctx(request.param, cfg, store)
    try:
        yield c
    finally:
        for other in c._others:
            await other.aclose()
        await store.aclose()


def _recent(ts: datetime) -> bool:
    now = datetime.now(UTC)
    return ts.tzinfo is not None and now - timedelta(minutes=5) < ts < now + timedelta(minutes=5)


# ---------------------------------------------------------------- put / get / head


async def test_put_get_head_roundtrip(ctx: Ctx) -> None:
    info = await ctx.store.put("topics/ns/t/00000000000000000000.seg", b"hello world")
    assert info.key == "topics/ns/t/00000000000000000000.seg"
    assert info.size == 11 and info.etag and '"' not in info.etag
    assert _recent(info.last_modified)
    assert await ctx.store.get(info.key) == b"hello world"
    head = await ctx.store.head(info.key)
    assert (head.key, head.size, head.etag) == (info.key, 11, info.etag)
    assert _recent(head.last_modified)


async def test_content_is_binary_safe_and_may_be_empty(ctx: Ctx) -> None:
    every_byte = bytes(range(256)) * 33 + b"\r\n\x00\xff"
    await ctx.store.put("bin/all-bytes", every_byte)
    await ctx.store.put("bin/empty", b"")
    assert await ctx.store.get("bin/all-bytes") == every_byte
    assert await ctx.store.get("bin/empty") == b""
    assert (await ctx.store.head("bin/empty")).size == 0


async def test_missing_objects_raise_object_not_found(ctx: Ctx) -> None:
    with pytest.raises(ObjectNotFound):
        await ctx.store.get("no/such/key")
    with pytest.raises(ObjectNotFound):
        await ctx.store.get("no/such/key", start=3, end=10)
    with pytest.raises(ObjectNotFound):
        await ctx.store.get("no/such/key", start=0, end=0)  # an empty range still checks the key
    with pytest.raises(ObjectNotFound):
        await ctx.store.head("no/such/key")


async def test_overwrite_replaces_the_object_and_changes_its_etag(ctx: Ctx) -> None:
    first = await ctx.store.put("k", b"one")
    second = await ctx.store.put("k", b"second version")
    assert await ctx.store.get("k") == b"second version"
    assert second.etag != first.etag
    assert (await ctx.store.head("k")).size == len(b"second version")


async def test_reuploading_the_same_bytes_is_harmless(ctx: Ctx) -> None:
    # What an uploader retrying after a crash does: same key, same bytes.
    await ctx.store.put("seg/42", b"payload")
    await ctx.store.put("seg/42", b"payload")
    assert await ctx.store.get("seg/42") == b"payload"
    assert [o.key for o in await ctx.store.list("seg/")] == ["seg/42"]


# ---------------------------------------------------------------- ranged reads

DATA = bytes(range(100))


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (None, None, DATA),
        (0, 10, DATA[0:10]),
        (10, 20, DATA[10:20]),
        (95, None, DATA[95:]),
        (None, 5, DATA[:5]),
        (90, 1000, DATA[90:]),  # end past the object is clamped
        (99, 100, DATA[99:]),
        (100, None, b""),  # start at exactly the end: empty
        (100, 200, b""),
        (42, 42, b""),  # empty range
        (0, 0, b""),
    ],
)
async def test_ranged_get_is_half_open(ctx: Ctx, start: int | None, end: int | None, expected: bytes) -> None:
    await ctx.store.put("r/obj", DATA)
    assert await ctx.store.get("r/obj", start=start, end=end) == expected


@pytest.mark.parametrize(
    ("start", "end"),
    [(101, None), (150, 200), (-1, None), (0, -1), (20, 10)],
)
async def test_ranged_get_rejects_bad_ranges(ctx: Ctx, start: int, end: int | None) -> None:
    await ctx.store.put("r/obj", DATA)
    with pytest.raises(InvalidObjectRange):
        await ctx.store.get("r/obj", start=start, end=end)


async def test_ranged_get_of_an_empty_object(ctx: Ctx) -> None:
    await ctx.store.put("r/empty", b"")
    assert await ctx.store.get("r/empty", start=0, end=10) == b""
    assert await ctx.store.get("r/empty", start=0) == b""
    with pytest.raises(InvalidObjectRange):
        await ctx.store.get("r/empty", start=1)


# ---------------------------------------------------------------- conditional writes


async def test_if_absent_writes_once_then_refuses(ctx: Ctx) -> None:
    info = await ctx.store.put("c/once", b"first", if_absent=True)
    assert info.size == 5
    with pytest.raises(PreconditionFailed):
        await ctx.store.put("c/once", b"second", if_absent=True)
    assert await ctx.store.get("c/once") == b"first"
    # An unconditional write still replaces it.
    await ctx.store.put("c/once", b"third")
    assert await ctx.store.get("c/once") == b"third"


async def test_if_absent_after_delete_writes_again(ctx: Ctx) -> None:
    await ctx.store.put("c/k", b"1", if_absent=True)
    await ctx.store.delete("c/k")
    await ctx.store.put("c/k", b"2", if_absent=True)
    assert await ctx.store.get("c/k") == b"2"


async def test_put_file_if_absent_refuses_existing_key(ctx: Ctx, tmp_path: Path) -> None:
    src = tmp_path / "small.bin"
    src.write_bytes(b"file body")
    await ctx.store.put("c/file", b"already here")
    with pytest.raises(PreconditionFailed):
        await ctx.store.put_file("c/file", src, if_absent=True)
    assert await ctx.store.get("c/file") == b"already here"


# ---------------------------------------------------------------- put_file


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """A little over two parts: three parts of a multipart upload on S3."""
    data = os.urandom(2 * TEST_PART_SIZE_BYTES + 123_457)
    path = tmp_path_factory.mktemp("big") / "segment.bin"
    path.write_bytes(data)
    return path, data


async def test_put_file_small(ctx: Ctx, tmp_path: Path) -> None:
    src = tmp_path / "small.bin"
    src.write_bytes(b"\x00small\xff" * 1000)
    info = await ctx.store.put_file("f/small", src)
    assert info.size == 7000
    assert await ctx.store.get("f/small") == src.read_bytes()


async def test_put_file_large_uses_multipart_and_reads_back(ctx: Ctx, big_file: tuple[Path, bytes]) -> None:
    path, data = big_file
    info = await ctx.store.put_file("f/big", path)
    assert info.size == len(data)
    if ctx.kind == "s3":
        assert info.etag.endswith("-3"), f"expected a 3-part multipart ETag, got {info.etag}"
    head = await ctx.store.head("f/big")
    assert (head.size, head.etag) == (len(data), info.etag)
    assert await ctx.store.get("f/big") == data
    # A range across the first part boundary.
    a, b = TEST_PART_SIZE_BYTES - 10, TEST_PART_SIZE_BYTES + 10
    assert await ctx.store.get("f/big", start=a, end=b) == data[a:b]


async def test_put_file_large_if_absent(ctx: Ctx, big_file: tuple[Path, bytes]) -> None:
    path, data = big_file
    await ctx.store.put_file("f/big-once", path, if_absent=True)
    with pytest.raises(PreconditionFailed):
        await ctx.store.put_file("f/big-once", path, if_absent=True)
    assert (await ctx.store.head("f/big-once")).size == len(data)


async def test_put_file_of_a_missing_source_raises_the_os_error(ctx: Ctx, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        await ctx.store.put_file("f/x", tmp_path / "does-not-exist")
    assert await ctx.store.list("f/") == []


# ---------------------------------------------------------------- list


async def _put_many(store: ObjectStore, keys: list[str]) -> None:
    await asyncio.gather(*(store.put(k, k.encode()) for k in keys))


async def test_list_with_prefix_and_pagination(ctx: Ctx) -> None:
    inside = [f"p/{i:03d}" for i in range(4 * TEST_LIST_PAGE_SIZE + 3)]  # several S3 pages
    await _put_many(ctx.store, [*inside, "pa", "q/x", "o/y"])

    listed = await ctx.store.list("p/")
    assert [o.key for o in listed] == inside
    assert all(o.size == len(o.key) and o.etag and _recent(o.last_modified) for o in listed)
    assert [o.key for o in await ctx.store.list("p")] == [*inside, "pa"]  # a plain string prefix
    assert [o.key for o in await ctx.store.list()] == ["o/y", *inside, "pa", "q/x"]
    assert await ctx.store.list("zzz") == []
    assert await ctx.store.list("p/0", limit=0) == []


async def test_list_start_after_and_limit(ctx: Ctx) -> None:
    keys = [f"s/{i:03d}" for i in range(3 * TEST_LIST_PAGE_SIZE + 2)]
    await _put_many(ctx.store, keys)

    assert [o.key for o in await ctx.store.list("s/", limit=7)] == keys[:7]
    assert [o.key for o in await ctx.store.list("s/", start_after="s/004")] == keys[5:]
    assert [o.key for o in await ctx.store.list("s/", start_after="s/004", limit=6)] == keys[5:11]
    # start_after need not be an existing key.
    assert [o.key for o in await ctx.store.list("s/", start_after="s/0045", limit=2)] == keys[5:7]
    assert await ctx.store.list("s/", start_after="s/999") == []

    # Paging by hand with start_after visits every key exactly once.
    seen: list[str] = []
    last: str | None = None
    while page := await ctx.store.list("s/", start_after=last, limit=4):
        seen += [o.key for o in page]
        last = page[-1].key
    assert seen == keys


async def test_list_order_is_by_utf8_bytes_across_nested_prefixes(ctx: Ctx) -> None:
    keys = ["n/b/c", "n/b-c", "n/b0", "n/bc", "n/z", "n/\u00e9t\u00e9", "n/\u4e2d", "n/B", "n/b/a/deep/x"]
    await _put_many(ctx.store, keys)
    expected = sorted(keys, key=lambda k: k.encode())
    assert [o.key for o in await ctx.store.list("n/")] == expected
    assert [o.key for o in await ctx.store.list("n/b/")] == ["n/b/a/deep/x", "n/b/c"]
    for k in keys:
        assert await ctx.store.get(k) == k.encode()


# ---------------------------------------------------------------- delete


async def test_delete_is_idempotent(ctx: Ctx) -> None:
    await ctx.store.put("d/k", b"x")
    await ctx.store.delete("d/k")
    with pytest.raises(ObjectNotFound):
        await ctx.store.head("d/k")
    await ctx.store.delete("d/k")
    await ctx.store.delete("d/never/existed")
    assert await ctx.store.list("d/") == []


# ---------------------------------------------------------------- keys and prefixes


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/", "a/../b", "./a", "a/\x00", "x" * 1025])
async def test_invalid_keys_are_refused_by_every_method(ctx: Ctx, key: str) -> None:
    for call in (
        ctx.store.put(key, b"x"),
        ctx.store.get(key),
        ctx.store.head(key),
        ctx.store.delete(key),
    ):
        with pytest.raises(InvalidObjectKey):
            await call


async def test_configured_prefix_is_applied_and_hidden(ctx: Ctx) -> None:
    await ctx.store.put("a/1", b"one")
    bare = await ctx.open_other(prefix="")
    other = await ctx.open_other(prefix="other/")
    assert [o.key for o in await bare.list()] == ["pfx/a/1"]
    assert await bare.get("pfx/a/1") == b"one"
    assert await other.list() == []
    with pytest.raises(ObjectNotFound):
        await other.get("a/1")
    await other.put("a/1", b"other")
    assert await ctx.store.get("a/1") == b"one"
    assert [o.key for o in await bare.list()] == ["other/a/1", "pfx/a/1"]


async def test_a_key_that_is_also_a_directory_of_keys(ctx: Ctx) -> None:
    """S3 allows "a/b" and "a/b/c" side by side; the local backend (files and directories) does not."""
    await ctx.store.put("x/a/b", b"1")
    if ctx.kind == "s3":
        await ctx.store.put("x/a/b/c", b"2")
        assert [o.key for o in await ctx.store.list("x/")] == ["x/a/b", "x/a/b/c"]
        return
    with pytest.raises(InvalidObjectKey, match="'pfx/x/a/b' is an object"):
        await ctx.store.put("x/a/b/c", b"2")
    await ctx.store.put("y/a/b/c", b"2")
    with pytest.raises(InvalidObjectKey, match="directory"):
        await ctx.store.put("y/a/b", b"1")
    with pytest.raises(ObjectNotFound):
        await ctx.store.get("y/a/b")
    assert [o.key for o in await ctx.store.list()] == ["x/a/b", "y/a/b/c"]


# ---------------------------------------------------------------- S3 only

s3_only = pytest.mark.integration


@s3_only
async def test_open_refuses_a_missing_bucket_naming_endpoint_and_bucket(moto_server: MotoServer) -> None:
    s3 = moto_s3_config(moto_server.endpoint_url, create_bucket=False)
    with pytest.raises(BucketNotFound) as err:
        await open_object_store(ObjectStoreConfig(backend="s3", s3=s3))
    assert s3.bucket in str(err.value) and moto_server.endpoint_url in str(err.value)
    assert "create_bucket" in str(err.value)


@s3_only
async def test_open_with_create_bucket_is_idempotent(moto_server: MotoServer) -> None:
    s3 = moto_s3_config(moto_server.endpoint_url)
    for _ in range(2):
        store = await open_object_store(ObjectStoreConfig(backend="s3", s3=s3))
        await store.aclose()
        await store.aclose()  # idempotent


@s3_only
async def test_open_against_nothing_listening_is_unavailable() -> None:
    s3 = moto_s3_config(f"http://127.0.0.1:{free_port()}", max_attempts=1, connect_timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(ObjectStoreUnavailable) as err:
        await open_object_store(ObjectStoreConfig(backend="s3", s3=s3))
    assert time.monotonic() - started < s3.request_timeout_s
    assert s3.endpoint_url is not None and s3.endpoint_url in str(err.value)


@s3_only
async def test_emulated_conditional_writes_without_if_none_match(
    moto_server: MotoServer, tmp_path: Path
) -> None:
    """With conditional_writes=false the store checks with HEAD (not atomic, but it refuses)."""
    s3 = moto_s3_config(moto_server.endpoint_url, conditional_writes=False)
    async with await open_object_store(ObjectStoreConfig(backend="s3", s3=s3)) as store:
        await store.put("k", b"1", if_absent=True)
        with pytest.raises(PreconditionFailed):
            await store.put("k", b"2", if_absent=True)
        src = tmp_path / "big.bin"
        src.write_bytes(b"z" * (TEST_PART_SIZE_BYTES + 1))
        with pytest.raises(PreconditionFailed):
            await store.put_file("k", src, if_absent=True)
        assert await store.get("k") == b"1"


async def _pending_uploads(endpoint_url: str, bucket: str) -> list[Any]:
    session = aioboto3.Session(
        aws_access_key_id=MOTO_ACCESS_KEY_ID,
        aws_secret_access_key=MOTO_SECRET_ACCESS_KEY,
        region_name=MOTO_REGION,
    )
    async with session.client("s3", endpoint_url=endpoint_url) as client:
        resp = await client.list_multipart_uploads(Bucket=bucket)
    return list(resp.get("Uploads", []))


@s3_only
async def test_if_absent_multipart_over_an_existing_key_fails_before_uploading(
    moto_server: MotoServer, big_file: tuple[Path, bytes]
) -> None:
    s3 = moto_s3_config(moto_server.endpoint_url)
    async with await open_object_store(ObjectStoreConfig(backend="s3", s3=s3)) as store:
        await store.put("k", b"taken")
        with pytest.raises(PreconditionFailed):
            await store.put_file("k", big_file[0], if_absent=True)
        assert await store.get("k") == b"taken"
    assert await _pending_uploads(moto_server.endpoint_url, s3.bucket) == []


@s3_only
async def test_the_server_refuses_to_complete_a_multipart_upload_over_an_existing_key(
    moto_server: MotoServer, big_file: tuple[Path, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """If-None-Match on CompleteMultipartUpload is the atomic guard (the HEAD before it only saves
    a useless upload): with the HEAD skipped, the server's 412 must surface as PreconditionFailed
    and the upload must be aborted."""
    from danube_common.objstore.s3 import S3ObjectStore

    async def no_head_check(self: S3ObjectStore, key: str, if_absent: bool, **_: Any) -> dict[str, str]:
        return {"IfNoneMatch": "*"} if if_absent else {}

    monkeypatch.setattr(S3ObjectStore, "_if_absent_args", no_head_check)
    s3 = moto_s3_config(moto_server.endpoint_url)
    async with await open_object_store(ObjectStoreConfig(backend="s3", s3=s3)) as store:
        await store.put("k", b"taken", if_absent=True)
        with pytest.raises(PreconditionFailed):
            await store.put_file("k", big_file[0], if_absent=True)
        assert await store.get("k") == b"taken"
    assert await _pending_uploads(moto_server.endpoint_url, s3.bucket) == []


# ---------------------------------------------------------------- S3 through a faulty network

#: Short timeouts, no retry inside botocore: each failure shows at once.
FAULT_TIMEOUTS: dict[str, Any] = {
    "connect_timeout_s": 0.5,
    "read_timeout_s": 0.5,
    "request_timeout_s": 1.5,
    "max_attempts": 1,
}
#: Slack for scheduling on a busy 2-core machine.
SLACK_S = 2.0


@dataclass
class Proxied:
    proxy: FaultyProxy
    #: A store whose every request goes through the proxy.
    store: ObjectStore
    bucket: str
    #: moto itself, for checks that must not go through the proxy.
    direct_url: str


@pytest.fixture
async def proxied(moto_server: MotoServer) -> AsyncIterator[Proxied]:
    async with FaultyProxy("127.0.0.1", moto_server.port) as proxy:
        s3 = moto_s3_config(proxy.endpoint_url, **FAULT_TIMEOUTS)
        async with await open_object_store(ObjectStoreConfig(backend="s3", s3=s3)) as store:
            yield Proxied(proxy, store, s3.bucket, moto_server.endpoint_url)


async def _exercise(store: ObjectStore, op: str) -> object:
    if op == "put":
        return await store.put("f/new", b"y" * 300_000)
    if op == "get":
        return await store.get("f/existing")
    return await store.list("f/")


@s3_only
@pytest.mark.parametrize("mode", ["refuse", "blackhole"])
@pytest.mark.parametrize("op", ["put", "get", "list"])
async def test_network_faults_raise_unavailable_within_the_timeout(
    proxied: Proxied, mode: Any, op: str
) -> None:
    proxy, store = proxied.proxy, proxied.store
    await store.put("f/existing", b"before the fault")
    proxy.set_mode(mode)
    started = time.monotonic()
    with pytest.raises(ObjectStoreUnavailable) as err:
        await _exercise(store, op)
    elapsed = time.monotonic() - started
    assert err.value.retryable
    assert elapsed < FAULT_TIMEOUTS["request_timeout_s"] + SLACK_S, f"{op} in {mode} took {elapsed:.1f}s"

    proxy.set_mode("pass")
    assert await store.get("f/existing") == b"before the fault"
    await _exercise(store, op)


@s3_only
async def test_connection_cut_mid_upload_is_unavailable_aborted_and_recovers(
    proxied: Proxied, big_file: tuple[Path, bytes]
) -> None:
    proxy, store = proxied.proxy, proxied.store
    proxy.set_mode("fail_after_bytes", fail_after_bytes=64 * 1024)
    with pytest.raises(ObjectStoreUnavailable):
        await store.put_file("f/big", big_file[0])
    # The broken multipart upload was aborted (the abort request is small enough to get through).
    assert await _pending_uploads(proxied.direct_url, proxied.bucket) == []
    with pytest.raises(ObjectStoreUnavailable):
        await store.put("f/small", b"s" * 200_000)
    with pytest.raises(ObjectNotFound):
        await store.head("f/big")  # tiny requests pass; nothing of the upload is visible

    proxy.set_mode("pass")
    info = await store.put_file("f/big", big_file[0])
    assert info.size == len(big_file[1])
    assert await store.get("f/big", start=0, end=1000) == big_file[1][:1000]
