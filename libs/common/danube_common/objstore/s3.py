"""The S3 backend (aioboto3): AWS S3, MinIO, moto and other S3-compatible endpoints.

- One aiobotocore client per store, opened by :meth:`S3ObjectStore.open` (which checks the
  bucket, or creates it when ``s3.create_bucket``) and closed by ``aclose``.
- Every request has botocore's connect/read timeouts and a hard cap, ``s3.request_timeout_s``,
  that also covers what socket timeouts miss (a server that stops reading an upload, or never
  answers ``Expect: 100-continue``). botocore retries ``s3.max_attempts`` times in all; longer
  retry policies are the caller's (``backoff_delays``).
- ``if_absent=True`` sends ``If-None-Match: *`` on PutObject and on CompleteMultipartUpload, so
  the store itself refuses to overwrite (HTTP 412 -> ``PreconditionFailed``; a concurrent
  conditional write in progress, HTTP 409, -> ``ObjectStoreUnavailable``, retry). AWS, MinIO and
  moto 5 honour it. With ``s3.conditional_writes=false`` (an endpoint without support) the
  store checks with HEAD first and then writes: **that fallback is not atomic**: two writers
  racing on one key can both succeed, the last one winning.
- ``put_file`` reads the file in a thread; above ``s3.multipart_threshold_bytes`` it uploads
  parts of ``s3.multipart_part_size_bytes``, ``s3.multipart_concurrency`` at a time, with CRC32
  checksums per part. A failed or cancelled multipart upload is aborted (best effort; a bucket
  lifecycle rule "AbortIncompleteMultipartUpload" cleans any that an abort could not reach).
- Ranged reads send ``Range: bytes=a-b``; S3's 416 for a start at or past the end becomes
  ``b""`` at exactly the end and ``InvalidObjectRange`` beyond it (see ``base``).
- Errors: :func:`s3_error` maps an S3 error code and HTTP status to our classes;
  :meth:`S3ObjectStore._translate` maps everything else botocore and aiohttp raise.
- Tracing: while a sampled span is current, each request is a CLIENT child span named after the
  S3 operation (``s3 PutObject``, ``s3 GetObject``, ...) with the bucket and key; otherwise
  nothing is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import os
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from os import PathLike
from typing import Any

import aioboto3
import aiohttp
import botocore.exceptions as bex
from aiobotocore.config import AioConfig
from opentelemetry.trace import SpanKind

from danube_common.objstore.base import (
    ObjectInfo,
    ObjectStore,
    check_limit,
    check_range,
    clamp_range,
    full_key,
    plan_parts,
    validate_key,
    validate_prefix,
)
from danube_common.objstore.config import S3_MAX_PARTS, S3Config
from danube_common.objstore.errors import (
    BucketNotFound,
    InvalidObjectKey,
    InvalidObjectRange,
    ObjectNotFound,
    ObjectStoreAccessDenied,
    ObjectStoreError,
    ObjectStoreRequestFailed,
    ObjectStoreUnavailable,
    PreconditionFailed,
)
from danube_common.observability import tracing

log = logging.getLogger(__name__)

_TRACER_NAME = "danube.objstore"
#: S3's names of the operations behind our requests' short names (their spans' names).
_S3_OPERATIONS = {
    "put": "PutObject",
    "get": "GetObject",
    "head": "HeadObject",
    "list": "ListObjectsV2",
    "delete": "DeleteObject",
    "check": "HeadBucket",
    "create-bucket": "CreateBucket",
    "create-multipart-upload": "CreateMultipartUpload",
    "upload-part": "UploadPart",
    "complete-multipart-upload": "CompleteMultipartUpload",
}


def s3_operation(op: str) -> str:
    """S3's name of a request (``upload-part 2/5`` -> ``UploadPart``)."""
    return _S3_OPERATIONS.get(op.split(" ", 1)[0], op)


#: Seconds an abort of a failed multipart upload may take before we leave it to a lifecycle rule.
_ABORT_TIMEOUT_S = 10.0

