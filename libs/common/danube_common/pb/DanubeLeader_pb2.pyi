from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CampaignRequest(_message.Message):
    __slots__ = ("role", "candidate_id", "ttl_s", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    role: str
    candidate_id: str
    ttl_s: int
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, role: _Optional[str] = ..., candidate_id: _Optional[str] = ..., ttl_s: _Optional[int] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CampaignEvent(_message.Message):
    __slots__ = ("kind", "key", "term", "leader", "reason", "ttl_s")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[CampaignEvent.Kind]
        WAITING: _ClassVar[CampaignEvent.Kind]
        ELECTED: _ClassVar[CampaignEvent.Kind]
        HEARTBEAT: _ClassVar[CampaignEvent.Kind]
        LOST: _ClassVar[CampaignEvent.Kind]
    KIND_UNSPECIFIED: CampaignEvent.Kind
    WAITING: CampaignEvent.Kind
    ELECTED: CampaignEvent.Kind
    HEARTBEAT: CampaignEvent.Kind
    LOST: CampaignEvent.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    kind: CampaignEvent.Kind
    key: str
    term: int
    leader: LeaderInfo
    reason: str
    ttl_s: int
    def __init__(self, kind: _Optional[_Union[CampaignEvent.Kind, str]] = ..., key: _Optional[str] = ..., term: _Optional[int] = ..., leader: _Optional[_Union[LeaderInfo, _Mapping]] = ..., reason: _Optional[str] = ..., ttl_s: _Optional[int] = ...) -> None: ...

class LeaderInfo(_message.Message):
    __slots__ = ("role", "candidate_id", "term", "metadata", "key")
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
    KEY_FIELD_NUMBER: _ClassVar[int]
    role: str
    candidate_id: str
    term: int
    metadata: _containers.ScalarMap[str, str]
    key: str
    def __init__(self, role: _Optional[str] = ..., candidate_id: _Optional[str] = ..., term: _Optional[int] = ..., metadata: _Optional[_Mapping[str, str]] = ..., key: _Optional[str] = ...) -> None: ...

class GetLeaderRequest(_message.Message):
    __slots__ = ("role",)
    ROLE_FIELD_NUMBER: _ClassVar[int]
    role: str
    def __init__(self, role: _Optional[str] = ...) -> None: ...

class ListLeadersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListLeadersResponse(_message.Message):
    __slots__ = ("leaders",)
    LEADERS_FIELD_NUMBER: _ClassVar[int]
    leaders: _containers.RepeatedCompositeFieldContainer[LeaderInfo]
    def __init__(self, leaders: _Optional[_Iterable[_Union[LeaderInfo, _Mapping]]] = ...) -> None: ...

class WatchLeaderRequest(_message.Message):
    __slots__ = ("role",)
    ROLE_FIELD_NUMBER: _ClassVar[int]
    role: str
    def __init__(self, role: _Optional[str] = ...) -> None: ...
