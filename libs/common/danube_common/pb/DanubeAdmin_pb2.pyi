from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListBrokersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BrokerInfo(_message.Message):
    __slots__ = ("broker_id", "broker_addr", "advertised_url", "state", "topic_count", "registered_at_ms", "admin_state", "has_load", "load_at_ms", "cpu_usage", "cpu_cores", "mem_rss_bytes", "msg_rate_in", "msg_rate_out", "byte_rate_in", "byte_rate_out", "backlog", "producers", "consumers")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    ADVERTISED_URL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_COUNT_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    ADMIN_STATE_FIELD_NUMBER: _ClassVar[int]
    HAS_LOAD_FIELD_NUMBER: _ClassVar[int]
    LOAD_AT_MS_FIELD_NUMBER: _ClassVar[int]
    CPU_USAGE_FIELD_NUMBER: _ClassVar[int]
    CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    MEM_RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    MSG_RATE_IN_FIELD_NUMBER: _ClassVar[int]
    MSG_RATE_OUT_FIELD_NUMBER: _ClassVar[int]
    BYTE_RATE_IN_FIELD_NUMBER: _ClassVar[int]
    BYTE_RATE_OUT_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_FIELD_NUMBER: _ClassVar[int]
    PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    broker_id: str
    broker_addr: str
    advertised_url: str
    state: str
    topic_count: int
    registered_at_ms: int
    admin_state: str
    has_load: bool
    load_at_ms: int
    cpu_usage: float
    cpu_cores: int
    mem_rss_bytes: int
    msg_rate_in: float
    msg_rate_out: float
    byte_rate_in: float
    byte_rate_out: float
    backlog: int
    producers: int
    consumers: int
    def __init__(self, broker_id: _Optional[str] = ..., broker_addr: _Optional[str] = ..., advertised_url: _Optional[str] = ..., state: _Optional[str] = ..., topic_count: _Optional[int] = ..., registered_at_ms: _Optional[int] = ..., admin_state: _Optional[str] = ..., has_load: _Optional[bool] = ..., load_at_ms: _Optional[int] = ..., cpu_usage: _Optional[float] = ..., cpu_cores: _Optional[int] = ..., mem_rss_bytes: _Optional[int] = ..., msg_rate_in: _Optional[float] = ..., msg_rate_out: _Optional[float] = ..., byte_rate_in: _Optional[float] = ..., byte_rate_out: _Optional[float] = ..., backlog: _Optional[int] = ..., producers: _Optional[int] = ..., consumers: _Optional[int] = ...) -> None: ...