_session: aioboto3.Session | None = None


def _shared_session() -> aioboto3.Session:
    """One session for every store: it caches botocore's service models (loading them costs
    ~0.15 s per session). Credentials and settings are per client, never taken from it."""
    global _session
    if _session is None:
        _session = aioboto3.Session()
    return _session


_ACCESS_CODES = frozenset(
    {
        "AccessDenied",
        "AccountProblem",
        "AllAccessDisabled",
        "ExpiredToken",
        "InvalidAccessKeyId",
        "InvalidToken",
        "InvalidSecurity",
        "SignatureDoesNotMatch",
        "TokenRefreshRequired",
        "RequestTimeTooSkewed",
    }
)
_UNAVAILABLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestThrottled",
        "TooManyRequestsException",
        "RequestTimeout",
        "InternalError",
        "ServiceUnavailable",
        "OperationAborted",
        "ConditionalRequestConflict",
        "NoSuchUpload",
        "XMinioServerNotInitialized",
        "XMinioStorageFull",
    }
)
_WRONG_PLACE_CODES = frozenset(
    {"PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException", "301"}
)


def s3_error(*, op: str, where: str, code: str, status: int, message: str, endpoint: str) -> ObjectStoreError:
    """The error for an S3 error response: ``code`` (e.g. "NoSuchKey") and HTTP ``status``.

    ``where`` names the object or bucket, ``endpoint`` the server; both go in the message.
    """
    text = f"S3 {op} of {where} failed: {code or '?'} (HTTP {status}): {message or 'no message'}"
    if code == "NoSuchBucket":
        return BucketNotFound(f"{text}; the bucket does not exist at {endpoint}: check s3.bucket")
    if code in ("NoSuchKey", "NotFound") or (status == 404 and code != "NoSuchUpload"):
        return ObjectNotFound(f"no object {where} ({code or 'HTTP 404'})")
    if code == "PreconditionFailed" or status == 412:
        return PreconditionFailed(f"{where} already exists (conditional write refused); nothing was written")
    if code == "InvalidRange" or status == 416:
        return InvalidObjectRange(text)
    if code in _ACCESS_CODES or status in (401, 403):
        hint = (
            "check this machine's clock (it is too far from the server's)"
            if code == "RequestTimeTooSkewed"
            else "check s3.access_key_id / s3.secret_access_key (or the AWS credential chain), "
            "s3.region, and that these credentials may read and write the bucket"
        )
        return ObjectStoreAccessDenied(f"{text}; {hint}")
    if code == "NotImplemented" or status == 501:
        return ObjectStoreRequestFailed(
            f"{text}; the endpoint {endpoint} does not implement this request. If it was a conditional "
            "write (if_absent), set s3.conditional_writes=false (not atomic, see the docs)"
        )
    if code == "NoSuchUpload":
        return ObjectStoreUnavailable(f"{text}; the multipart upload was aborted meanwhile: upload again")
    if code in _UNAVAILABLE_CODES or status >= 500 or status in (408, 429):
        return ObjectStoreUnavailable(text)
    if code in _WRONG_PLACE_CODES or status in (301, 307):
        return ObjectStoreRequestFailed(f"{text}; check s3.region and s3.endpoint_url ({endpoint})")
    return ObjectStoreRequestFailed(text)


def _strip_etag(etag: str | None) -> str:
    return (etag or "").strip('"')


def _response_time(resp: dict[str, Any]) -> datetime:
    """The server's Date header (when it stored the object), or our clock if it sent none."""
    date = resp.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if date:
        with contextlib.suppress(TypeError, ValueError):
            return email.utils.parsedate_to_datetime(date).astimezone(UTC)
    return datetime.now(UTC)


