"""The broker's configuration: defaults < YAML < ``DANUBE_BROKER_*`` env < flags.

Every field names its unit. The model is frozen and validated once at start-up, so a bad
value stops the process with the field's path before anything connects anywhere.
"""

from __future__ import annotations

import re
import secrets
from typing import Literal

from pydantic import Field, field_validator

from danube_common.grpc_util import MAX_GRPC_MESSAGE_BYTES
from danube_common.service import ServiceConfig, split_host_port

_BROKER_ID = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
#: Room left in a gRPC frame for everything that is not payload.
_FRAME_OVERHEAD_BYTES = 1024 * 1024
#: Hosts that mean "this machine" and are advertised as loopback.
_LOCAL_HOSTS = ("0.0.0.0", "::", "127.0.0.1", "localhost", "")


def new_broker_id() -> str:
    """A short random id, used when none is configured."""
    return secrets.token_hex(4)


SlowConsumerPolicy = Literal["drop", "block"]


class BrokerConfig(ServiceConfig):
    # ---- identity and addresses
    #: Unique id of this broker in the cluster (letters, digits, '_', '-', '.'); random if unset.
    broker_id: str = Field(default_factory=new_broker_id)
    #: Address the gRPC server binds; port 0 picks a free port.
    listen_addr: str = "0.0.0.0:6651"
    #: Host clients are told to connect to (lookups, msg_id.broker_addr, the ready file).
    #: Unset: the listen host, or 127.0.0.1 when listening on a wildcard or loopback address.
    advertised_host: str | None = None

    # ---- cluster membership
    #: TTL of the lease holding /{cluster}/brokers/{id}; a dead broker's topics move after this.
    registration_ttl_s: int = 10
    #: Claim unowned topics (and create topic metadata) when a producer or consumer arrives.
    auto_create_topics: bool = True

    # ---- limits and timers
    #: Largest payload accepted; larger messages are refused with MESSAGE_TOO_LARGE.
    max_message_size_bytes: int = Field(default=5 * 1024 * 1024, ge=1)
    #: A producer with no send, no health check and no open PublishBatches stream for this long
    #: is detached (frees the exclusive slot of a dead client).
    producer_idle_timeout_s: float = Field(default=30.0, gt=0)
    #: Messages each consumer may have queued for delivery.
    consumer_queue_messages: int = Field(default=1000, ge=1)
    #: What a publish does when a consumer's queue is full: "drop" the messages that do not fit
    #: (counted in stats), or "block" the publish up to slow_consumer_block_timeout_ms, then drop.
    slow_consumer_policy: SlowConsumerPolicy = "drop"
    slow_consumer_block_timeout_ms: int = Field(default=500, ge=0)
    #: A consumer with no open stream (and no health checks) for this long is removed.
    consumer_reconnect_grace_s: float = Field(default=10.0, gt=0)
    #: A subscription with no consumers for this long is removed.
    subscription_idle_timeout_s: float = Field(default=60.0, gt=0)
    #: Most messages in one ReceiveBatches frame (a client may ask for fewer).
    max_messages_per_frame: int = Field(default=500, ge=1)
    #: How often expiry timers (producers, consumers, subscriptions) are checked.
    sweep_interval_s: float = Field(default=1.0, gt=0)

    # ---- process
    #: Seconds in-flight RPCs get to finish at shutdown before they are cancelled.
    shutdown_grace_s: float = Field(default=5.0, ge=0)

    @field_validator("broker_id")
    @classmethod
    def _broker_id(cls, v: str) -> str:
        if not _BROKER_ID.match(v):
            raise ValueError(f"invalid broker id {v!r}: use 1-64 letters, digits, '_', '-' or '.'")
        return v

    @field_validator("listen_addr")
    @classmethod
    def _addr(cls, v: str) -> str:
        split_host_port(v)
        return v

    @field_validator("registration_ttl_s")
    @classmethod
    def _ttl(cls, v: int) -> int:
        if v < 2:
            raise ValueError("registration_ttl_s must be at least 2 (the lease is refreshed every TTL/3)")
        return v

    @field_validator("max_message_size_bytes")
    @classmethod
    def _max_size(cls, v: int) -> int:
        limit = MAX_GRPC_MESSAGE_BYTES - _FRAME_OVERHEAD_BYTES
        if v > limit:
            raise ValueError(f"max_message_size_bytes must be at most {limit} (gRPC frame limit), got {v}")
        return v

    # ---- derived values
    def advertised_addr(self, port: int) -> str:
        """``host:port`` clients connect to, once the real port is known."""
        host, _ = split_host_port(self.listen_addr)
        if self.advertised_host:
            host = self.advertised_host
        elif host in _LOCAL_HOSTS:
            host = "127.0.0.1"
        if ":" in host:  # IPv6 literal
            host = f"[{host}]"
        return f"{host}:{port}"

    @property
    def slow_consumer_block_timeout_s(self) -> float:
        return self.slow_consumer_block_timeout_ms / 1000.0