class SetBrokerStateRequest(_message.Message):
    __slots__ = ("broker_id", "state")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    broker_id: str
    state: str
    def __init__(self, broker_id: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...

class ListLeadersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class JsonDocument(_message.Message):
    __slots__ = ("key", "json")
    KEY_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    key: str
    json: str
    def __init__(self, key: _Optional[str] = ..., json: _Optional[str] = ...) -> None: ...

class GetLoadReportRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RequestRebalanceRequest(_message.Message):
    __slots__ = ("dry_run",)
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    dry_run: bool
    def __init__(self, dry_run: _Optional[bool] = ...) -> None: ...

class RequestRebalanceResponse(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class ListPlansRequest(_message.Message):
    __slots__ = ("limit",)
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    def __init__(self, limit: _Optional[int] = ...) -> None: ...

class ListPlansResponse(_message.Message):
    __slots__ = ("plans", "pending_requests")
    PLANS_FIELD_NUMBER: _ClassVar[int]
    PENDING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    plans: _containers.RepeatedCompositeFieldContainer[JsonDocument]
    pending_requests: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, plans: _Optional[_Iterable[_Union[JsonDocument, _Mapping]]] = ..., pending_requests: _Optional[_Iterable[str]] = ...) -> None: ...

class ApplyPlanRequest(_message.Message):
    __slots__ = ("plan_id",)
    PLAN_ID_FIELD_NUMBER: _ClassVar[int]
    plan_id: str
    def __init__(self, plan_id: _Optional[str] = ...) -> None: ...

class SetTopicPinnedRequest(_message.Message):
    __slots__ = ("name", "pinned")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    name: str
    pinned: bool
    def __init__(self, name: _Optional[str] = ..., pinned: _Optional[bool] = ...) -> None: ...

class SetTopicPinnedResponse(_message.Message):
    __slots__ = ("name", "pinned")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    name: str
    pinned: bool
    def __init__(self, name: _Optional[str] = ..., pinned: _Optional[bool] = ...) -> None: ...

class LeaderInfo(_message.Message):
    __slots__ = ("role", "candidate_id", "term", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    role: str
    candidate_id: str
    term: int
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, role: _Optional[str] = ..., candidate_id: _Optional[str] = ..., term: _Optional[int] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListLeadersResponse(_message.Message):
    __slots__ = ("leaders",)
    LEADERS_FIELD_NUMBER: _ClassVar[int]
    leaders: _containers.RepeatedCompositeFieldContainer[LeaderInfo]
    def __init__(self, leaders: _Optional[_Iterable[_Union[LeaderInfo, _Mapping]]] = ...) -> None: ...

class MoveTopicRequest(_message.Message):
    __slots__ = ("name", "to_broker")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TO_BROKER_FIELD_NUMBER: _ClassVar[int]
    name: str
    to_broker: str
    def __init__(self, name: _Optional[str] = ..., to_broker: _Optional[str] = ...) -> None: ...

class ForceTakeoverRequest(_message.Message):
    __slots__ = ("name", "accept_loss", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_LOSS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    accept_loss: bool
    reason: str
    def __init__(self, name: _Optional[str] = ..., accept_loss: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class ForceTakeoverResponse(_message.Message):
    __slots__ = ("name", "writer", "next_offset", "lost")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WRITER_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    name: str
    writer: str
    next_offset: int
    lost: _containers.RepeatedCompositeFieldContainer[AcceptedGap]
    def __init__(self, name: _Optional[str] = ..., writer: _Optional[str] = ..., next_offset: _Optional[int] = ..., lost: _Optional[_Iterable[_Union[AcceptedGap, _Mapping]]] = ...) -> None: ...

class MoveTopicResponse(_message.Message):
    __slots__ = ("name", "from_broker", "to_broker")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FROM_BROKER_FIELD_NUMBER: _ClassVar[int]
    TO_BROKER_FIELD_NUMBER: _ClassVar[int]
    name: str
    from_broker: str
    to_broker: str
    def __init__(self, name: _Optional[str] = ..., from_broker: _Optional[str] = ..., to_broker: _Optional[str] = ...) -> None: ...

class ListBrokersResponse(_message.Message):
    __slots__ = ("brokers",)
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerInfo]
    def __init__(self, brokers: _Optional[_Iterable[_Union[BrokerInfo, _Mapping]]] = ...) -> None: ...

class ListNamespacesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListNamespacesResponse(_message.Message):
    __slots__ = ("namespaces",)
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, namespaces: _Optional[_Iterable[str]] = ...) -> None: ...

class NamespaceRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class NamespaceResponse(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class NamespacePolicies(_message.Message):
    __slots__ = ("max_producers_per_topic", "max_consumers_per_topic", "max_subscriptions_per_topic", "max_topics", "max_message_size_bytes", "publish_rate_msgs_per_s", "publish_rate_bytes_per_s", "backlog_quota_messages", "backlog_quota_policy", "retention_time_s", "retention_size_bytes", "default_dispatch_strategy", "default_durability", "message_ttl_s", "dispatch_rate_msgs_per_s", "compaction_threshold_bytes")
    MAX_PRODUCERS_PER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    MAX_CONSUMERS_PER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    MAX_SUBSCRIPTIONS_PER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    MAX_TOPICS_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_RATE_MSGS_PER_S_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_RATE_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_QUOTA_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_QUOTA_POLICY_FIELD_NUMBER: _ClassVar[int]
    RETENTION_TIME_S_FIELD_NUMBER: _ClassVar[int]
    RETENTION_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_DISPATCH_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_DURABILITY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TTL_S_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_RATE_MSGS_PER_S_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_THRESHOLD_BYTES_FIELD_NUMBER: _ClassVar[int]
    max_producers_per_topic: int
    max_consumers_per_topic: int
    max_subscriptions_per_topic: int
    max_topics: int
    max_message_size_bytes: int
    publish_rate_msgs_per_s: float
    publish_rate_bytes_per_s: float
    backlog_quota_messages: int
    backlog_quota_policy: str
    retention_time_s: int
    retention_size_bytes: int
    default_dispatch_strategy: str
    default_durability: str
    message_ttl_s: int
    dispatch_rate_msgs_per_s: float
    compaction_threshold_bytes: int
    def __init__(self, max_producers_per_topic: _Optional[int] = ..., max_consumers_per_topic: _Optional[int] = ..., max_subscriptions_per_topic: _Optional[int] = ..., max_topics: _Optional[int] = ..., max_message_size_bytes: _Optional[int] = ..., publish_rate_msgs_per_s: _Optional[float] = ..., publish_rate_bytes_per_s: _Optional[float] = ..., backlog_quota_messages: _Optional[int] = ..., backlog_quota_policy: _Optional[str] = ..., retention_time_s: _Optional[int] = ..., retention_size_bytes: _Optional[int] = ..., default_dispatch_strategy: _Optional[str] = ..., default_durability: _Optional[str] = ..., message_ttl_s: _Optional[int] = ..., dispatch_rate_msgs_per_s: _Optional[float] = ..., compaction_threshold_bytes: _Optional[int] = ...) -> None: ...

class SetNamespacePoliciesRequest(_message.Message):
    __slots__ = ("name", "policies", "clear")
    NAME_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    CLEAR_FIELD_NUMBER: _ClassVar[int]
    name: str
    policies: NamespacePolicies
    clear: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., policies: _Optional[_Union[NamespacePolicies, _Mapping]] = ..., clear: _Optional[_Iterable[str]] = ...) -> None: ...

class NamespacePoliciesResponse(_message.Message):
    __slots__ = ("name", "policies")
    NAME_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    policies: NamespacePolicies
    def __init__(self, name: _Optional[str] = ..., policies: _Optional[_Union[NamespacePolicies, _Mapping]] = ...) -> None: ...

class SetTopicPoliciesRequest(_message.Message):
    __slots__ = ("name", "policies", "clear")
    NAME_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    CLEAR_FIELD_NUMBER: _ClassVar[int]
    name: str
    policies: NamespacePolicies
    clear: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., policies: _Optional[_Union[NamespacePolicies, _Mapping]] = ..., clear: _Optional[_Iterable[str]] = ...) -> None: ...

class TopicPoliciesResponse(_message.Message):
    __slots__ = ("name", "own", "effective")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWN_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_FIELD_NUMBER: _ClassVar[int]
    name: str
    own: NamespacePolicies
    effective: NamespacePolicies
    def __init__(self, name: _Optional[str] = ..., own: _Optional[_Union[NamespacePolicies, _Mapping]] = ..., effective: _Optional[_Union[NamespacePolicies, _Mapping]] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ("namespace",)
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    def __init__(self, namespace: _Optional[str] = ...) -> None: ...

class TopicInfo(_message.Message):
    __slots__ = ("name", "dispatch_strategy", "partitions", "broker_id", "partition_topics", "subscriptions", "created_at_ms", "durability", "retention_time_s", "retention_size_bytes", "compaction_threshold_bytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_TOPICS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    RETENTION_TIME_S_FIELD_NUMBER: _ClassVar[int]
    RETENTION_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_THRESHOLD_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    dispatch_strategy: str
    partitions: int
    broker_id: str
    partition_topics: _containers.RepeatedCompositeFieldContainer[TopicInfo]
    subscriptions: _containers.RepeatedScalarFieldContainer[str]
    created_at_ms: int
    durability: str
    retention_time_s: int
    retention_size_bytes: int
    compaction_threshold_bytes: int
    def __init__(self, name: _Optional[str] = ..., dispatch_strategy: _Optional[str] = ..., partitions: _Optional[int] = ..., broker_id: _Optional[str] = ..., partition_topics: _Optional[_Iterable[_Union[TopicInfo, _Mapping]]] = ..., subscriptions: _Optional[_Iterable[str]] = ..., created_at_ms: _Optional[int] = ..., durability: _Optional[str] = ..., retention_time_s: _Optional[int] = ..., retention_size_bytes: _Optional[int] = ..., compaction_threshold_bytes: _Optional[int] = ...) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicInfo]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicInfo, _Mapping]]] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("name", "partitions", "dispatch_strategy", "durability", "retention_time_s", "retention_size_bytes", "unclean_takeover_after_s")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    RETENTION_TIME_S_FIELD_NUMBER: _ClassVar[int]
    RETENTION_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    UNCLEAN_TAKEOVER_AFTER_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    dispatch_strategy: str
    durability: str
    retention_time_s: int
    retention_size_bytes: int
    unclean_takeover_after_s: int
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ..., dispatch_strategy: _Optional[str] = ..., durability: _Optional[str] = ..., retention_time_s: _Optional[int] = ..., retention_size_bytes: _Optional[int] = ..., unclean_takeover_after_s: _Optional[int] = ...) -> None: ...

