"""Errors of the object store, as classes of the one ``DanubeError`` hierarchy.

Each class inherits its gRPC status and retryability from the catalogue base it extends
(``Unavailable``, ``NotFound``, ``FailedPrecondition``, ...) and also from
:class:`ObjectStoreError`, so a caller can catch "anything the object store raised" or
"anything retryable" (``err.retryable``) without knowing the backend.

| class                       | code                         | base               | retryable |
|-----------------------------|------------------------------|--------------------|-----------|
| ObjectStoreUnavailable      | OBJECT_STORE_UNAVAILABLE     | Unavailable        | yes       |
| ObjectStoreDiskFull         | OBJECT_STORE_DISK_FULL       | DiskFull           | yes       |
| ObjectNotFound              | OBJECT_NOT_FOUND             | NotFound           | no        |
| BucketNotFound              | BUCKET_NOT_FOUND             | FailedPrecondition | no        |
| PreconditionFailed          | OBJECT_PRECONDITION_FAILED   | FailedPrecondition | no        |
| ObjectStoreAccessDenied     | OBJECT_STORE_ACCESS_DENIED   | PermissionDenied   | no        |
| InvalidObjectKey            | INVALID_OBJECT_KEY           | InvalidArgument    | no        |
| InvalidObjectRange          | INVALID_OBJECT_RANGE         | InvalidArgument    | no        |
| ObjectStoreRequestFailed    | OBJECT_STORE_REQUEST_FAILED  | Internal           | no        |

The backends translate their library's exceptions (botocore, aiohttp, ``OSError``) into
these at the boundary, with ``raise ... from exc`` so the original stays in the traceback.
These classes are not in ``danube_common.errors.ERRORS_BY_CODE``; should one cross a gRPC
boundary, the client maps it back by status to the catalogue base.
"""

from __future__ import annotations

from danube_common.errors import (
    DanubeError,
    DiskFull,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unavailable,
)


class ObjectStoreError(DanubeError):
    """Base of every object-store error (catch this for "anything the store raised")."""

    code = "OBJECT_STORE_ERROR"


class ObjectStoreUnavailable(ObjectStoreError, Unavailable):
    """The store did not answer or answered "later": connection refused or reset, a timeout,
    a 5xx, throttling (SlowDown), a conflicting concurrent conditional write, or a local I/O
    error. Retrying (with backoff) can help."""

    code = "OBJECT_STORE_UNAVAILABLE"


class ObjectStoreDiskFull(ObjectStoreError, DiskFull):
    """The local backend's disk (or quota) is full (ENOSPC, EDQUOT): nothing was stored."""

    code = "OBJECT_STORE_DISK_FULL"


class ObjectNotFound(ObjectStoreError, NotFound):
    """No object under this key."""

    code = "OBJECT_NOT_FOUND"


class BucketNotFound(ObjectStoreError, FailedPrecondition):
    """The configured bucket does not exist (a setting to fix, not a missing object)."""

    code = "BUCKET_NOT_FOUND"


class PreconditionFailed(ObjectStoreError, FailedPrecondition):
    """A conditional write (``if_absent=True``) found the key already taken: nothing was written."""

    code = "OBJECT_PRECONDITION_FAILED"


class ObjectStoreAccessDenied(ObjectStoreError, PermissionDenied):
    """Credentials or permissions are wrong; the message names the setting to check."""

    code = "OBJECT_STORE_ACCESS_DENIED"


class InvalidObjectKey(ObjectStoreError, InvalidArgument):
    """The key (or list prefix) breaks the key rules, or the local backend cannot store it."""

    code = "INVALID_OBJECT_KEY"


class InvalidObjectRange(ObjectStoreError, InvalidArgument):
    """A ranged read asked for negative offsets, ``start > end``, or starts past the object's end."""

    code = "INVALID_OBJECT_RANGE"


class ObjectStoreRequestFailed(ObjectStoreError, Internal):
    """The store refused a request for a reason not classified above (the S3 error code is in
    the message, e.g. a wrong region or an endpoint without conditional writes). Not retryable:
    a setting or the code needs fixing."""

    code = "OBJECT_STORE_REQUEST_FAILED"
