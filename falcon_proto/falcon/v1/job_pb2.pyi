import datetime

from . import common_pb2 as _common_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListJobStatesReq(_message.Message):
    __slots__ = ("statuses", "cluster_names", "page_size", "page_token", "submit_specs_only")
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAMES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_SPECS_ONLY_FIELD_NUMBER: _ClassVar[int]
    statuses: _containers.RepeatedScalarFieldContainer[str]
    cluster_names: _containers.RepeatedScalarFieldContainer[str]
    page_size: int
    page_token: str
    submit_specs_only: bool
    def __init__(self, statuses: _Optional[_Iterable[str]] = ..., cluster_names: _Optional[_Iterable[str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., submit_specs_only: _Optional[bool] = ...) -> None: ...

class JobState(_message.Message):
    __slots__ = ("id", "exp_id", "exp_name", "exp_status", "exp_type", "role", "cluster_name", "status", "reason", "message", "cluster_job_name", "artifact_path", "task_spec_json", "exp_config", "exp_creator_email", "image")
    ID_FIELD_NUMBER: _ClassVar[int]
    EXP_ID_FIELD_NUMBER: _ClassVar[int]
    EXP_NAME_FIELD_NUMBER: _ClassVar[int]
    EXP_STATUS_FIELD_NUMBER: _ClassVar[int]
    EXP_TYPE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_PATH_FIELD_NUMBER: _ClassVar[int]
    TASK_SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    EXP_CONFIG_FIELD_NUMBER: _ClassVar[int]
    EXP_CREATOR_EMAIL_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    id: int
    exp_id: int
    exp_name: str
    exp_status: str
    exp_type: str
    role: str
    cluster_name: str
    status: str
    reason: str
    message: str
    cluster_job_name: str
    artifact_path: str
    task_spec_json: str
    exp_config: str
    exp_creator_email: str
    image: str
    def __init__(self, id: _Optional[int] = ..., exp_id: _Optional[int] = ..., exp_name: _Optional[str] = ..., exp_status: _Optional[str] = ..., exp_type: _Optional[str] = ..., role: _Optional[str] = ..., cluster_name: _Optional[str] = ..., status: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., cluster_job_name: _Optional[str] = ..., artifact_path: _Optional[str] = ..., task_spec_json: _Optional[str] = ..., exp_config: _Optional[str] = ..., exp_creator_email: _Optional[str] = ..., image: _Optional[str] = ...) -> None: ...

class ListJobStatesResp(_message.Message):
    __slots__ = ("jobs", "next_page_token", "skipped")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobState]
    next_page_token: str
    skipped: _containers.RepeatedCompositeFieldContainer[_common_pb2.SkippedRow]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobState, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., skipped: _Optional[_Iterable[_Union[_common_pb2.SkippedRow, _Mapping]]] = ...) -> None: ...

class CreateJobReq(_message.Message):
    __slots__ = ("exp_id", "role", "task_spec_json")
    EXP_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TASK_SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    exp_id: int
    role: str
    task_spec_json: str
    def __init__(self, exp_id: _Optional[int] = ..., role: _Optional[str] = ..., task_spec_json: _Optional[str] = ...) -> None: ...

class UpdateJobStatusReq(_message.Message):
    __slots__ = ("id", "status", "reason", "message", "expected", "cluster_job_name", "started_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    id: int
    status: str
    reason: str
    message: str
    expected: str
    cluster_job_name: str
    started_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[int] = ..., status: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., expected: _Optional[str] = ..., cluster_job_name: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class UpdateJobStatusesReq(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[UpdateJobStatusReq]
    def __init__(self, items: _Optional[_Iterable[_Union[UpdateJobStatusReq, _Mapping]]] = ...) -> None: ...

class UpdateJobStatusResult(_message.Message):
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

class UpdateJobStatusesResp(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[UpdateJobStatusResult]
    def __init__(self, results: _Optional[_Iterable[_Union[UpdateJobStatusResult, _Mapping]]] = ...) -> None: ...

class GetJobReq(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class DeleteJobReq(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class JobItem(_message.Message):
    __slots__ = ("id", "exp_id", "exp_name", "exp_status", "exp_config", "role", "cluster_name", "exp_type", "task_spec_json", "artifact_path", "priority", "status", "reason", "message", "cluster_job_name", "created_at", "updated_at", "started_at", "finished_at", "aborting_at", "aborted_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    EXP_ID_FIELD_NUMBER: _ClassVar[int]
    EXP_NAME_FIELD_NUMBER: _ClassVar[int]
    EXP_STATUS_FIELD_NUMBER: _ClassVar[int]
    EXP_CONFIG_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    EXP_TYPE_FIELD_NUMBER: _ClassVar[int]
    TASK_SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_PATH_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    ABORTING_AT_FIELD_NUMBER: _ClassVar[int]
    ABORTED_AT_FIELD_NUMBER: _ClassVar[int]
    id: int
    exp_id: int
    exp_name: str
    exp_status: str
    exp_config: str
    role: str
    cluster_name: str
    exp_type: str
    task_spec_json: str
    artifact_path: str
    priority: int
    status: str
    reason: str
    message: str
    cluster_job_name: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    aborting_at: _timestamp_pb2.Timestamp
    aborted_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[int] = ..., exp_id: _Optional[int] = ..., exp_name: _Optional[str] = ..., exp_status: _Optional[str] = ..., exp_config: _Optional[str] = ..., role: _Optional[str] = ..., cluster_name: _Optional[str] = ..., exp_type: _Optional[str] = ..., task_spec_json: _Optional[str] = ..., artifact_path: _Optional[str] = ..., priority: _Optional[int] = ..., status: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., cluster_job_name: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., aborting_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., aborted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class JobCommonResp(_message.Message):
    __slots__ = ("job", "changed", "id")
    JOB_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    job: JobItem
    changed: bool
    id: int
    def __init__(self, job: _Optional[_Union[JobItem, _Mapping]] = ..., changed: _Optional[bool] = ..., id: _Optional[int] = ...) -> None: ...

class ListJobsResp(_message.Message):
    __slots__ = ("jobs", "next_page_token", "skipped")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobItem]
    next_page_token: str
    skipped: _containers.RepeatedCompositeFieldContainer[_common_pb2.SkippedRow]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobItem, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., skipped: _Optional[_Iterable[_Union[_common_pb2.SkippedRow, _Mapping]]] = ...) -> None: ...
