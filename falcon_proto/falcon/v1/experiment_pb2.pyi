import datetime

from . import common_pb2 as _common_pb2
from . import job_pb2 as _job_pb2
from . import artifact_pb2 as _artifact_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListExpStatesReq(_message.Message):
    __slots__ = ("statuses", "page_size", "page_token")
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    statuses: _containers.RepeatedScalarFieldContainer[str]
    page_size: int
    page_token: str
    def __init__(self, statuses: _Optional[_Iterable[str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ExpStateJob(_message.Message):
    __slots__ = ("id", "role", "status", "reason", "message")
    ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    id: int
    role: str
    status: str
    reason: str
    message: str
    def __init__(self, id: _Optional[int] = ..., role: _Optional[str] = ..., status: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ExpStateArtifact(_message.Message):
    __slots__ = ("id", "path", "artifact_type", "status", "reason", "message")
    ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_TYPE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    id: int
    path: str
    artifact_type: str
    status: str
    reason: str
    message: str
    def __init__(self, id: _Optional[int] = ..., path: _Optional[str] = ..., artifact_type: _Optional[str] = ..., status: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ExpState(_message.Message):
    __slots__ = ("id", "name", "status", "reason", "message", "cluster_name", "exp_type", "artifact_path", "jobs", "artifact")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    EXP_TYPE_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_PATH_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    id: int
    name: str
    status: str
    reason: str
    message: str
    cluster_name: str
    exp_type: str
    artifact_path: str
    jobs: _containers.RepeatedCompositeFieldContainer[ExpStateJob]
    artifact: ExpStateArtifact
    def __init__(self, id: _Optional[int] = ..., name: _Optional[str] = ..., status: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., cluster_name: _Optional[str] = ..., exp_type: _Optional[str] = ..., artifact_path: _Optional[str] = ..., jobs: _Optional[_Iterable[_Union[ExpStateJob, _Mapping]]] = ..., artifact: _Optional[_Union[ExpStateArtifact, _Mapping]] = ...) -> None: ...

class ListExpStatesResp(_message.Message):
    __slots__ = ("exps", "next_page_token", "skipped")
    EXPS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    exps: _containers.RepeatedCompositeFieldContainer[ExpState]
    next_page_token: str
    skipped: _containers.RepeatedCompositeFieldContainer[_common_pb2.SkippedRow]
    def __init__(self, exps: _Optional[_Iterable[_Union[ExpState, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., skipped: _Optional[_Iterable[_Union[_common_pb2.SkippedRow, _Mapping]]] = ...) -> None: ...

class UpdateExpStatusesReq(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[UpdateExpStatusReq]
    def __init__(self, items: _Optional[_Iterable[_Union[UpdateExpStatusReq, _Mapping]]] = ...) -> None: ...

class UpdateExpStatusResult(_message.Message):
    __slots__ = ("id", "changed", "error_code", "error_message", "status")
    ID_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    id: int
    changed: bool
    error_code: str
    error_message: str
    status: str
    def __init__(self, id: _Optional[int] = ..., changed: _Optional[bool] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ..., status: _Optional[str] = ...) -> None: ...

class UpdateExpStatusesResp(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[UpdateExpStatusResult]
    def __init__(self, results: _Optional[_Iterable[_Union[UpdateExpStatusResult, _Mapping]]] = ...) -> None: ...

class CreateExpReq(_message.Message):
    __slots__ = ("name", "cluster_name", "exp_type", "role_to_task_spec_json", "config", "priority", "creator_email", "labels", "cloned_from", "idempotency_key")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    EXP_TYPE_FIELD_NUMBER: _ClassVar[int]
    ROLE_TO_TASK_SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CREATOR_EMAIL_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CLONED_FROM_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    name: str
    cluster_name: str
    exp_type: str
    role_to_task_spec_json: str
    config: str
    priority: int
    creator_email: str
    labels: _containers.ScalarMap[str, str]
    cloned_from: int
    idempotency_key: str
    def __init__(self, name: _Optional[str] = ..., cluster_name: _Optional[str] = ..., exp_type: _Optional[str] = ..., role_to_task_spec_json: _Optional[str] = ..., config: _Optional[str] = ..., priority: _Optional[int] = ..., creator_email: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., cloned_from: _Optional[int] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class UpdateExpStatusReq(_message.Message):
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

class AbortExpReq(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class GetExpReq(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class DeleteExpReq(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class ExpItem(_message.Message):
    __slots__ = ("id", "name", "creator_id", "creator_email", "cluster_name", "exp_type", "role_to_task_spec_json", "config", "artifact_path", "priority", "status", "reason", "message", "created_at", "updated_at", "started_at", "finished_at", "aborting_at", "aborted_at", "jobs", "artifact", "labels", "cloned_from")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CREATOR_ID_FIELD_NUMBER: _ClassVar[int]
    CREATOR_EMAIL_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    EXP_TYPE_FIELD_NUMBER: _ClassVar[int]
    ROLE_TO_TASK_SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_PATH_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    ABORTING_AT_FIELD_NUMBER: _ClassVar[int]
    ABORTED_AT_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CLONED_FROM_FIELD_NUMBER: _ClassVar[int]
    id: int
    name: str
    creator_id: str
    creator_email: str
    cluster_name: str
    exp_type: str
    role_to_task_spec_json: str
    config: str
    artifact_path: str
    priority: int
    status: str
    reason: str
    message: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    aborting_at: _timestamp_pb2.Timestamp
    aborted_at: _timestamp_pb2.Timestamp
    jobs: _containers.RepeatedCompositeFieldContainer[_job_pb2.JobItem]
    artifact: _artifact_pb2.ArtifactItem
    labels: _containers.ScalarMap[str, str]
    cloned_from: int
    def __init__(self, id: _Optional[int] = ..., name: _Optional[str] = ..., creator_id: _Optional[str] = ..., creator_email: _Optional[str] = ..., cluster_name: _Optional[str] = ..., exp_type: _Optional[str] = ..., role_to_task_spec_json: _Optional[str] = ..., config: _Optional[str] = ..., artifact_path: _Optional[str] = ..., priority: _Optional[int] = ..., status: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., aborting_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., aborted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., jobs: _Optional[_Iterable[_Union[_job_pb2.JobItem, _Mapping]]] = ..., artifact: _Optional[_Union[_artifact_pb2.ArtifactItem, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., cloned_from: _Optional[int] = ...) -> None: ...

class ExpCommonResp(_message.Message):
    __slots__ = ("exp", "changed", "id")
    EXP_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    exp: ExpItem
    changed: bool
    id: int
    def __init__(self, exp: _Optional[_Union[ExpItem, _Mapping]] = ..., changed: _Optional[bool] = ..., id: _Optional[int] = ...) -> None: ...

class ListExpsResp(_message.Message):
    __slots__ = ("exps", "next_page_token", "skipped")
    EXPS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    exps: _containers.RepeatedCompositeFieldContainer[ExpItem]
    next_page_token: str
    skipped: _containers.RepeatedCompositeFieldContainer[_common_pb2.SkippedRow]
    def __init__(self, exps: _Optional[_Iterable[_Union[ExpItem, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., skipped: _Optional[_Iterable[_Union[_common_pb2.SkippedRow, _Mapping]]] = ...) -> None: ...
