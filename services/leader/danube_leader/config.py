"""The leader service's configuration: defaults < YAML < ``DANUBE_LEADER_*`` env < flags."""

from __future__ import annotations

from pydantic import field_validator, model_validator

from danube_common.service import ServiceConfig, split_host_port


class LeaderConfig(ServiceConfig):
    #: gRPC address of danube.leader.v1.LeaderElection. Port 0 picks a free port.
    listen_addr: str = "0.0.0.0:6680"
    #: Host written to the ready file (the listen host may be 0.0.0.0).
    advertised_host: str = "127.0.0.1"
    #: Lease TTL of a campaign that asks for ttl_s = 0, in seconds.
    default_ttl_s: int = 10
    #: Smallest and largest ttl_s a campaign may ask for (others are refused). etcd raises a
    #: TTL below its own minimum (about 1.5x its election timeout) to that minimum.
    min_ttl_s: int = 2
    max_ttl_s: int = 300
    #: A campaign stream with nothing else to say sends a HEARTBEAT this often (seconds),
    #: so clients notice a dead replica within their heartbeat deadline.
    heartbeat_interval_s: float = 1.0
    #: At shutdown: seconds campaigns get to send LOST and revoke their leases, and then
    #: in-flight RPCs get to finish, before they are cancelled.
    shutdown_grace_s: float = 5.0
    #: The server pings every client connection this often (seconds) and drops it when no
    #: answer comes within keepalive_timeout_s: the campaigns of a frozen or unreachable
    #: candidate then end and their leases are revoked (a TCP connection can stay half-open
    #: for many minutes otherwise, and the campaign's lease would be kept alive meanwhile).
    keepalive_time_s: float = 10.0
    keepalive_timeout_s: float = 5.0
    #: Campaign and WatchLeader streams one replica carries at most (more: RESOURCE_EXHAUSTED).
    max_streams: int = 10_000
    #: Largest campaign metadata (keys + values, UTF-8 bytes).
    max_metadata_bytes: int = 4096

    @field_validator("listen_addr")
    @classmethod
    def _addr(cls, v: str) -> str:
        split_host_port(v)
        return v

    @field_validator("heartbeat_interval_s", "keepalive_time_s", "keepalive_timeout_s")
    @classmethod
    def _positive(cls, v: float) -> float:
        if v <= 0:
            raise ValueError(f"must be > 0 seconds, got {v}")
        return v

    @field_validator("shutdown_grace_s")
    @classmethod
    def _not_negative(cls, v: float) -> float:
        if v < 0:
            raise ValueError(f"must be >= 0 seconds, got {v}")
        return v

    @field_validator("max_streams", "max_metadata_bytes")
    @classmethod
    def _count(cls, v: int) -> int:
        if v < 1:
            raise ValueError(f"must be >= 1, got {v}")
        return v

    @model_validator(mode="after")
    def _ttl_bounds(self) -> LeaderConfig:
        if not 1 <= self.min_ttl_s <= self.default_ttl_s <= self.max_ttl_s:
            raise ValueError(
                "lease TTLs must satisfy 1 <= min_ttl_s <= default_ttl_s <= max_ttl_s, got "
                f"{self.min_ttl_s}, {self.default_ttl_s}, {self.max_ttl_s}"
            )
        return self
