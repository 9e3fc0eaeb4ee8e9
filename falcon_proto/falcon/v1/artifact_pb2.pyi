import datetime

from . import common_pb2 as _common_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateArtifactReq(_message.Message):
    __slots__ = ("exp_id", "path", "artifact_type")
    EXP_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_TYPE_FIELD_NUMBER: _ClassVar[int]
    exp_id: int
    path: str
    artifact_type: str
    def __init__(self, exp_id: _Optional[int] = ..., path: _Optional[str] = ..., artifact_type: _Optional[str] = ...) -> None: ...

class UpdateArtifactStatusReq(_message.Message):
    __slots__ = ("id", "status", "reason", "message", "expected")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    id: int
    status: str
    reason: str
    message: str
    expected: str
    def __init__(self, id: _Optional[int] = ..., status: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., expected: _Optional[str] = ...) -> None: ...

class GetArtifactReq(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class DeleteArtifactReq(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class ArtifactItem(_message.Message):
    __slots__ = ("id", "exp_id", "path", "artifact_type", "status", "reason", "message", "created_at", "updated_at", "finished_at", "file_count", "total_bytes", "prune_state", "pruned_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    EXP_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_TYPE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    FILE_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    PRUNE_STATE_FIELD_NUMBER: _ClassVar[int]
    PRUNED_AT_FIELD_NUMBER: _ClassVar[int]
    id: int
    exp_id: int
    path: str
    artifact_type: str
    status: str
    reason: str
    message: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    file_count: int
    total_bytes: int
    prune_state: str
    pruned_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[int] = ..., exp_id: _Optional[int] = ..., path: _Optional[str] = ..., artifact_type: _Optional[str] = ..., status: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., file_count: _Optional[int] = ..., total_bytes: _Optional[int] = ..., prune_state: _Optional[str] = ..., pruned_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ArtifactCommonResp(_message.Message):
    __slots__ = ("artifact", "changed", "id")
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    artifact: ArtifactItem
    changed: bool
    id: int
    def __init__(self, artifact: _Optional[_Union[ArtifactItem, _Mapping]] = ..., changed: _Optional[bool] = ..., id: _Optional[int] = ...) -> None: ...

class ListArtifactsResp(_message.Message):
    __slots__ = ("artifacts", "next_page_token", "skipped")
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    artifacts: _containers.RepeatedCompositeFieldContainer[ArtifactItem]
    next_page_token: str
    skipped: _containers.RepeatedCompositeFieldContainer[_common_pb2.SkippedRow]
    def __init__(self, artifacts: _Optional[_Iterable[_Union[ArtifactItem, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., skipped: _Optional[_Iterable[_Union[_common_pb2.SkippedRow, _Mapping]]] = ...) -> None: ...