def _pread_exact(fd: int, length: int, offset: int) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < length:
        chunk = os.pread(fd, length - got, offset + got)
        if not chunk:
            raise OSError(f"file shrank while uploading: wanted {length} bytes at offset {offset}")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _read_file(path: str | PathLike[str]) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class S3ObjectStore(ObjectStore):
    """Objects in an S3 bucket (see the module docstring). Build with :meth:`open`."""

    def __init__(self, client: Any, cfg: S3Config, *, prefix: str, stack: contextlib.AsyncExitStack) -> None:
        self._client = client
        self._cfg = cfg
        self._prefix = prefix
        self._stack = stack
        self._closed = False
        self.bucket = cfg.bucket
        self.endpoint = cfg.endpoint_url or f"AWS S3 ({cfg.region})"

    @classmethod
    async def open(cls, cfg: S3Config, *, prefix: str = "") -> S3ObjectStore:
        """Create the client and check the bucket (creating it if ``cfg.create_bucket``)."""
        if prefix and not prefix.endswith("/"):
            raise InvalidObjectKey(f"invalid prefix {prefix!r}: it must be empty or end with '/'")
        if prefix:
            validate_key(prefix[:-1])
        cfg.check_files()
        boto_cfg = AioConfig(
            connect_timeout=cfg.connect_timeout_s,
            read_timeout=cfg.read_timeout_s,
            retries={"total_max_attempts": cfg.max_attempts, "mode": "standard"},
            s3={"addressing_style": "path" if cfg.path_style else "virtual"},
            signature_version="s3v4",
            max_pool_connections=max(10, cfg.multipart_concurrency * 2),
        )
        session = _shared_session()
        stack = contextlib.AsyncExitStack()
        client = await stack.enter_async_context(
            session.client(
                "s3",
                endpoint_url=cfg.endpoint_url,
                region_name=cfg.region,
                aws_access_key_id=cfg.access_key_id,
                aws_secret_access_key=cfg.secret_access_key.get_secret_value()
                if cfg.secret_access_key
                else None,
                aws_session_token=cfg.session_token.get_secret_value() if cfg.session_token else None,
                # A private CA's bundle; None: botocore's default (its bundle, or AWS_CA_BUNDLE).
                # Never False: certificates are always verified.
                verify=cfg.ca_file,
                config=boto_cfg,
            )
        )
        store = cls(client, cfg, prefix=prefix, stack=stack)
        try:
            await store._check_bucket()
        except BaseException:
            await stack.aclose()
            raise
        return store

    def __repr__(self) -> str:
        return f"S3ObjectStore(endpoint={self.endpoint!r}, bucket={self.bucket!r}, prefix={self._prefix!r})"

    # ------------------------------------------------------------------ the interface

    async def put(self, key: str, data: bytes, *, if_absent: bool = False) -> ObjectInfo:
        full_key(self._prefix, key)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"put needs bytes, got {type(data).__name__}")
        body = bytes(data)
        extra = await self._if_absent_args(key, if_absent)
        async with self._request("put", key):
            resp = await self._client.put_object(Bucket=self.bucket, Key=self._full(key), Body=body, **extra)
        return ObjectInfo(key, len(body), _strip_etag(resp.get("ETag")), _response_time(resp))

    async def put_file(self, key: str, path: str | PathLike[str], *, if_absent: bool = False) -> ObjectInfo:
        """Upload the file at ``path``. An ``OSError`` about ``path`` itself (missing,
        unreadable) propagates unchanged: it is the caller's file, not the store's."""
        full_key(self._prefix, key)
        self._check_open()
        size = (await asyncio.to_thread(os.stat, path)).st_size
        if size <= self._cfg.multipart_threshold_bytes:
            return await self.put(key, await asyncio.to_thread(_read_file, path), if_absent=if_absent)
        fd = await asyncio.to_thread(os.open, path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return await self._multipart(key, fd, size, if_absent)
        finally:
            os.close(fd)

    async def get(self, key: str, *, start: int | None = None, end: int | None = None) -> bytes:
        full_key(self._prefix, key)
        lo, hi = check_range(key, start, end)
        if hi == lo:  # an empty range: S3 cannot express it; still check the object exists
            clamp_range(key, lo, hi, (await self.head(key)).size)
            return b""
        extra: dict[str, str] = {}
        if lo > 0 or hi is not None:
            extra["Range"] = f"bytes={lo}-" + ("" if hi is None else str(hi - 1))
        try:
            async with self._request("get", key):
                resp = await self._client.get_object(Bucket=self.bucket, Key=self._full(key), **extra)
                async with resp["Body"] as body:
                    data: bytes = await body.read()
        except InvalidObjectRange:
            # 416: the start is at or past the end. At exactly the end, the answer is b"".
            clamp_range(key, lo, hi, (await self.head(key)).size)
            return b""
        return data

    async def head(self, key: str) -> ObjectInfo:
        full_key(self._prefix, key)
        async with self._request("head", key):
            resp = await self._client.head_object(Bucket=self.bucket, Key=self._full(key))
        return ObjectInfo(
            key,
            int(resp["ContentLength"]),
            _strip_etag(resp.get("ETag")),
            resp["LastModified"].astimezone(UTC),
        )

    async def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> list[ObjectInfo]:
        validate_prefix(prefix)
        check_limit(limit)
        out: list[ObjectInfo] = []
        if limit == 0:
            return out
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self._prefix + prefix}
        if start_after is not None:
            args["StartAfter"] = self._prefix + start_after
        skip = len(self._prefix)
        while True:
            page = self._cfg.list_page_size
            if limit is not None:
                page = min(page, limit - len(out))
            async with self._request("list", prefix + "*"):
                resp = await self._client.list_objects_v2(MaxKeys=page, **args)
            for item in resp.get("Contents", ()):
                out.append(
                    ObjectInfo(
                        item["Key"][skip:],
                        int(item["Size"]),
                        _strip_etag(item.get("ETag")),
                        item["LastModified"].astimezone(UTC),
                    )
                )
            if not resp.get("IsTruncated") or (limit is not None and len(out) >= limit):
                return out
            token = resp.get("NextContinuationToken")
            if not token:  # a truncated page must carry one; do not loop forever if not
                raise ObjectStoreRequestFailed(
                    f"S3 list of {self.bucket!r} at {self.endpoint} returned a truncated page without a "
                    "continuation token"
                )
            args["ContinuationToken"] = token

    async def delete(self, key: str) -> None:
        full_key(self._prefix, key)
        with contextlib.suppress(ObjectNotFound):
            async with self._request("delete", key):
                await self._client.delete_object(Bucket=self.bucket, Key=self._full(key))

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self._stack.aclose()

    # ------------------------------------------------------------------ internals

    def _full(self, key: str) -> str:
        return self._prefix + key

    def _where(self, key: str | None) -> str:
        return f"s3://{self.bucket}/{self._full(key)}" if key is not None else f"bucket {self.bucket!r}"

    def _check_open(self) -> None:
        if self._closed:
            raise ObjectStoreUnavailable(f"{self!r} is closed (the process is shutting down?)")

    @contextlib.asynccontextmanager
    async def _request(self, op: str, key: str | None) -> AsyncIterator[None]:
        """One S3 request: the hard time cap, and every failure translated to our errors; a
        CLIENT child span (``s3 PutObject`` ...) when a sampled span is current."""
        self._check_open()
        with self._span(op, key):
            try:
                async with asyncio.timeout(self._cfg.request_timeout_s):
                    yield
            except ObjectStoreError:
                raise
            except Exception as exc:
                raise self._translate(exc, op, key) from exc

    @contextlib.contextmanager
    def _span(self, op: str, key: str | None) -> Iterator[None]:
        if not tracing.in_sampled_span():
            yield
            return
        operation = s3_operation(op)
        attrs: dict[str, Any] = {
            "rpc.system": "aws-api",
            "rpc.service": "S3",
            "rpc.method": operation,
            "aws.s3.bucket": self.bucket,
            "server.address": self.endpoint,
        }
        if key is not None:
            attrs["aws.s3.key"] = self._full(key)
        with tracing.tracer(_TRACER_NAME).start_as_current_span(
            f"s3 {operation}", kind=SpanKind.CLIENT, attributes=attrs
        ):
            yield

    def _translate(self, exc: Exception, op: str, key: str | None) -> ObjectStoreError:
        where = self._where(key)
        if isinstance(exc, bex.ClientError):
            err = exc.response.get("Error", {})
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            return s3_error(
                op=op,
                where=where,
                code=str(err.get("Code", "")),
                status=status,
                message=str(err.get("Message", "")),
                endpoint=self.endpoint,
            )
        if isinstance(exc, bex.NoCredentialsError | bex.PartialCredentialsError):
            return ObjectStoreAccessDenied(
                f"S3 {op} of {where}: no usable credentials ({exc}); set s3.access_key_id and "
                "s3.secret_access_key, or provide credentials the AWS way (environment, ~/.aws, role)"
            )
        if isinstance(exc, TimeoutError) and not isinstance(exc, bex.BotoCoreError):
            return ObjectStoreUnavailable(
                f"S3 {op} of {where} got no answer from {self.endpoint} within s3.request_timeout_s="
                f"{self._cfg.request_timeout_s}s"
            )
        if isinstance(exc, bex.SSLError):
            if self._cfg.ca_file:
                trust = f"s3.ca_file {self._cfg.ca_file!r}"
                fix = "give the CA that signed the endpoint's certificate"
            else:
                trust, fix = "the default CA bundle", "for a private CA, set s3.ca_file"
            return ObjectStoreUnavailable(
                f"S3 {op} of {where}: TLS with {self.endpoint} failed ({exc}): its certificate must be "
                f"signed by a CA in {trust} and name the endpoint's host; {fix}"
            )
        if isinstance(exc, bex.ConnectTimeoutError | bex.ReadTimeoutError):
            return ObjectStoreUnavailable(
                f"S3 {op} of {where} timed out talking to {self.endpoint} (s3.connect_timeout_s="
                f"{self._cfg.connect_timeout_s}, s3.read_timeout_s={self._cfg.read_timeout_s}): {exc}"
            )
        if isinstance(
            exc,
            bex.ConnectionError
            | bex.HTTPClientError
            | bex.IncompleteReadError
            | bex.ResponseStreamingError
            | bex.FlexibleChecksumError
            | aiohttp.ClientError
            | OSError,
        ):
            return ObjectStoreUnavailable(f"S3 {op} of {where}: cannot talk to {self.endpoint}: {exc}")
        return ObjectStoreRequestFailed(f"S3 {op} of {where} failed: {type(exc).__name__}: {exc}")

    async def _if_absent_args(
        self, key: str, if_absent: bool, *, check_first: bool = False
    ) -> dict[str, str]:
        """Request arguments for a conditional write.

        Without ``s3.conditional_writes`` this is the (non-atomic) HEAD check itself. With
        ``check_first`` the HEAD also runs before a conditional write, to fail before uploading
        a large body for nothing; ``If-None-Match`` stays the atomic guard.
        """
        if not if_absent:
            return {}
        if check_first or not self._cfg.conditional_writes:
            try:
                await self.head(key)
            except ObjectNotFound:
                pass
            else:
                raise PreconditionFailed(
                    f"{self._where(key)} already exists (checked with HEAD); nothing was written"
                )
        return {"IfNoneMatch": "*"} if self._cfg.conditional_writes else {}

    async def _check_bucket(self) -> None:
        try:
            async with self._request("check", None):
                await self._client.head_bucket(Bucket=self.bucket)
            return
        except ObjectNotFound:  # HEAD has no body: a bare 404 means "no such bucket" here
            pass
        except BucketNotFound:
            pass
        if not self._cfg.create_bucket:
            raise BucketNotFound(
                f"bucket {self.bucket!r} does not exist at {self.endpoint}: create it, fix s3.bucket, or "
                "set s3.create_bucket=true (for local development)"
            )
        args: dict[str, Any] = {"Bucket": self.bucket}
        if self._cfg.region != "us-east-1":
            args["CreateBucketConfiguration"] = {"LocationConstraint": self._cfg.region}
        try:
            async with self._request("create-bucket", None):
                await self._client.create_bucket(**args)
        except ObjectStoreRequestFailed as exc:
            if _s3_code(exc) != "BucketAlreadyOwnedByYou":  # created meanwhile by a peer: fine
                raise
        log.info("created bucket %r at %s", self.bucket, self.endpoint)

    async def _multipart(self, key: str, fd: int, size: int, if_absent: bool) -> ObjectInfo:
        extra = await self._if_absent_args(key, if_absent, check_first=True)
        full = self._full(key)
        async with self._request("create-multipart-upload", key):
            created = await self._client.create_multipart_upload(
                Bucket=self.bucket, Key=full, ChecksumAlgorithm="CRC32"
            )
        upload_id: str = created["UploadId"]
        plan = plan_parts(size, self._cfg.multipart_part_size_bytes, max_parts=S3_MAX_PARTS)
        parts: list[dict[str, Any]] = [{} for _ in plan]
        gate = asyncio.Semaphore(self._cfg.multipart_concurrency)

        async def upload(i: int, offset: int, length: int) -> None:
            async with gate:
                data = await asyncio.to_thread(_pread_exact, fd, length, offset)
                async with self._request(f"upload-part {i + 1}/{len(plan)}", key):
                    resp = await self._client.upload_part(
                        Bucket=self.bucket,
                        Key=full,
                        UploadId=upload_id,
                        PartNumber=i + 1,
                        Body=data,
                        ChecksumAlgorithm="CRC32",
                    )
                part = {"PartNumber": i + 1, "ETag": resp["ETag"]}
                if "ChecksumCRC32" in resp:
                    part["ChecksumCRC32"] = resp["ChecksumCRC32"]
                parts[i] = part

        try:
            try:
                async with asyncio.TaskGroup() as tg:
                    for i, (offset, length) in enumerate(plan):
                        tg.create_task(upload(i, offset, length))
            except BaseExceptionGroup as group:
                first = _first_error(group)
                raise first from first.__cause__
            async with self._request("complete-multipart-upload", key):
                resp = await self._client.complete_multipart_upload(
                    Bucket=self.bucket,
                    Key=full,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                    **extra,
                )
        except BaseException:
            await self._abort_multipart(key, upload_id)
            raise
        return ObjectInfo(key, size, _strip_etag(resp.get("ETag")), _response_time(resp))

    async def _abort_multipart(self, key: str, upload_id: str) -> None:
        try:
            async with asyncio.timeout(_ABORT_TIMEOUT_S):
                await self._client.abort_multipart_upload(
                    Bucket=self.bucket, Key=self._full(key), UploadId=upload_id
                )
        except Exception as exc:
            log.warning(
                "could not abort multipart upload %s of %s (%s); a lifecycle rule "
                "(AbortIncompleteMultipartUpload) will have to remove its parts",
                upload_id,
                self._where(key),
                exc,
            )


def _s3_code(exc: BaseException) -> str | None:
    """The S3 error code behind one of our errors, if an S3 error response caused it."""
    cause = exc.__cause__
    if isinstance(cause, bex.ClientError):
        return str(cause.response.get("Error", {}).get("Code", "")) or None
    return None


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error to report for a failed group of part uploads: ours first, cancellation last."""
    leaves: list[BaseException] = []

    def walk(g: BaseExceptionGroup[BaseException]) -> None:
        for e in g.exceptions:
            if isinstance(e, BaseExceptionGroup):
                walk(e)
            else:
                leaves.append(e)

    walk(group)
    for e in leaves:
        if isinstance(e, ObjectStoreError):
            return e
    for e in leaves:
        if not isinstance(e, asyncio.CancelledError):
            return e
    return leaves[0]
