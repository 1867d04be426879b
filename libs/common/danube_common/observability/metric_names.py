"""Every Prometheus metric of every service: the one place a metric name is spelled.

Names follow Danube's where Danube has one (``danube_topic_messages_in_total``, ...) and
Prometheus's conventions otherwise: base units (seconds, bytes), ``_total`` on counters (the
:class:`MetricDef` name of a counter leaves it out: the client library adds it). Labels are
bounded: ``topic`` and ``subscription`` by ``metrics.max_topics`` (the rest sum under
``topic="_other"``), ``role`` by the roles that exist, ``broker`` by the brokers of the cluster.
"""

from __future__ import annotations

from danube_common.observability.metrics import MetricDef

T = ("topic",)
TS = ("topic", "subscription")

# ---------------------------------------------------------------- broker: topics
TOPICS_OWNED = MetricDef("danube_broker_topics_owned", "gauge", "Topics this broker owns.")
TOPIC_MESSAGES_IN = MetricDef(
    "danube_topic_messages_in", "counter", "Messages accepted from producers, per topic.", T
)
TOPIC_BYTES_IN = MetricDef(
    "danube_topic_bytes_in", "counter", "Payload bytes accepted from producers, per topic.", T
)
TOPIC_MESSAGES_OUT = MetricDef(
    "danube_consumer_messages_out",
    "counter",
    "Messages handed to consumers (one count per subscription), per topic.",
    T,
)
TOPIC_BYTES_OUT = MetricDef(
    "danube_consumer_bytes_out", "counter", "Payload bytes handed to consumers, per topic.", T
)
TOPIC_ACTIVE_PRODUCERS = MetricDef(
    "danube_topic_active_producers", "gauge", "Producers attached, per topic.", T
)
TOPIC_ACTIVE_CONSUMERS = MetricDef(
    "danube_topic_active_consumers", "gauge", "Consumers attached, per topic.", T
)
TOPIC_ACTIVE_SUBSCRIPTIONS = MetricDef(
    "danube_topic_active_subscriptions", "gauge", "Subscriptions, per topic.", T
)
PUBLISH_LATENCY = MetricDef(
    "danube_producer_send_latency_seconds",
    "histogram",
    "Time from a batch's arrival at the broker to its acknowledgement (durable for reliable "
    "topics), per batch.",
)
PUBLISH_BATCH_MESSAGES = MetricDef(
    "danube_producer_send_total", "counter", "Batches (or single messages) published."
)

# ---------------------------------------------------------------- broker: subscriptions
SUBSCRIPTION_BACKLOG = MetricDef(
    "danube_subscription_lag_messages",
    "gauge",
    "Messages published and not acknowledged (reliable) or queued for delivery (non-reliable).",
    TS,
)
SUBSCRIPTION_ACTIVE_CONSUMERS = MetricDef(
    "danube_subscription_active_consumers", "gauge", "Connected consumers, per subscription.", TS
)
SUBSCRIPTION_REDELIVERIES = MetricDef(
    "danube_subscription_redelivery", "counter", "Messages delivered again, per subscription.", TS
)
SUBSCRIPTION_NACKS = MetricDef(
    "danube_subscription_nack", "counter", "Negative acknowledgements, per subscription.", TS
)
SUBSCRIPTION_DEAD_LETTERED = MetricDef(
    "danube_subscription_dlq", "counter", "Messages sent to the dead-letter topic, per subscription.", TS
)

# ---------------------------------------------------------------- broker: WAL
WAL_APPENDS = MetricDef("danube_wal_append", "counter", "Messages appended to write-ahead logs.")
WAL_APPEND_BYTES = MetricDef("danube_wal_append_bytes", "counter", "Bytes appended to write-ahead logs.")
WAL_FSYNC_LATENCY = MetricDef(
    "danube_wal_flush_latency_seconds", "histogram", "Duration of one group commit's fsync."
)
WAL_SEGMENT_ROTATIONS = MetricDef(
    "danube_wal_file_rotate", "counter", "WAL segments sealed and a new one started."
)

# ---------------------------------------------------------------- broker: ownership and moves
OWNERSHIP_ACQUIRED = MetricDef(
    "danube_broker_assignments", "counter", "Topics this broker took ownership of."
)
TOPIC_MOVES = MetricDef(
    "danube_broker_topic_moves",
    "counter",
    "Topic moves this broker took part in, by direction (out, in) and outcome.",
    ("direction", "outcome"),
)

# ---------------------------------------------------------------- WAL uploader
UPLOADS = MetricDef("danube_cloud_upload", "counter", "Objects uploaded to object storage.")
UPLOAD_ERRORS = MetricDef("danube_cloud_upload_errors", "counter", "Uploads that failed.")
UPLOAD_BYTES = MetricDef("danube_cloud_upload_bytes", "counter", "Bytes uploaded to object storage.")
UPLOAD_LAG_BYTES = MetricDef(
    "danube_cloud_upload_lag_bytes", "gauge", "WAL bytes on disk not uploaded yet, per topic.", T
)

# ---------------------------------------------------------------- control plane
LEADER_ELECTION_STATE = MetricDef(
    "danube_leader_election_state",
    "gauge",
    "1 while this process holds the role, else 0; per role.",
    ("role",),
)
LEADER_TERM = MetricDef("danube_leader_term", "gauge", "The current leadership term, per role.", ("role",))
PLANNER_CYCLE_DURATION = MetricDef(
    "danube_rebalancing_cycle_duration_seconds", "histogram", "Duration of one planner cycle."
)
CLUSTER_IMBALANCE = MetricDef(
    "danube_cluster_imbalance_cv",
    "gauge",
    "Coefficient of variation of the brokers' load scores in the last load report.",
)
REBALANCING_MOVES = MetricDef(
    "danube_rebalancing_moves", "counter", "Topic moves carried out, by outcome.", ("outcome",)
)

# ---------------------------------------------------------------- security
AUTHZ_DENIED = MetricDef(
    "danube_authz_deny",
    "counter",
    "Calls refused by authentication or authorization, by gRPC status (UNAUTHENTICATED, PERMISSION_DENIED).",
    ("code",),
)