class CreateTopicResponse(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: TopicInfo
    def __init__(self, topic: _Optional[_Union[TopicInfo, _Mapping]] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, deleted: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribeTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class TopicStatsRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class SubscriptionStats(_message.Message):
    __slots__ = ("name", "type", "consumers", "backlog", "cursor", "has_cursor", "unacked_in_flight", "delivered_total", "redelivered_total", "dead_lettered_total", "dropped_total", "msg_rate_out", "skipped_total", "read_error", "delayed")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    HAS_CURSOR_FIELD_NUMBER: _ClassVar[int]
    UNACKED_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    REDELIVERED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    DROPPED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MSG_RATE_OUT_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    READ_ERROR_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    consumers: int
    backlog: int
    cursor: int
    has_cursor: bool
    unacked_in_flight: int
    delivered_total: int
    redelivered_total: int
    dead_lettered_total: int
    dropped_total: int
    msg_rate_out: float
    skipped_total: int
    read_error: str
    delayed: int
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., consumers: _Optional[int] = ..., backlog: _Optional[int] = ..., cursor: _Optional[int] = ..., has_cursor: _Optional[bool] = ..., unacked_in_flight: _Optional[int] = ..., delivered_total: _Optional[int] = ..., redelivered_total: _Optional[int] = ..., dead_lettered_total: _Optional[int] = ..., dropped_total: _Optional[int] = ..., msg_rate_out: _Optional[float] = ..., skipped_total: _Optional[int] = ..., read_error: _Optional[str] = ..., delayed: _Optional[int] = ...) -> None: ...

class AcceptedGap(_message.Message):
    __slots__ = ("start_offset", "next_offset", "reason", "decided_by", "at_ms", "writer")
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    WRITER_FIELD_NUMBER: _ClassVar[int]
    start_offset: int
    next_offset: int
    reason: str
    decided_by: str
    at_ms: int
    writer: str
    def __init__(self, start_offset: _Optional[int] = ..., next_offset: _Optional[int] = ..., reason: _Optional[str] = ..., decided_by: _Optional[str] = ..., at_ms: _Optional[int] = ..., writer: _Optional[str] = ...) -> None: ...

class TopicStats(_message.Message):
    __slots__ = ("name", "broker_id", "dispatch_strategy", "durability", "first_offset", "next_offset", "wal_bytes", "wal_segments", "msgs_in_total", "bytes_in_total", "msg_rate_in", "bytes_rate_in", "producers", "subscriptions", "log_writer", "log_epoch", "log_start_offset", "reserved_to", "state", "accepted_gaps", "local_first_offset", "has_uploaded", "uploaded_first_offset", "uploaded_next_offset", "remote_reads", "remote_entries", "remote_gets", "remote_bytes_fetched", "remote_errors", "last_remote_error", "retention_deleted_segments", "retention_deleted_bytes", "has_compaction", "compaction")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    WAL_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    MSGS_IN_TOTAL_FIELD_NUMBER: _ClassVar[int]
    BYTES_IN_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MSG_RATE_IN_FIELD_NUMBER: _ClassVar[int]
    BYTES_RATE_IN_FIELD_NUMBER: _ClassVar[int]
    PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    LOG_WRITER_FIELD_NUMBER: _ClassVar[int]
    LOG_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RESERVED_TO_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_GAPS_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HAS_UPLOADED_FIELD_NUMBER: _ClassVar[int]
    UPLOADED_FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    UPLOADED_NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REMOTE_READS_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    REMOTE_GETS_FIELD_NUMBER: _ClassVar[int]
    REMOTE_BYTES_FETCHED_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ERRORS_FIELD_NUMBER: _ClassVar[int]
    LAST_REMOTE_ERROR_FIELD_NUMBER: _ClassVar[int]
    RETENTION_DELETED_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_DELETED_BYTES_FIELD_NUMBER: _ClassVar[int]
    HAS_COMPACTION_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    broker_id: str
    dispatch_strategy: str
    durability: str
    first_offset: int
    next_offset: int
    wal_bytes: int
    wal_segments: int
    msgs_in_total: int
    bytes_in_total: int
    msg_rate_in: float
    bytes_rate_in: float
    producers: int
    subscriptions: _containers.RepeatedCompositeFieldContainer[SubscriptionStats]
    log_writer: str
    log_epoch: int
    log_start_offset: int
    reserved_to: int
    state: str
    accepted_gaps: _containers.RepeatedCompositeFieldContainer[AcceptedGap]
    local_first_offset: int
    has_uploaded: bool
    uploaded_first_offset: int
    uploaded_next_offset: int
    remote_reads: int
    remote_entries: int
    remote_gets: int
    remote_bytes_fetched: int
    remote_errors: int
    last_remote_error: str
    retention_deleted_segments: int
    retention_deleted_bytes: int
    has_compaction: bool
    compaction: CompactionInfo
    def __init__(self, name: _Optional[str] = ..., broker_id: _Optional[str] = ..., dispatch_strategy: _Optional[str] = ..., durability: _Optional[str] = ..., first_offset: _Optional[int] = ..., next_offset: _Optional[int] = ..., wal_bytes: _Optional[int] = ..., wal_segments: _Optional[int] = ..., msgs_in_total: _Optional[int] = ..., bytes_in_total: _Optional[int] = ..., msg_rate_in: _Optional[float] = ..., bytes_rate_in: _Optional[float] = ..., producers: _Optional[int] = ..., subscriptions: _Optional[_Iterable[_Union[SubscriptionStats, _Mapping]]] = ..., log_writer: _Optional[str] = ..., log_epoch: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., reserved_to: _Optional[int] = ..., state: _Optional[str] = ..., accepted_gaps: _Optional[_Iterable[_Union[AcceptedGap, _Mapping]]] = ..., local_first_offset: _Optional[int] = ..., has_uploaded: _Optional[bool] = ..., uploaded_first_offset: _Optional[int] = ..., uploaded_next_offset: _Optional[int] = ..., remote_reads: _Optional[int] = ..., remote_entries: _Optional[int] = ..., remote_gets: _Optional[int] = ..., remote_bytes_fetched: _Optional[int] = ..., remote_errors: _Optional[int] = ..., last_remote_error: _Optional[str] = ..., retention_deleted_segments: _Optional[int] = ..., retention_deleted_bytes: _Optional[int] = ..., has_compaction: _Optional[bool] = ..., compaction: _Optional[_Union[CompactionInfo, _Mapping]] = ...) -> None: ...

class CompactTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CompactionInfo(_message.Message):
    __slots__ = ("name", "horizon", "entries", "keys", "bytes", "compacted_at_ms", "duration_s", "messages_read", "stored_in")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HORIZON_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_READ_FIELD_NUMBER: _ClassVar[int]
    STORED_IN_FIELD_NUMBER: _ClassVar[int]
    name: str
    horizon: int
    entries: int
    keys: int
    bytes: int
    compacted_at_ms: int
    duration_s: float
    messages_read: int
    stored_in: str
    def __init__(self, name: _Optional[str] = ..., horizon: _Optional[int] = ..., entries: _Optional[int] = ..., keys: _Optional[int] = ..., bytes: _Optional[int] = ..., compacted_at_ms: _Optional[int] = ..., duration_s: _Optional[float] = ..., messages_read: _Optional[int] = ..., stored_in: _Optional[str] = ...) -> None: ...

class BrokerStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BrokerStats(_message.Message):
    __slots__ = ("broker_id", "topics", "wal_bytes", "msg_rate_in", "msg_rate_out", "disk_free_bytes")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    WAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    MSG_RATE_IN_FIELD_NUMBER: _ClassVar[int]
    MSG_RATE_OUT_FIELD_NUMBER: _ClassVar[int]
    DISK_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    broker_id: str
    topics: int
    wal_bytes: int
    msg_rate_in: float
    msg_rate_out: float
    disk_free_bytes: int
    def __init__(self, broker_id: _Optional[str] = ..., topics: _Optional[int] = ..., wal_bytes: _Optional[int] = ..., msg_rate_in: _Optional[float] = ..., msg_rate_out: _Optional[float] = ..., disk_free_bytes: _Optional[int] = ...) -> None: ...

class SubscriptionPolicy(_message.Message):
    __slots__ = ("max_redeliveries", "ack_timeout_ms", "redelivery_backoff_base_ms", "redelivery_backoff_max_ms", "poison_policy", "dead_letter_topic")
    MAX_REDELIVERIES_FIELD_NUMBER: _ClassVar[int]
    ACK_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REDELIVERY_BACKOFF_BASE_MS_FIELD_NUMBER: _ClassVar[int]
    REDELIVERY_BACKOFF_MAX_MS_FIELD_NUMBER: _ClassVar[int]
    POISON_POLICY_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    max_redeliveries: int
    ack_timeout_ms: int
    redelivery_backoff_base_ms: int
    redelivery_backoff_max_ms: int
    poison_policy: str
    dead_letter_topic: str
    def __init__(self, max_redeliveries: _Optional[int] = ..., ack_timeout_ms: _Optional[int] = ..., redelivery_backoff_base_ms: _Optional[int] = ..., redelivery_backoff_max_ms: _Optional[int] = ..., poison_policy: _Optional[str] = ..., dead_letter_topic: _Optional[str] = ...) -> None: ...

class SetSubscriptionPolicyRequest(_message.Message):
    __slots__ = ("topic", "subscription", "policy")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    policy: SubscriptionPolicy
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ..., policy: _Optional[_Union[SubscriptionPolicy, _Mapping]] = ...) -> None: ...

