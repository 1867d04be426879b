"""The WAL uploader's configuration: defaults < YAML < ``DANUBE_WAL_UPLOADER_*`` env < flags."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator, model_validator

from danube_common.objstore import ObjectStoreConfig
from danube_common.service import ServiceConfig, check_id, split_host_port


class WalUploaderConfig(ServiceConfig):
    #: The broker whose data directory this uploader serves (the broker's own ``broker_id``).
    #: Required: ``load`` refuses to start without it.
    broker_id: str = ""
    #: The broker's data directory (``<data_dir>/<ns>/<topic>/*.wal``). Unset: the broker's own
    #: default, ``./data/broker-<broker_id>``.
    data_dir: str | None = None
    #: gRPC API (danube.uploader.v1.WalUploader: Flush, Status); port 0 picks a free port.
    listen_addr: str = "0.0.0.0:6700"
    #: Host written to the ready file and the registration (the listen host may be 0.0.0.0).
    advertised_host: str = "127.0.0.1"
    #: Where the segments go (local directory or S3); see docs/object-store.md.
    object_store: ObjectStoreConfig = Field(default_factory=ObjectStoreConfig)
    #: Every topic directory is looked at this often (a Flush call does not wait for it).
    scan_interval_s: float = Field(default=1.0, gt=0)
    #: Objects being built and uploaded at once (across topics; one topic uploads in order).
    #: Memory use is about this times the broker's segment size.
    max_concurrent_uploads: int = Field(default=2, ge=1, le=64)
    #: After a failed step (object store or etcd fault), a topic is retried after a capped
    #: exponential backoff with jitter: from this ...
    retry_initial_s: float = Field(default=0.5, gt=0)
    #: ... up to this.
    retry_max_s: float = Field(default=30.0, gt=0)
    #: A Flush call keeps retrying faults for at most this long (or the caller's deadline, when
    #: shorter), then fails with UNAVAILABLE naming the last error.
    flush_timeout_s: float = Field(default=30.0, gt=0)
    #: While the broker is dead, topics are looked at this often: a log record the broker still
    #: holds open gets its end recorded, and the tail up to there uploaded.
    final_state_poll_s: float = Field(default=0.5, gt=0)
    #: TTL of the lease holding ``/{cluster}/uploaders/{broker_id}`` (refreshed every TTL/4).
    registration_ttl_s: int = Field(default=10, ge=2)
    #: Progress and lag are logged at INFO this often while any topic has data not uploaded.
    status_log_interval_s: float = Field(default=30.0, gt=0)
    #: Seconds in-flight RPCs get at shutdown.
    shutdown_grace_s: float = Field(default=2.0, ge=0)

    @field_validator("broker_id")
    @classmethod
    def _broker_id(cls, v: str) -> str:
        return check_id(v, "broker id") if v else v

    @field_validator("listen_addr")
    @classmethod
    def _addr(cls, v: str) -> str:
        split_host_port(v)
        return v

    @model_validator(mode="after")
    def _retry(self) -> WalUploaderConfig:
        if self.retry_max_s < self.retry_initial_s:
            raise ValueError(
                f"retry_max_s ({self.retry_max_s}) must be at least retry_initial_s ({self.retry_initial_s})"
            )
        return self

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir) if self.data_dir else Path("data") / f"broker-{self.broker_id}"
