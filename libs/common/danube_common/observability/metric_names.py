"""Every Prometheus metric of every service: the one place a metric name is spelled.

Names follow Danube's where Danube has one (``danube_topic_messages_in_total``, ...) and
Prometheus's conventions otherwise: base units (seconds, bytes), ``_total`` on counters (the
:class:`MetricDef` name of a counter leaves it out: the client library adds it). Labels are
bounded: ``topic`` and ``subscription`` by ``metrics.max_topics`` (the rest sum under
``topic="_other"``), ``role`` by the roles campaigned for (the leader service: also by
``metrics.max_topics``), the others by the fixed values their help text names.

docs/observability.md lists them all; a unit test checks it against :data:`ALL`.
"""

from __future__ import annotations

from danube_common.observability.metrics import MetricDef

T = ("topic",)
TS = ("topic", "subscription")
ROLE = ("role",)

# ---------------------------------------------------------------- broker: topics
TOPICS_OWNED = MetricDef("danube_broker_topics_owned", "gauge", "Topics this broker serves (loaded).")
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
TOPIC_MESSAGES_DROPPED = MetricDef(
    "danube_topic_messages_dropped",
    "counter",
    "Non-reliable messages not delivered to a subscription (no consumer, or a full queue), per topic.",
    T,
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
MUX_STREAMS = MetricDef(
    "danube_broker_mux_streams",
    "gauge",
    "Multiplexed client streams open now: kind publish (PublishMux) or consume (ConsumeMux); "
    "a client keeps at most one of each per broker.",
    ("kind",),
)
PUBLISH_BATCHES = MetricDef(
    "danube_producer_send", "counter", "Batches (or single messages) published and acknowledged."
)

# ---------------------------------------------------------------- broker: subscriptions
SUBSCRIPTION_BACKLOG = MetricDef(
    "danube_subscription_lag_messages",
    "gauge",
    "Messages published and not acknowledged (reliable) or queued for delivery (non-reliable), "
    "per subscription.",
    TS,
)
SUBSCRIPTION_ACTIVE_CONSUMERS = MetricDef(
    "danube_subscription_active_consumers", "gauge", "Connected consumers, per subscription.", TS
)
SUBSCRIPTION_PENDING_REDELIVERIES = MetricDef(
    "danube_subscription_pending_redelivery",
    "gauge",
    "Messages of a reliable subscription waiting for another delivery (nacked, timed out, or held "
    "by the poison policy), per subscription.",
    TS,
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
SUBSCRIPTION_DROPPED = MetricDef(
    "danube_subscription_dropped",
    "counter",
    "Messages given up without delivery (poison policy drop; non-reliable: no consumer or a full "
    "queue), per subscription.",
    TS,
)
SUBSCRIPTION_BLOCKED = MetricDef(
    "danube_subscription_terminal_blocked",
    "gauge",
    "1 while a reliable subscription is stopped at a poison message (policy block), else 0.",
    TS,
)

# ---------------------------------------------------------------- broker: WAL
WAL_APPENDS = MetricDef("danube_wal_append", "counter", "Messages appended to write-ahead logs (committed).")
WAL_APPEND_BYTES = MetricDef(
    "danube_wal_append_bytes", "counter", "Frame bytes appended to write-ahead logs (committed)."
)
WAL_FSYNC_LATENCY = MetricDef(
    "danube_wal_flush_latency_seconds",
    "histogram",
    "Duration of one group commit's fsync (topics with durability fsync or cloud).",
)
WAL_ROUND_LOGS = MetricDef(
    "danube_wal_commit_round_topics",
    "histogram",
    "Topics whose commits shared one round of the broker's WAL commit scheduler (one thread hop).",
)
WAL_ROUND_LATENCY = MetricDef(
    "danube_wal_commit_round_seconds",
    "histogram",
    "Duration of one round of the broker's WAL commit scheduler (writes + fsyncs of every topic in it).",
)
WAL_COMMIT_FAILURES = MetricDef(
    "danube_wal_flush_errors", "counter", "Group commits that failed (disk full, I/O error)."
)
WAL_SEGMENT_ROTATIONS = MetricDef(
    "danube_wal_file_rotate", "counter", "WAL segments sealed and a new one started."
)
WAL_IDLE_FILES_CLOSED = MetricDef(
    "danube_wal_idle_files_closed",
    "counter",
    "Active WAL segment files closed because their topic was idle (wal.idle_fd_close_s, or over "
    "wal.max_open_segment_files); the next write reopens the file.",
)
RETENTION_OBJECTS_DELETED = MetricDef(
    "danube_retention_deleted_segments",
    "counter",
    "Uploaded segments of reliable topics that retention deleted from object storage (topics with a "
    "retention limit; descriptor and object).",
)
RETENTION_OBJECT_BYTES_DELETED = MetricDef(
    "danube_retention_deleted_bytes",
    "counter",
    "Bytes of the uploaded segments retention deleted from object storage.",
)
COMPACTIONS = MetricDef(
    "danube_compactions",
    "counter",
    "Compactions of reliable topics run on this broker (asked, or by the compaction_threshold_bytes "
    "policy), by outcome: ok or failed.",
    ("outcome",),
)
COMPACTION_LATENCY = MetricDef(
    "danube_compaction_duration_seconds",
    "histogram",
    "Duration of one successful compaction: reading the messages since the previous horizon, "
    "computing the view and storing it (disk, object storage, etcd).",
)
WAL_DISK_BYTES = MetricDef(
    "danube_wal_disk_bytes", "gauge", "Bytes of write-ahead log on this broker's disk (topics loaded here)."
)

# ---------------------------------------------------------------- broker: fixed costs
ASYNCIO_TASKS = MetricDef(
    "danube_broker_asyncio_tasks",
    "gauge",
    "Tasks alive on the broker's event loop (per topic and per subscription costs show here).",
)
ETCD_WATCHES = MetricDef(
    "danube_broker_etcd_watches", "gauge", "etcd watches this broker holds open (broker-wide, not per topic)."
)

# ---------------------------------------------------------------- broker: registration lease
LEASE_SURELY_ALIVE = MetricDef(
    "danube_broker_lease_surely_alive_seconds",
    "gauge",
    "How long the registration lease is still surely alive: the ack deadline minus now (0: past it, "
    "or lost: publishes wait for a renewal, then are refused with OWNERSHIP_UNCERTAIN).",
)
LEASE_RENEWAL_FAILURES = MetricDef(
    "danube_broker_lease_renewal_failures",
    "counter",
    "Renewals of the registration lease that failed or got no answer in time (each is retried "
    "within half a second).",
)

# ---------------------------------------------------------------- broker: ownership and moves
OWNERSHIP_ACQUIRED = MetricDef(
    "danube_broker_assignments",
    "counter",
    "Topics this broker started serving (placed here, re-placed, moved in, or loaded at start).",
)
TOPIC_MOVES = MetricDef(
    "danube_broker_topic_moves",
    "counter",
    "Topic moves this broker took part in: direction out (outcome handed_over, abandoned, lost, "
    "failed) or in (outcome handed_over).",
    ("direction", "outcome"),
)

# ---------------------------------------------------------------- broker: namespace policies
POLICY_MESSAGES = MetricDef(
    "danube_broker_policy_messages",
    "counter",
    "Messages acknowledged on subscriptions' behalf by a namespace policy: action expired (message "
    "TTL) or evicted (backlog quota, policy evict).",
    ("action",),
)
POLICY_WAITS = MetricDef(
    "danube_broker_policy_waits",
    "counter",
    "Publish batches held back by a namespace policy: reason rate (publish rate limit) or backlog "
    "(backlog quota, policy hold).",
    ("reason",),
)

# ---------------------------------------------------------------- WAL uploader
UPLOADS = MetricDef("danube_cloud_upload", "counter", "Segment objects uploaded to object storage.")
UPLOAD_ERRORS = MetricDef("danube_cloud_upload_errors", "counter", "Upload steps that failed (retried).")
UPLOAD_BYTES = MetricDef("danube_cloud_upload_bytes", "counter", "Bytes uploaded to object storage.")
UPLOAD_LAG_BYTES = MetricDef(
    "danube_cloud_upload_lag_bytes", "gauge", "WAL bytes on disk not uploaded yet, per topic.", T
)
UPLOAD_LAG_OFFSETS = MetricDef(
    "danube_cloud_upload_lag_messages",
    "gauge",
    "Messages in the local WAL not uploaded yet (local end minus the upload checkpoint), per topic.",
    T,
)
UPLOADER_OVERLAPS_REFUSED = MetricDef(
    "danube_wal_uploader_overlaps_refused",
    "counter",
    "Uploads refused because object storage already describes those offsets differently.",
)
UPLOADER_FINAL_STATES = MetricDef(
    "danube_wal_uploader_final_states",
    "counter",
    "Log ends recorded by the uploader after its broker died.",
)
UPLOADER_BROKER_ALIVE = MetricDef(
    "danube_wal_uploader_broker_alive", "gauge", "1 while the uploader's broker is registered, else 0."
)
UPLOADER_TOPICS = MetricDef(
    "danube_wal_uploader_topics", "gauge", "Topics with a WAL in the broker's data directory."
)

# ---------------------------------------------------------------- leader service
LEADER_CAMPAIGNS = MetricDef(
    "danube_leader_campaigns", "gauge", "Campaigns this leader-service replica carries, per role.", ROLE
)
LEADER_CAMPAIGNS_ELECTED = MetricDef(
    "danube_leader_campaigns_elected",
    "gauge",
    "Campaigns this replica carries that hold their role now, per role.",
    ROLE,
)
LEADER_WATCHES = MetricDef(
    "danube_leader_watches", "gauge", "Leader watches this replica serves, per role.", ROLE
)

# ---------------------------------------------------------------- elected services (load manager, planner)
LEADER_ELECTION_STATE = MetricDef(
    "danube_leader_election_state",
    "gauge",
    "1 while this process holds the role, else 0; per role (load-manager, spark-planner).",
    ROLE,
)
LEADER_TERM = MetricDef(
    "danube_leader_term",
    "gauge",
    "The term of this process's current or last leadership (0: never elected), per role.",
    ROLE,
)

# ---------------------------------------------------------------- load manager
LM_PASSES = MetricDef("danube_load_manager_passes", "counter", "Planning passes run while leading.")
LM_ACTIONS = MetricDef(
    "danube_load_manager_actions",
    "counter",
    "Actions tried while leading, by kind (place, replace, move, drop_move_request, mark_drained) "
    "and result (applied; refused: the fenced transaction failed or etcd answered an error).",
    ("kind", "result"),
)
REBALANCING_MOVES = MetricDef(
    "danube_rebalancing_moves",
    "counter",
    "Topic moves by outcome: started (any move the load manager began: admin, drain or plan), "
    "and for moves of rebalancing plans done, failed or skipped as the plan records them.",
    ("outcome",),
)
CLUSTER_BROKERS = MetricDef(
    "danube_cluster_brokers",
    "gauge",
    "Registered brokers, by effective state (active, draining, drained), as the load manager sees them.",
    ("state",),
)
CLUSTER_TOPICS = MetricDef(
    "danube_cluster_topics", "gauge", "Topics with an owner, as the load manager sees them."
)
CLUSTER_MOVES_IN_FLIGHT = MetricDef(
    "danube_cluster_moves_in_flight", "gauge", "Topics being moved now, as the load manager sees them."
)

# ---------------------------------------------------------------- planner
PLANNER_CYCLE_DURATION = MetricDef(
    "danube_rebalancing_cycle_duration_seconds", "histogram", "Duration of one planner cycle."
)
PLANNER_CYCLES = MetricDef(
    "danube_rebalancing_cycles",
    "counter",
    "Planner cycles by result (written; not_written: the term ended first; failed).",
    ("result",),
)
PLANNER_PLANS = MetricDef(
    "danube_rebalancing_plans", "counter", "Rebalancing plans written to etcd by this planner."
)
CLUSTER_IMBALANCE = MetricDef(
    "danube_cluster_imbalance_cv",
    "gauge",
    "Coefficient of variation of the brokers' load scores in the planner's last cycle.",
)
PLANNER_IMBALANCE_AFTER = MetricDef(
    "danube_rebalancing_imbalance_after_cv",
    "gauge",
    "The imbalance the planner's last cycle expects once its plan is carried out.",
)

# ---------------------------------------------------------------- lookup
LOOKUPS = MetricDef(
    "danube_lookup_topic_lookups",
    "counter",
    "Topic owner lookups answered, by how (cached: from the watched cluster view; resolved: read "
    "from etcd, placing or re-placing the topic when needed).",
    ("source",),
)
PLACEMENTS = MetricDef(
    "danube_lookup_placements",
    "counter",
    "Topics this lookup had placed: asked of the load manager (requested) or placed itself "
    "without one (placed).",
    ("how",),
)

# ---------------------------------------------------------------- security (every service with auth on)
AUTHZ_DENIED = MetricDef(
    "danube_authz_deny",
    "counter",
    "Calls refused by authentication or authorization (gRPC, and the HTTP endpoint's 401/403), by "
    "code (UNAUTHENTICATED, PERMISSION_DENIED).",
    ("code",),
)

GC_PAUSES = MetricDef(
    "danube_gc_pause_seconds",
    "histogram",
    "Garbage-collection pauses of the service's process, by generation (0 young, 2 full).",
    ("generation",),
)

#: Every metric above, in this module's order (the docs and the dashboard are checked against it).
ALL: tuple[MetricDef, ...] = tuple(v for v in list(globals().values()) if isinstance(v, MetricDef))

#: Who serves what, for docs/observability.md (scripts/gen_metrics_doc.py renders its tables; a
#: unit test checks every metric is in exactly one section).
SECTIONS: tuple[tuple[str, tuple[MetricDef, ...]], ...] = (
    (
        "Broker: topics and publishing",
        (
            TOPICS_OWNED,
            TOPIC_MESSAGES_IN,
            TOPIC_BYTES_IN,
            TOPIC_MESSAGES_OUT,
            TOPIC_BYTES_OUT,
            TOPIC_MESSAGES_DROPPED,
            TOPIC_ACTIVE_PRODUCERS,
            TOPIC_ACTIVE_CONSUMERS,
            TOPIC_ACTIVE_SUBSCRIPTIONS,
            PUBLISH_LATENCY,
            PUBLISH_BATCHES,
            MUX_STREAMS,
        ),
    ),
    (
        "Broker: subscriptions",
        (
            SUBSCRIPTION_BACKLOG,
            SUBSCRIPTION_ACTIVE_CONSUMERS,
            SUBSCRIPTION_PENDING_REDELIVERIES,
            SUBSCRIPTION_REDELIVERIES,
            SUBSCRIPTION_NACKS,
            SUBSCRIPTION_DEAD_LETTERED,
            SUBSCRIPTION_DROPPED,
            SUBSCRIPTION_BLOCKED,
        ),
    ),
    (
        "Broker: write-ahead log",
        (
            WAL_APPENDS,
            WAL_APPEND_BYTES,
            WAL_FSYNC_LATENCY,
            WAL_ROUND_LOGS,
            WAL_ROUND_LATENCY,
            WAL_COMMIT_FAILURES,
            WAL_SEGMENT_ROTATIONS,
            WAL_IDLE_FILES_CLOSED,
            WAL_DISK_BYTES,
            RETENTION_OBJECTS_DELETED,
            RETENTION_OBJECT_BYTES_DELETED,
            COMPACTIONS,
            COMPACTION_LATENCY,
        ),
    ),
    ("Broker: fixed costs", (ASYNCIO_TASKS, ETCD_WATCHES)),
    ("Broker: registration lease", (LEASE_SURELY_ALIVE, LEASE_RENEWAL_FAILURES)),
    ("Broker: ownership and moves", (OWNERSHIP_ACQUIRED, TOPIC_MOVES)),
    ("Broker: namespace policies", (POLICY_MESSAGES, POLICY_WAITS)),
    (
        "WAL uploader",
        (
            UPLOADS,
            UPLOAD_ERRORS,
            UPLOAD_BYTES,
            UPLOAD_LAG_BYTES,
            UPLOAD_LAG_OFFSETS,
            UPLOADER_OVERLAPS_REFUSED,
            UPLOADER_FINAL_STATES,
            UPLOADER_BROKER_ALIVE,
            UPLOADER_TOPICS,
        ),
    ),
    ("Leader service", (LEADER_CAMPAIGNS, LEADER_CAMPAIGNS_ELECTED, LEADER_WATCHES)),
    ("Load manager and planner: their role", (LEADER_ELECTION_STATE, LEADER_TERM)),
    (
        "Load manager",
        (LM_PASSES, LM_ACTIONS, REBALANCING_MOVES, CLUSTER_BROKERS, CLUSTER_TOPICS, CLUSTER_MOVES_IN_FLIGHT),
    ),
    (
        "Planner",
        (PLANNER_CYCLE_DURATION, PLANNER_CYCLES, PLANNER_PLANS, CLUSTER_IMBALANCE, PLANNER_IMBALANCE_AFTER),
    ),
    ("Lookup", (LOOKUPS, PLACEMENTS)),
    ("Every service with auth on", (AUTHZ_DENIED,)),
    ("Every service", (GC_PAUSES,)),
)