class GetSubscriptionPolicyRequest(_message.Message):
    __slots__ = ("topic", "subscription")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ...) -> None: ...

class SubscriptionPolicyResponse(_message.Message):
    __slots__ = ("topic", "subscription", "policy")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    policy: SubscriptionPolicy
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ..., policy: _Optional[_Union[SubscriptionPolicy, _Mapping]] = ...) -> None: ...

class RoleInfo(_message.Message):
    __slots__ = ("name", "permissions", "description", "builtin")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    BUILTIN_FIELD_NUMBER: _ClassVar[int]
    name: str
    permissions: _containers.RepeatedScalarFieldContainer[str]
    description: str
    builtin: bool
    def __init__(self, name: _Optional[str] = ..., permissions: _Optional[_Iterable[str]] = ..., description: _Optional[str] = ..., builtin: _Optional[bool] = ...) -> None: ...

class ListRolesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListRolesResponse(_message.Message):
    __slots__ = ("roles",)
    ROLES_FIELD_NUMBER: _ClassVar[int]
    roles: _containers.RepeatedCompositeFieldContainer[RoleInfo]
    def __init__(self, roles: _Optional[_Iterable[_Union[RoleInfo, _Mapping]]] = ...) -> None: ...

class RoleRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CreateRoleRequest(_message.Message):
    __slots__ = ("name", "permissions", "description")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    permissions: _containers.RepeatedScalarFieldContainer[str]
    description: str
    def __init__(self, name: _Optional[str] = ..., permissions: _Optional[_Iterable[str]] = ..., description: _Optional[str] = ...) -> None: ...

