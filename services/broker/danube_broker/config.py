"""The broker's configuration: defaults < YAML < ``DANUBE_BROKER_*`` env < flags.

Every field names its unit. The model is frozen and validated once at start-up, so a bad
value stops the process with the field's path before anything connects anywhere.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from danube_broker.dispatch.reliable.policy import PoisonPolicy, SubscriptionPolicy
from danube_broker.wal import Durability, WalConfig
from danube_common.grpc_util import MAX_GRPC_MESSAGE_BYTES
from danube_common.objstore import ObjectStoreConfig
from danube_common.security.tls import TlsConfig
from danube_common.service import ServiceConfig, check_id, split_host_port

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
    #: The internal listener: a second gRPC server, for the cluster's own services (the lookup's
    #: topic stats, dead letters published by other brokers). It serves the same API, with the
    #: same auth, but with TLS on it always requires client certificates (mTLS: the caller's
    #: certificate is its identity), whatever ``tls.require_client_cert`` says for the client
    #: port. Its address is registered (BrokerRecord ``internal_addr``) and the services dial it
    #: instead of the client address. Port 0 picks a free port. Unset: no internal listener;
    #: services call the client port (with auth on, that needs ``tls.require_client_cert``).
    internal_listen_addr: str | None = None
    #: Host the services are told to dial for the internal listener. Unset: as for
    #: ``advertised_host`` (which it falls back to), from ``internal_listen_addr``'s host.
    internal_advertised_host: str | None = None

    # ---- cluster membership
    #: TTL of the lease holding /{cluster}/brokers/{id}; a dead broker's topics move after this.
    registration_ttl_s: int = 10
    #: Renew the registration lease from a thread of its own (its own event loop and etcd
    #: connection), so a saturated or blocked event loop cannot let the ack deadline pass. False:
    #: renew from the broker's event loop (as before; for comparisons).
    registration_renewal_thread: bool = True
    #: Claim unowned topics (and create topic metadata) when a producer or consumer arrives.
    auto_create_topics: bool = True
    #: How often the load report (/{cluster}/load/{id}: CPU, memory, per-topic rates) is written.
    load_report_interval_s: float = Field(default=5.0, gt=0)
    #: Most topics listed in one load report (the busiest first; totals always cover every topic).
    load_report_max_topics: int = Field(default=2000, ge=0)
    #: Idle topics reuse their row until they carry a message, get an ack or a nack, or a producer
    #: or consumer comes or goes; every topic is read in full at least this often (what changes
    #: otherwise: a backlog cut by retention or moved by a seek).
    load_report_full_refresh_s: float = Field(default=300.0, gt=0)
    #: With object storage: load reports are appended to the load history (for the Spark planner)
    #: in one object per this many seconds (0: no load history).
    load_history_flush_interval_s: float = Field(default=60.0, ge=0)
    #: A topic move hands ownership over within this; past it the move is abandoned (the topic
    #: stays here) and the load manager may try again.
    move_timeout_s: float = Field(default=30.0, gt=0)

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

    # ---- reliable topics (write-ahead log, at-least-once subscriptions)
    #: Where reliable topics keep their logs: ``<data_dir>/<namespace>/<topic>/``.
    #: Unset: ``./data/broker-<broker_id>``.
    data_dir: str | None = None
    #: A reliable topic's durability when its metadata does not say: "fsync" (ack after the
    #: group commit is fsync'ed), "none" (ack after the OS has it) or "cloud" (ack once the batch
    #: is in object storage: needs ``uploader_addr``, else it behaves as "fsync").
    default_durability: Durability = Durability.FSYNC
    #: WAL settings shared by every reliable topic (segment size and age, tail cache, commits).
    wal: WalConfig = Field(default_factory=WalConfig)
    #: Delivered-but-unacked messages per consumer when its Subscribe does not say.
    max_unacked_messages_per_consumer: int = Field(default=1000, ge=1, le=100_000)
    #: Messages a subscription holds read-but-unacknowledged (delivered, awaiting redelivery, or
    #: buffered); reading the log pauses at this bound (back-pressure, never dropping).
    max_pending_messages_per_subscription: int = Field(default=10_000, ge=1)
    #: Delayed messages (shared/key-shared, not due yet) a subscription holds in memory; reading
    #: the log pauses at this bound until the earliest of them is due (not counted above).
    max_delayed_messages_per_subscription: int = Field(default=100_000, ge=1)
    #: Changed cursors are written to etcd in one batch at most this often.
    cursor_flush_interval_ms: int = Field(default=500, ge=1)
    #: Retention (time rule, deletions) is also re-checked at least this often.
    retention_check_interval_s: float = Field(default=30.0, gt=0)
    # Subscription failure policy defaults (an admin-set policy overrides them per subscription).
    #: Failed deliveries (nack, ack timeout) before the poison policy applies; 0 = unlimited.
    max_redeliveries: int = Field(default=0, ge=0)
    #: A delivered message not acked within this is redelivered; 0 = never.
    ack_timeout_ms: int = Field(default=30_000, ge=0)
    #: Redelivery delay after the n-th failure: base * 2^(n-1), capped at max.
    redelivery_backoff_base_ms: int = Field(default=1_000, ge=0)
    redelivery_backoff_max_ms: int = Field(default=60_000, ge=0)
    #: What happens after max_redeliveries: "block" (Danube's default) or "drop"; "dead_letter"
    #: needs a topic per subscription, so it is set per subscription (danube-admin), not here.
    poison_policy: PoisonPolicy = "block"
    # Topic retention defaults (a topic's own policies override them).
    #: Keep acknowledged messages this long (0: delete once every subscription acked them).
    retention_time_s: int = Field(default=0, ge=0)
    #: Keep up to this many bytes of acknowledged messages (0: no size rule).
    retention_size_bytes: int = Field(default=0, ge=0)
    #: Reliable topics without a ``compaction_threshold_bytes`` policy: compact a topic once this
    #: many bytes were published since its last compaction (0: only when asked).
    compaction_threshold_bytes: int = Field(default=0, ge=0)

    # ---- object storage (reliable topics' history beyond the local disk)
    #: Where the WAL uploader puts reliable topics' segments (the same settings as the uploader's).
    #: None: no object storage; history lives on the local disk only, as without an uploader.
    object_store: ObjectStoreConfig | None = None
    #: gRPC address (host:port) of this broker's WAL uploader (danube.uploader.v1.WalUploader).
    #: None: no uploader to call; "cloud" durability then behaves as "fsync", and topic moves
    #: drain instead of flushing.
    uploader_addr: str | None = None
    #: Deadline of every call to the uploader (Flush waits for uploads: keep it generous).
    uploader_rpc_timeout_s: float = Field(default=30.0, gt=0)
    #: Bytes of fetched object chunks kept in memory (one LRU for every topic of the broker).
    remote_read_cache_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    #: Size of one ranged read of a history object (and of one cache entry).
    remote_chunk_bytes: int = Field(default=1024 * 1024, ge=4096, le=256 * 1024 * 1024)
    #: "cloud" durability: a topic asks the uploader to flush at most this often (the waiting
    #: acks of the interval share one Flush).
    cloud_flush_interval_ms: int = Field(default=200, ge=1)

    # ---- ownership you can trust (see danube_common.log_state and services/broker/README.md)
    #: A reliable topic taken over from a broker that did not hand it over waits (clients get the
    #: retryable TAKEOVER_PENDING) until that broker's log end is recorded: by its WAL uploader, by
    #: itself when it restarts, or by `danube-admin topics force-takeover --accept-loss`. With this
    #: set (> 0), after waiting this long for a writer that is not registered, the new owner forces
    #: the takeover itself, recording the offsets it gives up. 0 (default): never; a topic's own
    #: ``unclean_takeover_after_s`` (set at creation) overrides it.
    unclean_takeover_after_s: float = Field(default=0.0, ge=0)
    #: How many offsets a reliable topic's writer reserves at a time (an etcd write per block;
    #: an unclean takeover starts after the last reserved offset, so none is ever reused).
    offset_reservation_block: int = Field(default=100_000, ge=1000)
    #: The broker acknowledges a publish only while its registration lease is surely alive: until
    #: the last renewal's send time + the TTL - this margin (monotonic clock). Past it, publishes
    #: wait (up to ack_renewal_wait_s) for a renewal, else fail with OWNERSHIP_UNCERTAIN.
    #: None: 20% of registration_ttl_s, at least 0.5 s.
    ack_deadline_margin_s: float | None = Field(default=None, gt=0)
    ack_renewal_wait_s: float = Field(default=1.0, ge=0)
    #: A producer or consumer attaching to a reliable topic that is still opening (recovering its
    #: log, or waiting for a previous owner's log end) waits up to this long, then gets a
    #: retryable error saying what the topic waits for (clients retry with backoff).
    topic_open_client_wait_s: float = Field(default=5.0, ge=0)

    # ---- process
    #: Lame duck: on a graceful stop (SIGTERM) with a load manager leading, the broker first says
    #: ``draining`` and keeps serving while the load manager hands each of its topics to another
    #: broker (a pause of a fraction of a second per topic, instead of a re-placement after the
    #: stop), for at most this long; then it stops as usual (what is left is released). 0: no lame
    #: duck.
    lame_duck_timeout_s: float = Field(default=10.0, ge=0)
    #: Seconds in-flight RPCs get to finish at shutdown before they are cancelled.
    shutdown_grace_s: float = Field(default=5.0, ge=0)

    @field_validator("poison_policy")
    @classmethod
    def _poison(cls, v: str) -> str:
        if v == "dead_letter":
            raise ValueError(
                "poison_policy dead_letter cannot be a broker default: it needs a dead_letter_topic per "
                "subscription; use block or drop here and set dead_letter per subscription with "
                "`danube-admin subscriptions set-policy TOPIC -s SUB --poison-policy dead_letter "
                "--dead-letter-topic T`"
            )
        return v

    @field_validator("broker_id")
    @classmethod
    def _broker_id(cls, v: str) -> str:
        return check_id(v, "broker id")

    @field_validator("listen_addr")
    @classmethod
    def _addr(cls, v: str) -> str:
        split_host_port(v)
        return v

    @field_validator("uploader_addr", "internal_listen_addr")
    @classmethod
    def _optional_addr(cls, v: str | None) -> str | None:
        if v is not None:
            split_host_port(v)
        return v

    @model_validator(mode="after")
    def _internal_listener(self) -> BrokerConfig:
        if self.internal_listen_addr is None:
            return self
        if self.tls.enabled and not self.tls.ca_file:
            raise ValueError(
                "internal_listen_addr with TLS requires client certificates, so it needs tls.ca_file "
                "(the CA that signs the cluster's service certificates)"
            )
        port = split_host_port(self.internal_listen_addr)[1]
        if port != 0 and port == split_host_port(self.listen_addr)[1]:
            raise ValueError(
                f"internal_listen_addr {self.internal_listen_addr} uses the port of listen_addr "
                f"{self.listen_addr}: give the internal listener a port of its own (or 0 for a free one)"
            )
        return self

    @field_validator("registration_ttl_s")
    @classmethod
    def _ttl(cls, v: int) -> int:
        if v < 2:
            raise ValueError(
                "registration_ttl_s must be at least 2 (the lease is refreshed several times per TTL)"
            )
        return v

    @field_validator("max_message_size_bytes")
    @classmethod
    def _max_size(cls, v: int) -> int:
        limit = MAX_GRPC_MESSAGE_BYTES - _FRAME_OVERHEAD_BYTES
        if v > limit:
            raise ValueError(f"max_message_size_bytes must be at most {limit} (gRPC frame limit), got {v}")
        return v

    # ---- derived values
    @property
    def ack_margin_s(self) -> float:
        """Safety margin of the ack deadline (see ``ack_deadline_margin_s``)."""
        if self.ack_deadline_margin_s is not None:
            return min(self.ack_deadline_margin_s, self.registration_ttl_s / 2)
        return min(max(0.5, 0.2 * self.registration_ttl_s), self.registration_ttl_s / 2)

    def advertised_addr(self, port: int) -> str:
        """``host:port`` clients connect to, once the real port is known."""
        return _advertise(split_host_port(self.listen_addr)[0], self.advertised_host, port)

    def internal_advertised_addr(self, port: int) -> str:
        """``host:port`` the services dial for the internal listener, once its port is known."""
        assert self.internal_listen_addr is not None
        host = split_host_port(self.internal_listen_addr)[0]
        return _advertise(host, self.internal_advertised_host or self.advertised_host, port)

    @property
    def internal_tls(self) -> TlsConfig:
        """The internal listener's TLS: the client port's, requiring client certificates."""
        if not self.tls.enabled:
            return self.tls
        return self.tls.model_copy(update={"require_client_cert": True})

    def internal_calls_warning(self) -> str | None:
        """Why the cluster's own services cannot prove who they are when they call this broker
        (their calls are then refused as UNAUTHENTICATED), or None when they can."""
        if not self.auth.enabled:
            return None
        if not self.tls.enabled:
            return (
                "auth is enabled but TLS is not: the cluster's services prove who they are only with "
                "client certificates, so their calls to this broker (the lookup's topic stats, dead "
                "letters from other brokers) will be refused; configure tls and internal_listen_addr"
            )
        if self.internal_listen_addr is None and not self.tls.require_client_cert:
            return (
                "auth is enabled, the client port does not require client certificates "
                "(tls.require_client_cert is false) and no internal_listen_addr is set: calls from the "
                "cluster's services to this broker (the lookup's topic stats, dead letters published by "
                "other brokers) carry no identity and will be refused as UNAUTHENTICATED; set "
                "internal_listen_addr (an mTLS listener for them)"
            )
        return None

    @property
    def slow_consumer_block_timeout_s(self) -> float:
        return self.slow_consumer_block_timeout_ms / 1000.0

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir) if self.data_dir else Path("data") / f"broker-{self.broker_id}"

    @property
    def cloud_flush_interval_s(self) -> float:
        return self.cloud_flush_interval_ms / 1000.0

    @property
    def cursor_flush_interval_s(self) -> float:
        return self.cursor_flush_interval_ms / 1000.0

    def default_subscription_policy(self) -> SubscriptionPolicy:
        """The failure policy of a subscription with none of its own."""
        return SubscriptionPolicy(
            max_redeliveries=self.max_redeliveries,
            ack_timeout_ms=self.ack_timeout_ms,
            redelivery_backoff_base_ms=self.redelivery_backoff_base_ms,
            redelivery_backoff_max_ms=self.redelivery_backoff_max_ms,
            poison_policy=self.poison_policy,
        )


def _advertise(listen_host: str, advertised_host: str | None, port: int) -> str:
    host = advertised_host or ("127.0.0.1" if listen_host in _LOCAL_HOSTS else listen_host)
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return f"{host}:{port}"
