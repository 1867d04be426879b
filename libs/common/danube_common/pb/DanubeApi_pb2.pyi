from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ProducerAccessMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    Shared: _ClassVar[ProducerAccessMode]
    Exclusive: _ClassVar[ProducerAccessMode]

class DispatchStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NonReliable: _ClassVar[DispatchStrategy]
    Reliable: _ClassVar[DispatchStrategy]

class PayloadCompression(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PAYLOAD_COMPRESSION_NONE: _ClassVar[PayloadCompression]
    PAYLOAD_COMPRESSION_LZ4: _ClassVar[PayloadCompression]
    PAYLOAD_COMPRESSION_ZSTD: _ClassVar[PayloadCompression]
Shared: ProducerAccessMode
Exclusive: ProducerAccessMode
NonReliable: DispatchStrategy
Reliable: DispatchStrategy
PAYLOAD_COMPRESSION_NONE: PayloadCompression
PAYLOAD_COMPRESSION_LZ4: PayloadCompression
PAYLOAD_COMPRESSION_ZSTD: PayloadCompression

class ProducerRequest(_message.Message):
    __slots__ = ("request_id", "producer_name", "topic_name", "schema_ref", "producer_access_mode", "dispatch_strategy")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_REF_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ACCESS_MODE_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    producer_name: str
    topic_name: str
    schema_ref: SchemaReference
    producer_access_mode: ProducerAccessMode
    dispatch_strategy: DispatchStrategy
    def __init__(self, request_id: _Optional[int] = ..., producer_name: _Optional[str] = ..., topic_name: _Optional[str] = ..., schema_ref: _Optional[_Union[SchemaReference, _Mapping]] = ..., producer_access_mode: _Optional[_Union[ProducerAccessMode, str]] = ..., dispatch_strategy: _Optional[_Union[DispatchStrategy, str]] = ...) -> None: ...

class SchemaReference(_message.Message):
    __slots__ = ("subject", "use_latest", "pinned_version", "min_version")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    USE_LATEST_FIELD_NUMBER: _ClassVar[int]
    PINNED_VERSION_FIELD_NUMBER: _ClassVar[int]
    MIN_VERSION_FIELD_NUMBER: _ClassVar[int]
    subject: str
    use_latest: bool
    pinned_version: int
    min_version: int
    def __init__(self, subject: _Optional[str] = ..., use_latest: _Optional[bool] = ..., pinned_version: _Optional[int] = ..., min_version: _Optional[int] = ...) -> None: ...

class ProducerResponse(_message.Message):
    __slots__ = ("request_id", "producer_id", "producer_name", "max_message_size_bytes", "last_sequence_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    producer_id: int
    producer_name: str
    max_message_size_bytes: int
    last_sequence_id: int
    def __init__(self, request_id: _Optional[int] = ..., producer_id: _Optional[int] = ..., producer_name: _Optional[str] = ..., max_message_size_bytes: _Optional[int] = ..., last_sequence_id: _Optional[int] = ...) -> None: ...

class MessageResponse(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    def __init__(self, request_id: _Optional[int] = ...) -> None: ...

class ConsumerRequest(_message.Message):
    __slots__ = ("request_id", "topic_name", "consumer_name", "subscription", "subscription_type", "key_filters", "initial_position", "max_unacked_messages", "reader", "read_compacted")
    class InitialPosition(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        Latest: _ClassVar[ConsumerRequest.InitialPosition]
        Earliest: _ClassVar[ConsumerRequest.InitialPosition]
    Latest: ConsumerRequest.InitialPosition
    Earliest: ConsumerRequest.InitialPosition
    class SubscriptionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        Exclusive: _ClassVar[ConsumerRequest.SubscriptionType]
        Shared: _ClassVar[ConsumerRequest.SubscriptionType]
        Failover: _ClassVar[ConsumerRequest.SubscriptionType]
        KeyShared: _ClassVar[ConsumerRequest.SubscriptionType]
    Exclusive: ConsumerRequest.SubscriptionType
    Shared: ConsumerRequest.SubscriptionType
    Failover: ConsumerRequest.SubscriptionType
    KeyShared: ConsumerRequest.SubscriptionType
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_NAME_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FILTERS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_POSITION_FIELD_NUMBER: _ClassVar[int]
    MAX_UNACKED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    READER_FIELD_NUMBER: _ClassVar[int]
    READ_COMPACTED_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    topic_name: str
    consumer_name: str
    subscription: str
    subscription_type: ConsumerRequest.SubscriptionType
    key_filters: _containers.RepeatedScalarFieldContainer[str]
    initial_position: ConsumerRequest.InitialPosition
    max_unacked_messages: int
    reader: ReaderStart
    read_compacted: bool
    def __init__(self, request_id: _Optional[int] = ..., topic_name: _Optional[str] = ..., consumer_name: _Optional[str] = ..., subscription: _Optional[str] = ..., subscription_type: _Optional[_Union[ConsumerRequest.SubscriptionType, str]] = ..., key_filters: _Optional[_Iterable[str]] = ..., initial_position: _Optional[_Union[ConsumerRequest.InitialPosition, str]] = ..., max_unacked_messages: _Optional[int] = ..., reader: _Optional[_Union[ReaderStart, _Mapping]] = ..., read_compacted: _Optional[bool] = ...) -> None: ...

class ConsumerResponse(_message.Message):
    __slots__ = ("request_id", "consumer_id", "consumer_name", "reader_start_offset")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_NAME_FIELD_NUMBER: _ClassVar[int]
    READER_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    consumer_id: int
    consumer_name: str
    reader_start_offset: int
    def __init__(self, request_id: _Optional[int] = ..., consumer_id: _Optional[int] = ..., consumer_name: _Optional[str] = ..., reader_start_offset: _Optional[int] = ...) -> None: ...

class ReceiveRequest(_message.Message):
    __slots__ = ("request_id", "consumer_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    consumer_id: int
    def __init__(self, request_id: _Optional[int] = ..., consumer_id: _Optional[int] = ...) -> None: ...

class StreamMessage(_message.Message):
    __slots__ = ("request_id", "msg_id", "payload", "publish_time", "producer_name", "subscription_name", "attributes", "schema_id", "schema_version", "routing_key", "sequence_id", "redelivery_count", "deliver_at_ms", "compression", "chunk", "batch_size")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_TIME_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_NAME_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    ROUTING_KEY_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    REDELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    msg_id: MsgID
    payload: bytes
    publish_time: int
    producer_name: str
    subscription_name: str
    attributes: _containers.ScalarMap[str, str]
    schema_id: int
    schema_version: int
    routing_key: str
    sequence_id: int
    redelivery_count: int
    deliver_at_ms: int
    compression: PayloadCompression
    chunk: MessageChunk
    batch_size: int
    def __init__(self, request_id: _Optional[int] = ..., msg_id: _Optional[_Union[MsgID, _Mapping]] = ..., payload: _Optional[bytes] = ..., publish_time: _Optional[int] = ..., producer_name: _Optional[str] = ..., subscription_name: _Optional[str] = ..., attributes: _Optional[_Mapping[str, str]] = ..., schema_id: _Optional[int] = ..., schema_version: _Optional[int] = ..., routing_key: _Optional[str] = ..., sequence_id: _Optional[int] = ..., redelivery_count: _Optional[int] = ..., deliver_at_ms: _Optional[int] = ..., compression: _Optional[_Union[PayloadCompression, str]] = ..., chunk: _Optional[_Union[MessageChunk, _Mapping]] = ..., batch_size: _Optional[int] = ...) -> None: ...

class PackedMessages(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[PackedEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[PackedEntry, _Mapping]]] = ...) -> None: ...

class PackedEntry(_message.Message):
    __slots__ = ("payload", "attributes", "publish_time")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_TIME_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    attributes: _containers.ScalarMap[str, str]
    publish_time: int
    def __init__(self, payload: _Optional[bytes] = ..., attributes: _Optional[_Mapping[str, str]] = ..., publish_time: _Optional[int] = ...) -> None: ...

class MessageChunk(_message.Message):
    __slots__ = ("message_uuid", "index", "count", "total_size")
    MESSAGE_UUID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    message_uuid: str
    index: int
    count: int
    total_size: int
    def __init__(self, message_uuid: _Optional[str] = ..., index: _Optional[int] = ..., count: _Optional[int] = ..., total_size: _Optional[int] = ...) -> None: ...

class MsgID(_message.Message):
    __slots__ = ("producer_id", "topic_name", "broker_addr", "topic_offset")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    TOPIC_OFFSET_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    topic_name: str
    broker_addr: str
    topic_offset: int
    def __init__(self, producer_id: _Optional[int] = ..., topic_name: _Optional[str] = ..., broker_addr: _Optional[str] = ..., topic_offset: _Optional[int] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("request_id", "msg_id", "subscription_name")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_NAME_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    msg_id: MsgID
    subscription_name: str
    def __init__(self, request_id: _Optional[int] = ..., msg_id: _Optional[_Union[MsgID, _Mapping]] = ..., subscription_name: _Optional[str] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    def __init__(self, request_id: _Optional[int] = ...) -> None: ...

class NackRequest(_message.Message):
    __slots__ = ("request_id", "msg_id", "subscription_name", "delay_ms", "reason")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_NAME_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    msg_id: MsgID
    subscription_name: str
    delay_ms: int
    reason: str
    def __init__(self, request_id: _Optional[int] = ..., msg_id: _Optional[_Union[MsgID, _Mapping]] = ..., subscription_name: _Optional[str] = ..., delay_ms: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class NackResponse(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    def __init__(self, request_id: _Optional[int] = ...) -> None: ...

class TopicLookupRequest(_message.Message):
    __slots__ = ("request_id", "topic")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    topic: str
    def __init__(self, request_id: _Optional[int] = ..., topic: _Optional[str] = ...) -> None: ...

class TopicLookupResponse(_message.Message):
    __slots__ = ("request_id", "response_type", "connect_url", "broker_url", "proxy")
    class LookupType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        Redirect: _ClassVar[TopicLookupResponse.LookupType]
        Connect: _ClassVar[TopicLookupResponse.LookupType]
        Failed: _ClassVar[TopicLookupResponse.LookupType]
    Redirect: TopicLookupResponse.LookupType
    Connect: TopicLookupResponse.LookupType
    Failed: TopicLookupResponse.LookupType
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_TYPE_FIELD_NUMBER: _ClassVar[int]
    CONNECT_URL_FIELD_NUMBER: _ClassVar[int]
    BROKER_URL_FIELD_NUMBER: _ClassVar[int]
    PROXY_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    response_type: TopicLookupResponse.LookupType
    connect_url: str
    broker_url: str
    proxy: bool
    def __init__(self, request_id: _Optional[int] = ..., response_type: _Optional[_Union[TopicLookupResponse.LookupType, str]] = ..., connect_url: _Optional[str] = ..., broker_url: _Optional[str] = ..., proxy: _Optional[bool] = ...) -> None: ...

class TopicPartitionsResponse(_message.Message):
    __slots__ = ("request_id", "partitions")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    partitions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, request_id: _Optional[int] = ..., partitions: _Optional[_Iterable[str]] = ...) -> None: ...

class HealthCheckRequest(_message.Message):
    __slots__ = ("request_id", "client", "id")
    class ClientType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        Producer: _ClassVar[HealthCheckRequest.ClientType]
        Consumer: _ClassVar[HealthCheckRequest.ClientType]
    Producer: HealthCheckRequest.ClientType
    Consumer: HealthCheckRequest.ClientType
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    client: HealthCheckRequest.ClientType
    id: int
    def __init__(self, request_id: _Optional[int] = ..., client: _Optional[_Union[HealthCheckRequest.ClientType, str]] = ..., id: _Optional[int] = ...) -> None: ...

class HealthCheckResponse(_message.Message):
    __slots__ = ("status",)
    class ClientStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OK: _ClassVar[HealthCheckResponse.ClientStatus]
        CLOSE: _ClassVar[HealthCheckResponse.ClientStatus]
    OK: HealthCheckResponse.ClientStatus
    CLOSE: HealthCheckResponse.ClientStatus
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: HealthCheckResponse.ClientStatus
    def __init__(self, status: _Optional[_Union[HealthCheckResponse.ClientStatus, str]] = ...) -> None: ...

class NamespaceTopicsRequest(_message.Message):
    __slots__ = ("request_id", "namespace")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    namespace: str
    def __init__(self, request_id: _Optional[int] = ..., namespace: _Optional[str] = ...) -> None: ...

class NamespaceTopicsResponse(_message.Message):
    __slots__ = ("request_id", "topics")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    topics: _containers.RepeatedCompositeFieldContainer[NamespaceTopic]
    def __init__(self, request_id: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[NamespaceTopic, _Mapping]]] = ...) -> None: ...

class NamespaceTopic(_message.Message):
    __slots__ = ("name", "partition_of")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITION_OF_FIELD_NUMBER: _ClassVar[int]
    name: str
    partition_of: str
    def __init__(self, name: _Optional[str] = ..., partition_of: _Optional[str] = ...) -> None: ...

class PublishBatch(_message.Message):
    __slots__ = ("producer_id", "batch_seq", "messages", "session")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_SEQ_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    batch_seq: int
    messages: _containers.RepeatedCompositeFieldContainer[StreamMessage]
    session: int
    def __init__(self, producer_id: _Optional[int] = ..., batch_seq: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[StreamMessage, _Mapping]]] = ..., session: _Optional[int] = ...) -> None: ...

class PublishAck(_message.Message):
    __slots__ = ("batch_seq", "first_offset", "count", "error", "offsets", "duplicates", "producer_id")
    BATCH_SEQ_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    batch_seq: int
    first_offset: int
    count: int
    error: ErrorDetail
    offsets: _containers.RepeatedScalarFieldContainer[int]
    duplicates: int
    producer_id: int
    def __init__(self, batch_seq: _Optional[int] = ..., first_offset: _Optional[int] = ..., count: _Optional[int] = ..., error: _Optional[_Union[ErrorDetail, _Mapping]] = ..., offsets: _Optional[_Iterable[int]] = ..., duplicates: _Optional[int] = ..., producer_id: _Optional[int] = ...) -> None: ...

class PublishMuxRequest(_message.Message):
    __slots__ = ("batches",)
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    batches: _containers.RepeatedCompositeFieldContainer[PublishBatch]
    def __init__(self, batches: _Optional[_Iterable[_Union[PublishBatch, _Mapping]]] = ...) -> None: ...

class PublishMuxResponse(_message.Message):
    __slots__ = ("acks", "frames_read")
    ACKS_FIELD_NUMBER: _ClassVar[int]
    FRAMES_READ_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[PublishAck]
    frames_read: int
    def __init__(self, acks: _Optional[_Iterable[_Union[PublishAck, _Mapping]]] = ..., frames_read: _Optional[int] = ...) -> None: ...

class ErrorDetail(_message.Message):
    __slots__ = ("code", "grpc_code", "message", "retryable", "redirect")
    CODE_FIELD_NUMBER: _ClassVar[int]
    GRPC_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    REDIRECT_FIELD_NUMBER: _ClassVar[int]
    code: str
    grpc_code: int
    message: str
    retryable: bool
    redirect: str
    def __init__(self, code: _Optional[str] = ..., grpc_code: _Optional[int] = ..., message: _Optional[str] = ..., retryable: _Optional[bool] = ..., redirect: _Optional[str] = ...) -> None: ...

class CloseProducerRequest(_message.Message):
    __slots__ = ("request_id", "producer_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    producer_id: int
    def __init__(self, request_id: _Optional[int] = ..., producer_id: _Optional[int] = ...) -> None: ...

class CloseProducerResponse(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    def __init__(self, request_id: _Optional[int] = ...) -> None: ...

class ReceiveBatchRequest(_message.Message):
    __slots__ = ("request_id", "consumer_id", "max_messages_per_frame")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_PER_FRAME_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    consumer_id: int
    max_messages_per_frame: int
    def __init__(self, request_id: _Optional[int] = ..., consumer_id: _Optional[int] = ..., max_messages_per_frame: _Optional[int] = ...) -> None: ...

class MessageBatch(_message.Message):
    __slots__ = ("messages", "skipped")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[StreamMessage]
    skipped: _containers.RepeatedCompositeFieldContainer[SkippedRange]
    def __init__(self, messages: _Optional[_Iterable[_Union[StreamMessage, _Mapping]]] = ..., skipped: _Optional[_Iterable[_Union[SkippedRange, _Mapping]]] = ...) -> None: ...

class SkippedRange(_message.Message):
    __slots__ = ("start_offset", "next_offset")
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    start_offset: int
    next_offset: int
    def __init__(self, start_offset: _Optional[int] = ..., next_offset: _Optional[int] = ...) -> None: ...

class AckBatchRequest(_message.Message):
    __slots__ = ("request_id", "consumer_id", "topic_name", "subscription_name", "topic_offsets", "cumulative")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    CUMULATIVE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    consumer_id: int
    topic_name: str
    subscription_name: str
    topic_offsets: _containers.RepeatedScalarFieldContainer[int]
    cumulative: bool
    def __init__(self, request_id: _Optional[int] = ..., consumer_id: _Optional[int] = ..., topic_name: _Optional[str] = ..., subscription_name: _Optional[str] = ..., topic_offsets: _Optional[_Iterable[int]] = ..., cumulative: _Optional[bool] = ...) -> None: ...

class ConsumeMuxRequest(_message.Message):
    __slots__ = ("attach", "detach", "credits", "acks")
    ATTACH_FIELD_NUMBER: _ClassVar[int]
    DETACH_FIELD_NUMBER: _ClassVar[int]
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    attach: _containers.RepeatedCompositeFieldContainer[MuxAttach]
    detach: _containers.RepeatedScalarFieldContainer[int]
    credits: _containers.RepeatedCompositeFieldContainer[MuxCredit]
    acks: _containers.RepeatedCompositeFieldContainer[MuxAck]
    def __init__(self, attach: _Optional[_Iterable[_Union[MuxAttach, _Mapping]]] = ..., detach: _Optional[_Iterable[int]] = ..., credits: _Optional[_Iterable[_Union[MuxCredit, _Mapping]]] = ..., acks: _Optional[_Iterable[_Union[MuxAck, _Mapping]]] = ...) -> None: ...

class MuxAttach(_message.Message):
    __slots__ = ("consumer_id", "max_messages_per_frame", "credits")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_PER_FRAME_FIELD_NUMBER: _ClassVar[int]
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    max_messages_per_frame: int
    credits: int
    def __init__(self, consumer_id: _Optional[int] = ..., max_messages_per_frame: _Optional[int] = ..., credits: _Optional[int] = ...) -> None: ...

class MuxCredit(_message.Message):
    __slots__ = ("consumer_id", "frames")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    frames: int
    def __init__(self, consumer_id: _Optional[int] = ..., frames: _Optional[int] = ...) -> None: ...

class MuxAck(_message.Message):
    __slots__ = ("request_id", "consumer_id", "topic_offsets", "cumulative")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    CUMULATIVE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    consumer_id: int
    topic_offsets: _containers.RepeatedScalarFieldContainer[int]
    cumulative: bool
    def __init__(self, request_id: _Optional[int] = ..., consumer_id: _Optional[int] = ..., topic_offsets: _Optional[_Iterable[int]] = ..., cumulative: _Optional[bool] = ...) -> None: ...

class MuxAckResult(_message.Message):
    __slots__ = ("request_id", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    error: ErrorDetail
    def __init__(self, request_id: _Optional[int] = ..., error: _Optional[_Union[ErrorDetail, _Mapping]] = ...) -> None: ...

class ConsumeMuxResponse(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[ConsumeMuxEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[ConsumeMuxEvent, _Mapping]]] = ...) -> None: ...

class ConsumeMuxEvent(_message.Message):
    __slots__ = ("consumer_id", "delivery", "closed", "ack_result")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    ACK_RESULT_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    delivery: MessageBatch
    closed: ErrorDetail
    ack_result: MuxAckResult
    def __init__(self, consumer_id: _Optional[int] = ..., delivery: _Optional[_Union[MessageBatch, _Mapping]] = ..., closed: _Optional[_Union[ErrorDetail, _Mapping]] = ..., ack_result: _Optional[_Union[MuxAckResult, _Mapping]] = ...) -> None: ...

class CloseConsumerRequest(_message.Message):
    __slots__ = ("request_id", "consumer_id", "unsubscribe")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    UNSUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    consumer_id: int
    unsubscribe: bool
    def __init__(self, request_id: _Optional[int] = ..., consumer_id: _Optional[int] = ..., unsubscribe: _Optional[bool] = ...) -> None: ...

class CloseConsumerResponse(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    def __init__(self, request_id: _Optional[int] = ...) -> None: ...

class SeekRequest(_message.Message):
    __slots__ = ("request_id", "consumer_id", "offset", "publish_time_ms")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    consumer_id: int
    offset: int
    publish_time_ms: int
    def __init__(self, request_id: _Optional[int] = ..., consumer_id: _Optional[int] = ..., offset: _Optional[int] = ..., publish_time_ms: _Optional[int] = ...) -> None: ...

class SeekResponse(_message.Message):
    __slots__ = ("request_id", "offset")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    offset: int
    def __init__(self, request_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ReaderStart(_message.Message):
    __slots__ = ("earliest", "latest", "offset", "publish_time_ms")
    EARLIEST_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    earliest: bool
    latest: bool
    offset: int
    publish_time_ms: int
    def __init__(self, earliest: _Optional[bool] = ..., latest: _Optional[bool] = ..., offset: _Optional[int] = ..., publish_time_ms: _Optional[int] = ...) -> None: ...
