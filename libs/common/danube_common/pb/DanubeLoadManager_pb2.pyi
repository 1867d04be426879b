from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LoadManagerStatusResponse(_message.Message):
    __slots__ = ("candidate_id", "leading", "term", "passes", "actions_applied", "actions_refused", "brokers", "topics", "moves_in_flight", "view_revision", "elections")
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    LEADING_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    PASSES_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_APPLIED_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_REFUSED_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    MOVES_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    VIEW_REVISION_FIELD_NUMBER: _ClassVar[int]
    ELECTIONS_FIELD_NUMBER: _ClassVar[int]
    candidate_id: str
    leading: bool
    term: int
    passes: int
    actions_applied: int
    actions_refused: int
    brokers: int
    topics: int
    moves_in_flight: int
    view_revision: int
    elections: int
    def __init__(self, candidate_id: _Optional[str] = ..., leading: _Optional[bool] = ..., term: _Optional[int] = ..., passes: _Optional[int] = ..., actions_applied: _Optional[int] = ..., actions_refused: _Optional[int] = ..., brokers: _Optional[int] = ..., topics: _Optional[int] = ..., moves_in_flight: _Optional[int] = ..., view_revision: _Optional[int] = ..., elections: _Optional[int] = ...) -> None: ...
