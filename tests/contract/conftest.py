"""Fixtures of the contract suites: one moto S3 server per session, a fresh bucket per test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from danube_common.objstore import S3Config
from tests.support import unique
from tests.support.moto import MOTO_ACCESS_KEY_ID, MOTO_REGION, MOTO_SECRET_ACCESS_KEY, MotoServer

#: Small enough that a few MiB make a multipart upload and a few dozen keys several list pages.
TEST_PART_SIZE_BYTES = 5 * 1024 * 1024
TEST_LIST_PAGE_SIZE = 5


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


def moto_s3_config(endpoint_url: str, bucket: str | None = None, **over: Any) -> S3Config:
    """Settings for a moto endpoint: path-style, short timeouts, small parts and pages."""
    fields: dict[str, Any] = {
        "endpoint_url": endpoint_url,
        "bucket": bucket or unique("b").lower(),
        "region": MOTO_REGION,
        "access_key_id": MOTO_ACCESS_KEY_ID,
        "secret_access_key": MOTO_SECRET_ACCESS_KEY,
        "path_style": True,
        "create_bucket": True,
        "connect_timeout_s": 2.0,
        "read_timeout_s": 5.0,
        "request_timeout_s": 10.0,
        "multipart_threshold_bytes": TEST_PART_SIZE_BYTES,
        "multipart_part_size_bytes": TEST_PART_SIZE_BYTES,
        "list_page_size": TEST_LIST_PAGE_SIZE,
    }
    fields.update(over)
    return S3Config(**fields)


@pytest.fixture
def s3_config(moto_server: MotoServer) -> S3Config:
    """Settings for a fresh bucket on the session's moto server (created when the store opens)."""
    return moto_s3_config(moto_server.endpoint_url)
