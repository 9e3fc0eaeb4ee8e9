import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CommonListReq(_message.Message):
    __slots__ = ("statuses", "exp_statuses", "cluster_names", "exp_types", "ids", "exp_ids", "updated_since", "page_size", "page_token", "labels")
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    EXP_STATUSES_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAMES_FIELD_NUMBER: _ClassVar[int]
    EXP_TYPES_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    EXP_IDS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_SINCE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    statuses: _containers.RepeatedScalarFieldContainer[str]
    exp_statuses: _containers.RepeatedScalarFieldContainer[str]
    cluster_names: _containers.RepeatedScalarFieldContainer[str]
    exp_types: _containers.RepeatedScalarFieldContainer[str]
    ids: _containers.RepeatedScalarFieldContainer[int]
    exp_ids: _containers.RepeatedScalarFieldContainer[int]
    updated_since: _timestamp_pb2.Timestamp
    page_size: int
    page_token: str
    labels: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, statuses: _Optional[_Iterable[str]] = ..., exp_statuses: _Optional[_Iterable[str]] = ..., cluster_names: _Optional[_Iterable[str]] = ..., exp_types: _Optional[_Iterable[str]] = ..., ids: _Optional[_Iterable[int]] = ..., exp_ids: _Optional[_Iterable[int]] = ..., updated_since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., labels: _Optional[_Iterable[str]] = ...) -> None: ...

class SkippedRow(_message.Message):
    __slots__ = ("id", "exp_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    EXP_ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    exp_id: int
    def __init__(self, id: _Optional[int] = ..., exp_id: _Optional[int] = ...) -> None: ...
