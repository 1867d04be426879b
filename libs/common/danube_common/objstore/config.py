"""Settings of the object store: which backend, where, and how long to wait.

One frozen model, meant to be a section of a service's config (``object_store:`` in YAML,
``DANUBE_<SERVICE>_OBJECT_STORE__S3__BUCKET=...`` in the environment). Fields name their units.

Credentials: ``s3.access_key_id`` / ``s3.secret_access_key`` may be given in YAML or, better,
through the environment at start-up (``..._OBJECT_STORE__S3__SECRET_ACCESS_KEY``). Left unset,
botocore's default chain applies when the client is created (``AWS_ACCESS_KEY_ID``,
``~/.aws/credentials``, an instance or pod role). The secret is a ``SecretStr``: its repr and
``str`` print ``**********``, so logging the config never leaks it.

Example for MinIO (or moto in tests)::

    object_store:
      backend: s3
      prefix: danube/
      s3:
        endpoint_url: http://minio:9000
        bucket: danube
        region: us-east-1
        path_style: true
        create_bucket: true

Example for an endpoint whose certificate a private CA signed (``ca_file``: only that CA is
trusted, not the system's roots; the file is checked at start-up)::

    object_store:
      backend: s3
      s3:
        endpoint_url: https://minio.internal:9000
        bucket: danube
        path_style: true
        ca_file: /etc/danube/tls/ca.pem

TLS certificates are always verified: there is no setting that turns verification off.

Example for AWS S3 (credentials from the environment or the instance role)::

    object_store:
      backend: s3
      s3: {bucket: my-danube-history, region: eu-west-1}
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from danube_common.config import Frozen
from danube_common.objstore.base import validate_key
from danube_common.objstore.errors import InvalidObjectKey
from danube_common.security.tls import load_pem_files

MIB = 1024 * 1024
GIB = 1024 * MIB
#: S3 refuses multipart parts smaller than this (except the last one).
S3_MIN_PART_SIZE_BYTES = 5 * MIB
#: S3's largest part, and its largest single PutObject.
S3_MAX_PART_SIZE_BYTES = 5 * GIB
#: S3's most parts in one multipart upload.
S3_MAX_PARTS = 10_000
#: S3 returns at most this many keys per ListObjectsV2 page.
S3_MAX_LIST_PAGE = 1000

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
_REGION = re.compile(r"^[a-z0-9\-]{1,64}$")


class S3Config(Frozen):
    #: http(s)://host:port of an S3-compatible endpoint (MinIO, moto); unset = AWS for ``region``.
    endpoint_url: str | None = None
    #: The bucket holding every object (3-63 chars: lowercase letters, digits, '.', '-').
    bucket: str = ""
    region: str = "us-east-1"
    #: Unset: botocore's default credential chain (environment, ~/.aws, instance role).
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None
    #: Only for temporary (STS) credentials.
    session_token: SecretStr | None = None
    #: PEM CA bundle that verifies an ``https://`` endpoint's certificate (a private CA), instead of
    #: the default bundle (botocore's, or ``AWS_CA_BUNDLE``). Needs an https endpoint (or AWS).
    #: Verification cannot be turned off.
    ca_file: str | None = None
    #: Address buckets as http://host/bucket/key (MinIO and moto need this) instead of
    #: http://bucket.host/key (AWS's default).
    path_style: bool = False
    #: Give up opening a TCP/TLS connection after this long.
    connect_timeout_s: float = Field(default=5.0, gt=0)
    #: Give up when the server sends nothing for this long while we wait for an answer.
    read_timeout_s: float = Field(default=30.0, gt=0)
    #: Hard cap on one S3 request, botocore's own retries included (also covers a server that
    #: stops reading an upload, which no socket timeout catches).
    request_timeout_s: float = Field(default=60.0, gt=0)
    #: Attempts botocore makes per request (1 = no retry inside botocore). Longer retry
    #: policies belong to the caller (see ``backoff_delays``).
    max_attempts: int = Field(default=3, ge=1, le=10)
    #: ``put_file`` of a file larger than this uses a multipart upload.
    multipart_threshold_bytes: int = Field(default=16 * MIB, ge=1)
    #: Size of each multipart part (S3 allows 5 MiB to 5 GiB; grown if 10,000 parts are not enough).
    multipart_part_size_bytes: int = Field(default=8 * MIB)
    #: Parts uploaded at once (memory use is about this times the part size).
    multipart_concurrency: int = Field(default=4, ge=1, le=64)
    #: Keys asked for per ListObjectsV2 page (S3 caps it at 1000; small values are for tests).
    list_page_size: int = Field(default=S3_MAX_LIST_PAGE, ge=1)
    #: Create the bucket at start-up if it is missing (local development and tests).
    create_bucket: bool = False
    #: The endpoint honours ``If-None-Match: *`` on PutObject / CompleteMultipartUpload (AWS since
    #: 2024-08, MinIO, moto 5). Set false for one that does not: ``if_absent`` writes then check
    #: with HEAD before PUT, which is NOT atomic (two writers can both "win").
    conditional_writes: bool = True

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, v: str) -> str:
        if v and (not _BUCKET.match(v) or ".." in v):
            raise ValueError(
                f"invalid bucket name {v!r}: use 3-63 characters, lowercase letters, digits, '.' and '-', "
                "starting and ending with a letter or digit"
            )
        return v

    @field_validator("region")
    @classmethod
    def _region(cls, v: str) -> str:
        if not _REGION.match(v):
            raise ValueError(f"invalid region {v!r}: use an AWS-style region name such as 'us-east-1'")
        return v

    @field_validator("endpoint_url")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^/\s]+/?$", v):
            raise ValueError(
                f"invalid endpoint_url {v!r}: use http://host:port or https://host[:port] "
                "(no path; leave it unset for AWS)"
            )
        return v.rstrip("/") if v else v

    @field_validator("multipart_part_size_bytes")
    @classmethod
    def _part_size(cls, v: int) -> int:
        if not S3_MIN_PART_SIZE_BYTES <= v <= S3_MAX_PART_SIZE_BYTES:
            raise ValueError(
                f"multipart_part_size_bytes must be between {S3_MIN_PART_SIZE_BYTES} (5 MiB) and "
                f"{S3_MAX_PART_SIZE_BYTES} (5 GiB), the limits of S3, got {v}"
            )
        return v

    @field_validator("multipart_threshold_bytes")
    @classmethod
    def _threshold(cls, v: int) -> int:
        if v > S3_MAX_PART_SIZE_BYTES:
            raise ValueError(
                f"multipart_threshold_bytes must be at most {S3_MAX_PART_SIZE_BYTES} (5 GiB, the largest "
                f"single PutObject), got {v}"
            )
        return v

    @field_validator("list_page_size")
    @classmethod
    def _page(cls, v: int) -> int:
        if v > S3_MAX_LIST_PAGE:
            raise ValueError(f"list_page_size must be between 1 and {S3_MAX_LIST_PAGE}, got {v}")
        return v

    @model_validator(mode="after")
    def _ca_needs_https(self) -> S3Config:
        if self.ca_file and self.endpoint_url and self.endpoint_url.startswith("http://"):
            raise ValueError(
                f"s3.ca_file is set but s3.endpoint_url {self.endpoint_url!r} is plaintext http://: "
                "use https:// (the CA verifies the endpoint's certificate), or unset s3.ca_file"
            )
        return self

    def check_files(self, section: str = "object_store.s3") -> None:
        """Read and check ``ca_file`` (ConfigError naming it): called at start-up, so a service
        that could not verify the endpoint refuses to start."""
        if self.ca_file:
            load_pem_files(section, ca_file=self.ca_file, off="unset it to trust the default CA bundle")

    @model_validator(mode="after")
    def _credentials_pair(self) -> S3Config:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError(
                "set both s3.access_key_id and s3.secret_access_key, or neither (then botocore's "
                "default credential chain applies)"
            )
        return self


class ObjectStoreConfig(Frozen):
    #: "local" (a directory: the embedded default of danube-local) or "s3" (AWS, MinIO, moto).
    backend: Literal["local", "s3"] = "local"
    #: Root directory of the local backend (created if missing).
    local_dir: str = "data/objects"
    #: Prepended to every key (e.g. "cluster-a/"): empty, or '/'-separated segments ending in '/'.
    prefix: str = ""
    s3: S3Config = Field(default_factory=S3Config)

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if v == "":
            return v
        if not v.endswith("/"):
            raise ValueError(f"invalid prefix {v!r}: it must be empty or end with '/' (e.g. 'danube/')")
        try:
            validate_key(v[:-1])
        except InvalidObjectKey as exc:
            raise ValueError(f"invalid prefix {v!r}: {exc.message}") from None
        return v

    @model_validator(mode="after")
    def _backend_settings(self) -> ObjectStoreConfig:
        if self.backend == "s3" and not self.s3.bucket:
            raise ValueError("backend 's3' needs s3.bucket (the bucket holding Danube's objects)")
        if self.backend == "local" and not self.local_dir:
            raise ValueError("backend 'local' needs local_dir (a directory path)")
        return self
