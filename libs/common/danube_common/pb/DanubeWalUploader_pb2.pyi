from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FlushRequest(_message.Message):
    __slots__ = ("topic", "up_to_offset", "all_topics")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    UP_TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ALL_TOPICS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    up_to_offset: int
    all_topics: bool
    def __init__(self, topic: _Optional[str] = ..., up_to_offset: _Optional[int] = ..., all_topics: _Optional[bool] = ...) -> None: ...

class TopicProgress(_message.Message):
    __slots__ = ("topic", "uploaded_next_offset", "local_next_offset", "lag_bytes", "last_error", "last_upload_at_ms", "upload_errors", "final")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    UPLOADED_NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOCAL_NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_UPLOAD_AT_MS_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_ERRORS_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    topic: str
    uploaded_next_offset: int
    local_next_offset: int
    lag_bytes: int
    last_error: str
    last_upload_at_ms: int
    upload_errors: int
    final: bool
    def __init__(self, topic: _Optional[str] = ..., uploaded_next_offset: _Optional[int] = ..., local_next_offset: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., last_error: _Optional[str] = ..., last_upload_at_ms: _Optional[int] = ..., upload_errors: _Optional[int] = ..., final: _Optional[bool] = ...) -> None: ...

class FlushResponse(_message.Message):
    __slots__ = ("topics", "uploaded_next_offset")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    UPLOADED_NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicProgress]
    uploaded_next_offset: int
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicProgress, _Mapping]]] = ..., uploaded_next_offset: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("broker_id", "broker_alive", "topics", "uploads_total", "upload_errors_total", "bytes_uploaded_total", "overlaps_refused_total", "final_states_total")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ALIVE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    UPLOADS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_ERRORS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    BYTES_UPLOADED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    OVERLAPS_REFUSED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    FINAL_STATES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    broker_id: str
    broker_alive: bool
    topics: _containers.RepeatedCompositeFieldContainer[TopicProgress]
    uploads_total: int
    upload_errors_total: int
    bytes_uploaded_total: int
    overlaps_refused_total: int
    final_states_total: int
    def __init__(self, broker_id: _Optional[str] = ..., broker_alive: _Optional[bool] = ..., topics: _Optional[_Iterable[_Union[TopicProgress, _Mapping]]] = ..., uploads_total: _Optional[int] = ..., upload_errors_total: _Optional[int] = ..., bytes_uploaded_total: _Optional[int] = ..., overlaps_refused_total: _Optional[int] = ..., final_states_total: _Optional[int] = ...) -> None: ...