class UpdateRoleRequest(_message.Message):
    __slots__ = ("name", "permissions", "description")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    permissions: _containers.RepeatedScalarFieldContainer[str]
    description: str
    def __init__(self, name: _Optional[str] = ..., permissions: _Optional[_Iterable[str]] = ..., description: _Optional[str] = ...) -> None: ...

class DeleteRoleResponse(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class BindingInfo(_message.Message):
    __slots__ = ("name", "principal", "role", "scope", "resource")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    principal: str
    role: str
    scope: str
    resource: str
    def __init__(self, name: _Optional[str] = ..., principal: _Optional[str] = ..., role: _Optional[str] = ..., scope: _Optional[str] = ..., resource: _Optional[str] = ...) -> None: ...

class ListBindingsRequest(_message.Message):
    __slots__ = ("principal",)
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    principal: str
    def __init__(self, principal: _Optional[str] = ...) -> None: ...

class ListBindingsResponse(_message.Message):
    __slots__ = ("bindings",)
    BINDINGS_FIELD_NUMBER: _ClassVar[int]
    bindings: _containers.RepeatedCompositeFieldContainer[BindingInfo]
    def __init__(self, bindings: _Optional[_Iterable[_Union[BindingInfo, _Mapping]]] = ...) -> None: ...

class BindingRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CreateBindingRequest(_message.Message):
    __slots__ = ("binding",)
    BINDING_FIELD_NUMBER: _ClassVar[int]
    binding: BindingInfo
    def __init__(self, binding: _Optional[_Union[BindingInfo, _Mapping]] = ...) -> None: ...

class DeleteBindingResponse(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...
