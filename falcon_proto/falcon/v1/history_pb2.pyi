import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListExpEventsReq(_message.Message):
    __slots__ = ("exp_id",)
    EXP_ID_FIELD_NUMBER: _ClassVar[int]
    exp_id: int
    def __init__(self, exp_id: _Optional[int] = ...) -> None: ...

class TransitionEvent(_message.Message):
    __slots__ = ("id", "entity_type", "entity_id", "from_status", "to_status", "reason", "message", "actor", "at")
    ID_FIELD_NUMBER: _ClassVar[int]
    ENTITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_STATUS_FIELD_NUMBER: _ClassVar[int]
    TO_STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    id: int
    entity_type: str
    entity_id: str
    from_status: str
    to_status: str
    reason: str
    message: str
    actor: str
    at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[int] = ..., entity_type: _Optional[str] = ..., entity_id: _Optional[str] = ..., from_status: _Optional[str] = ..., to_status: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., actor: _Optional[str] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListExpEventsResp(_message.Message):
    __slots__ = ("exp_id", "events")
    EXP_ID_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    exp_id: int
    events: _containers.RepeatedCompositeFieldContainer[TransitionEvent]
    def __init__(self, exp_id: _Optional[int] = ..., events: _Optional[_Iterable[_Union[TransitionEvent, _Mapping]]] = ...) -> None: ...
