"""The lookup service's configuration: defaults < YAML < ``DANUBE_LOOKUP_*`` env < flags."""

from __future__ import annotations

from pydantic import Field, field_validator

from danube_common.config import EtcdConfig, Frozen
from danube_common.errors import InvalidNamespaceName
from danube_common.topic_name import validate_namespace


def split_host_port(addr: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) -> (host, port); ValueError with what is allowed."""
    host, sep, port_s = addr.rpartition(":")
    if not sep or not host or not port_s.isdigit() or not 0 <= int(port_s) <= 65535:
        raise ValueError(f"{addr!r} is not HOST:PORT (port 0-65535; 0 picks a free port)")
    return host.removeprefix("[").removesuffix("]"), int(port_s)


class LookupConfig(Frozen):
    #: Client-facing address (danube.Discovery), Danube's ``service_url``.
    listen_addr: str = "0.0.0.0:6650"
    #: Admin API address (danube.admin.v1: BrokerAdmin, NamespaceAdmin, TopicAdmin).
    admin_listen_addr: str = "0.0.0.0:50051"
    #: Host written to the ready file (the listen host may be 0.0.0.0).
    advertised_host: str = "127.0.0.1"
    etcd: EtcdConfig = Field(default_factory=EtcdConfig)
    #: Namespaces created (if missing) at every start.
    bootstrap_namespaces: list[str] = Field(default_factory=lambda: ["default"])
    #: TopicLookup of an unknown topic in an existing namespace places it (Danube's behaviour).
    auto_create_topics: bool = True
    #: Seconds in-flight RPCs get to finish at shutdown before they are cancelled.
    shutdown_grace_s: float = 5.0
    #: Once serving, a JSON file with the bound addresses is written here (atomically).
    ready_file: str | None = None
    log_level: str = "INFO"

    @field_validator("listen_addr", "admin_listen_addr")
    @classmethod
    def _addr(cls, v: str) -> str:
        split_host_port(v)
        return v

    @field_validator("bootstrap_namespaces")
    @classmethod
    def _namespaces(cls, v: list[str]) -> list[str]:
        for ns in v:
            try:
                validate_namespace(ns)
            except InvalidNamespaceName as exc:
                raise ValueError(exc.message) from exc
        return v

    @field_validator("log_level")
    @classmethod
    def _level(cls, v: str) -> str:
        level = v.upper()
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError(f"unknown log level {v!r}: use DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return level
