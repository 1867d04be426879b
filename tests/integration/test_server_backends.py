"""Both branches of tests/support/containers.py serve what the suites need.

Each test forces one branch: ``local`` (etcd-server and moto_server as child processes, the
main suite's default) runs everywhere; ``containers`` (testcontainers, the locally built
images danube-test-etcd and danube-test-moto) is marked ``compose`` and runs in the compose step
(scripts/compose_test.sh), skipped with a warning where no Docker engine answers.

Same checks for both: etcd answers a put and a get through ``EtcdStore`` and keeps its data
across ``stop()``/``start()`` (the fault tests restart etcd); the S3 endpoint takes and returns
an object through ``S3ObjectStore``; ``stop()`` leaves nothing running.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from pydantic import SecretStr

from danube_common.metadata.etcd import EtcdStore
from danube_common.objstore import S3Config
from danube_common.objstore.s3 import S3ObjectStore
from tests.support import containers, unique
from tests.support.moto import MOTO_ACCESS_KEY_ID, MOTO_REGION, MOTO_SECRET_ACCESS_KEY, MotoServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

BACKENDS = ["local", pytest.param("containers", marks=pytest.mark.compose)]


def require(backend: containers.Backend) -> None:
    if backend == "containers":
        containers.skip_without_engine("testcontainers branch of tests/support/containers.py")


def our_containers() -> list[str]:
    """Containers this process started through tests/support/containers.py."""
    res = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={containers.LABEL}={os.getpid()}"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return res.stdout.split()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_etcd_serves_and_keeps_its_data_across_a_restart(backend: containers.Backend) -> None:
    require(backend)
    key = f"/{unique('backend')}/k"
    with containers.etcd_server(backend) as server:
        assert type(server).__name__ == ("EtcdContainer" if backend == "containers" else "EtcdProcess")
        store = EtcdStore([server.endpoint], request_timeout_s=5.0)
        try:
            await store.wait_ready(10)
            await store.put(key, b"v1")
            kv = await store.get(key)
            assert kv is not None and kv.value == b"v1"
        finally:
            await store.aclose()
        server.stop()
        server.start(30)
        store = EtcdStore([server.endpoint], request_timeout_s=5.0)
        try:
            await store.wait_ready(10)
            kv = await store.get(key)
            assert kv is not None and kv.value == b"v1", "etcd kept its data across stop()/start()"
        finally:
            await store.aclose()
    if backend == "containers":
        assert our_containers() == [], "the etcd container is removed on exit"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_s3_endpoint_takes_and_returns_an_object(backend: containers.Backend) -> None:
    require(backend)
    with MotoServer(backend=backend) as moto:
        assert moto.backend == backend
        cfg = S3Config(
            endpoint_url=moto.endpoint_url,
            bucket=unique("b").lower(),
            region=MOTO_REGION,
            access_key_id=MOTO_ACCESS_KEY_ID,
            secret_access_key=SecretStr(MOTO_SECRET_ACCESS_KEY),
            path_style=True,
            create_bucket=True,
        )
        store = await S3ObjectStore.open(cfg)
        try:
            await store.put("a/b", b"payload")
            assert await store.get("a/b") == b"payload"
            assert [o.key for o in await store.list("a/")] == ["a/b"]
        finally:
            await store.aclose()
    if backend == "containers":
        assert our_containers() == [], "the moto container is removed on exit"
