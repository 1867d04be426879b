"""Object storage for Danube: one async interface, two backends.

- :class:`LocalObjectStore`: a directory (the embedded default of ``danube-local``);
- :class:`S3ObjectStore`: S3 through aioboto3 (AWS, MinIO, moto), imported on first use.

Open one with :func:`open_object_store` from an :class:`ObjectStoreConfig`. The semantics every
backend follows (keys, atomic and conditional writes, ranged reads, listing, errors) are in
``danube_common.objstore.base``; the error classes in ``danube_common.objstore.errors``.
It stores bytes only: segment descriptors and other metadata live in etcd.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from danube_common.objstore.base import (
    MAX_KEY_BYTES,
    ObjectInfo,
    ObjectStore,
    backoff_delays,
    plan_parts,
    validate_key,
    validate_prefix,
)
from danube_common.objstore.config import ObjectStoreConfig, S3Config
from danube_common.objstore.errors import (
    BucketNotFound,
    InvalidObjectKey,
    InvalidObjectRange,
    ObjectNotFound,
    ObjectStoreAccessDenied,
    ObjectStoreDiskFull,
    ObjectStoreError,
    ObjectStoreRequestFailed,
    ObjectStoreUnavailable,
    PreconditionFailed,
)
from danube_common.objstore.local import LocalObjectStore

if TYPE_CHECKING:
    from danube_common.objstore.s3 import S3ObjectStore

__all__ = [
    "MAX_KEY_BYTES",
    "BucketNotFound",
    "InvalidObjectKey",
    "InvalidObjectRange",
    "LocalObjectStore",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectStoreAccessDenied",
    "ObjectStoreConfig",
    "ObjectStoreDiskFull",
    "ObjectStoreError",
    "ObjectStoreRequestFailed",
    "ObjectStoreUnavailable",
    "PreconditionFailed",
    "S3Config",
    "S3ObjectStore",
    "backoff_delays",
    "open_object_store",
    "plan_parts",
    "validate_key",
    "validate_prefix",
]


def __getattr__(name: str) -> Any:
    # The S3 backend pulls in aioboto3 (~0.4 s to import): load it only when asked for.
    if name == "S3ObjectStore":
        from danube_common.objstore.s3 import S3ObjectStore

        return S3ObjectStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


async def open_object_store(cfg: ObjectStoreConfig) -> ObjectStore:
    """Open the configured backend, ready to use (close it with ``aclose`` or ``async with``).

    Local: creates ``local_dir`` and removes temporary files of crashed writers. S3: creates
    the client and checks the bucket exists (``BucketNotFound`` naming endpoint and bucket if
    not), or creates it when ``s3.create_bucket``; an unreachable endpoint raises
    ``ObjectStoreUnavailable`` and bad credentials ``ObjectStoreAccessDenied``.
    """
    if cfg.backend == "local":
        return await LocalObjectStore.open(cfg.local_dir, prefix=cfg.prefix)
    from danube_common.objstore.s3 import S3ObjectStore

    return await S3ObjectStore.open(cfg.s3, prefix=cfg.prefix)
