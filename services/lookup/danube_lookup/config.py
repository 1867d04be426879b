"""The lookup service's configuration: defaults < YAML < ``DANUBE_LOOKUP_*`` env < flags."""

from __future__ import annotations

from pydantic import Field, field_validator

from danube_common.config import Frozen
from danube_common.service import ServiceConfig, split_host_port


class ConsoleConfig(Frozen):
    """The web console on the HTTP endpoint (``http_listen_addr``)."""

    #: Serve the console (``/`` and its JSON API under ``/api/``) next to ``/metrics``. false:
    #: ``/metrics`` and ``/healthz`` only.
    enabled: bool = True
    #: Deadline of each admin API call the console makes for a browser (GetTopicStats goes on
    #: to the topic's broker within ``broker_rpc_timeout_s``, so keep this above it).
    rpc_timeout_s: float = 10.0

    @field_validator("rpc_timeout_s")
    @classmethod
    def _positive(cls, v: float) -> float:
        if v <= 0:
            raise ValueError(f"must be > 0 seconds, got {v}")
        return v


class LookupConfig(ServiceConfig):
    #: Client-facing address (danube.Discovery), Danube's ``service_url``.
    listen_addr: str = "0.0.0.0:6650"
    #: Admin API address (danube.admin.v1: BrokerAdmin, NamespaceAdmin, TopicAdmin).
    admin_listen_addr: str = "0.0.0.0:50051"
    #: Host written to the ready file (the listen host may be 0.0.0.0).
    advertised_host: str = "127.0.0.1"
    #: TopicLookup of an unknown topic in an existing namespace places it (Danube's behaviour).
    auto_create_topics: bool = True
    #: Seconds in-flight RPCs get to finish at shutdown before they are cancelled.
    shutdown_grace_s: float = 5.0
    #: Deadline of the calls the lookup makes to brokers (admin GetTopicStats is forwarded to
    #: the topic's owner).
    broker_rpc_timeout_s: float = 5.0
    #: Deadline of a compaction the lookup forwards to the topic's owner (admin CompactTopic):
    #: the broker reads the log from the previous horizon on, so a large topic takes a while.
    compaction_rpc_timeout_s: float = 300.0
    #: The web console, served on the HTTP endpoint when ``http_listen_addr`` is set.
    console: ConsoleConfig = Field(default_factory=ConsoleConfig)

    @field_validator("listen_addr", "admin_listen_addr")
    @classmethod
    def _addr(cls, v: str) -> str:
        split_host_port(v)
        return v

    @field_validator("broker_rpc_timeout_s", "compaction_rpc_timeout_s")
    @classmethod
    def _positive(cls, v: float) -> float:
        if v <= 0:
            raise ValueError(f"must be > 0 seconds, got {v}")
        return v
