"""The load manager's configuration: defaults < YAML < ``DANUBE_LOAD_MANAGER_*`` env < flags."""

from __future__ import annotations

import secrets

from pydantic import Field, field_validator

from danube_common.load_score import ScoreWeights
from danube_common.service import ServiceConfig, check_id, check_leader_endpoints, split_host_port


class LoadManagerConfig(ServiceConfig):
    #: This replica's name in the election (letters, digits, '_', '-', '.'); random if unset.
    candidate_id: str = Field(default_factory=lambda: f"lm-{secrets.token_hex(3)}")
    #: Addresses of the leader service replicas (danube-leader), tried in turn.
    leader_endpoints: list[str] = Field(default_factory=lambda: ["127.0.0.1:6680"])
    #: Lease TTL of our candidacy: a dead active load manager is replaced after about this long.
    leadership_ttl_s: int = Field(default=5, ge=2)
    #: A campaign stream with no event (heartbeats included) for this long counts as broken:
    #: we stop acting at once and campaign again (keep it above the leader's heartbeat interval).
    leader_heartbeat_deadline_s: float = Field(default=3.0, gt=0)
    #: Deadline of each call to the leader service.
    leader_rpc_timeout_s: float = Field(default=5.0, gt=0)
    #: Status API (danube.loadmanager.v1.LoadManagerStatus); port 0 picks a free port.
    listen_addr: str = "0.0.0.0:6690"
    #: Host written to the ready file (the listen host may be 0.0.0.0).
    advertised_host: str = "127.0.0.1"
    #: A full planning pass runs at least this often, even when nothing changed.
    reconcile_interval_s: float = Field(default=2.0, gt=0)
    #: Topics mid-move at once (drain and requested moves share the budget).
    max_moves_in_flight: int = Field(default=4, ge=1)
    #: A topic is not moved again sooner than this after its last move started.
    move_cooldown_s: float = Field(default=10.0, ge=0)
    weights: ScoreWeights = Field(default_factory=ScoreWeights)
    #: Seconds in-flight status RPCs get at shutdown.
    shutdown_grace_s: float = Field(default=2.0, ge=0)

    @field_validator("candidate_id")
    @classmethod
    def _candidate(cls, v: str) -> str:
        return check_id(v, "candidate id")

    @field_validator("listen_addr")
    @classmethod
    def _addr(cls, v: str) -> str:
        split_host_port(v)
        return v

    @field_validator("leader_endpoints")
    @classmethod
    def _endpoints(cls, v: list[str]) -> list[str]:
        return check_leader_endpoints(v)
