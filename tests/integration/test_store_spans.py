"""etcd and S3 calls as CLIENT child spans, only under a sampled span (real etcd, real S3
endpoint on moto_server), with spans kept in memory."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode
from pydantic import SecretStr

from danube_common.errors import MetadataUnavailable, Timeout
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.metadata.store import Compare, Op
from danube_common.objstore.errors import ObjectNotFound
from danube_common.objstore.s3 import S3Config, S3ObjectStore
from danube_common.observability import tracing
from tests.support import unique
from tests.support.moto import MOTO_ACCESS_KEY_ID, MOTO_REGION, MOTO_SECRET_ACCESS_KEY, MotoServer
from tests.support.tracing import capture_spans, children, one

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


@pytest.fixture
async def s3(moto: MotoServer) -> AsyncIterator[S3ObjectStore]:
    cfg = S3Config(
        endpoint_url=moto.endpoint_url,
        bucket=unique("spans").lower(),
        region=MOTO_REGION,
        access_key_id=MOTO_ACCESS_KEY_ID,
        secret_access_key=SecretStr(MOTO_SECRET_ACCESS_KEY),
        path_style=True,
        create_bucket=True,
        max_attempts=1,
    )
    store = await S3ObjectStore.open(cfg, prefix="p/")
    try:
        yield store
    finally:
        await store.aclose()


async def test_etcd_calls_under_a_sampled_span_are_its_children(etcd_store: EtcdStore, keys: Keys) -> None:
    k = f"/{keys.cluster}/spans/a"
    with capture_spans() as exporter:
        await etcd_store.put(k, {"secret": "value-1"})  # no current span: no span
        assert exporter.get_finished_spans() == ()
        with tracing.tracer("test").start_as_current_span("decision"):
            await etcd_store.get(k)
            await etcd_store.get_prefix(f"/{keys.cluster}/spans/")
            ok = await etcd_store.txn(
                [Compare.mod_revision_is(k, 0)], [Op.put(k, {"secret": "value-2"})], [Op.get(k)]
            )
            assert not ok.succeeded
            await etcd_store.delete(k)
            lease = await etcd_store.grant_lease(5)
            await etcd_store.revoke_lease(lease)
            await etcd_store.revoke_lease(lease)  # unknown by now: not an error
    spans = exporter.get_finished_spans()
    decision = one(spans, "decision")
    under = children(spans, decision)
    assert [s.name for s in under] == [
        "etcd Range",
        "etcd Range",
        "etcd Txn",
        "etcd DeleteRange",
        "etcd LeaseGrant",
        "etcd LeaseRevoke",
        "etcd LeaseRevoke",
    ]
    assert all(s.kind == SpanKind.CLIENT and s.attributes["db.system"] == "etcd" for s in under)
    assert all(s.status.status_code != StatusCode.ERROR for s in under)
    get, listing, txn = under[0], under[1], under[2]
    assert get.attributes["db.etcd.key"] == k and "db.etcd.prefix" not in get.attributes
    assert listing.attributes["db.etcd.prefix"] is True
    assert txn.attributes["db.etcd.keys"] == (k,)
    assert txn.attributes["db.etcd.txn.succeeded"] is False
    assert (txn.attributes["db.etcd.txn.compares"], txn.attributes["db.etcd.txn.success_ops"]) == (1, 1)
    flat = repr([dict(s.attributes or {}) for s in spans])
    assert "value-" not in flat, "values never go on spans"


async def test_no_etcd_span_when_tracing_is_off_or_the_current_span_is_unsampled(
    etcd_store: EtcdStore, keys: Keys
) -> None:
    k = f"/{keys.cluster}/spans/b"
    with capture_spans(sampler=ALWAYS_OFF) as exporter:
        with tracing.tracer("test").start_as_current_span("unsampled"):
            await etcd_store.put(k, "x")
        assert exporter.get_finished_spans() == ()
    with capture_spans() as exporter:
        tracing.set_enabled_for_tests(False)
        with tracing.tracer("test").start_as_current_span("while off"):
            await etcd_store.get(k)
        assert [s.name for s in exporter.get_finished_spans()] == ["while off"]


async def test_a_failed_etcd_call_is_recorded_on_its_span(keys: Keys) -> None:
    dead = EtcdStore(["127.0.0.1:1"], request_timeout_s=0.3)
    try:
        with (
            capture_spans() as exporter,
            tracing.tracer("test").start_as_current_span("decision"),
            pytest.raises((MetadataUnavailable, Timeout)),
        ):
            await dead.get(f"/{keys.cluster}/x")
        call = one(exporter.get_finished_spans(), "etcd Range")
        assert call.status.status_code == StatusCode.ERROR
        assert any(e.name == "exception" for e in call.events)
    finally:
        await dead.aclose()


async def test_s3_requests_under_a_sampled_span_are_its_children(s3: S3ObjectStore) -> None:
    with capture_spans() as exporter:
        await s3.put("outside", b"x")
        assert exporter.get_finished_spans() == ()
        with tracing.tracer("test").start_as_current_span("upload"):
            await s3.put("seg/1", b"payload")
            assert await s3.get("seg/1") == b"payload"
            await s3.head("seg/1")
            await s3.list("seg/")
            with pytest.raises(ObjectNotFound):
                await s3.get("seg/missing")
            await s3.delete("seg/1")
    spans = exporter.get_finished_spans()
    under = children(spans, one(spans, "upload"))
    assert [s.name for s in under] == [
        "s3 PutObject",
        "s3 GetObject",
        "s3 HeadObject",
        "s3 ListObjectsV2",
        "s3 GetObject",
        "s3 DeleteObject",
    ]
    put = under[0]
    assert put.kind == SpanKind.CLIENT
    assert put.attributes["aws.s3.bucket"] == s3.bucket and put.attributes["aws.s3.key"] == "p/seg/1"
    assert put.attributes["rpc.method"] == "PutObject"
    missing = under[4]
    assert (
        missing.status.status_code == StatusCode.ERROR and missing.attributes["aws.s3.key"] == "p/seg/missing"
    )
    assert all(s.status.status_code != StatusCode.ERROR for s in under if s is not missing)
