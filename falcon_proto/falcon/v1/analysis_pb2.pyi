import datetime

from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PluginArtifactTypes(_message.Message):
    __slots__ = ("plugin_name", "artifact_types")
    PLUGIN_NAME_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_TYPES_FIELD_NUMBER: _ClassVar[int]
    plugin_name: str
    artifact_types: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, plugin_name: _Optional[str] = ..., artifact_types: _Optional[_Iterable[str]] = ...) -> None: ...

class ListExpsAwaitingAnalysisReq(_message.Message):
    __slots__ = ("limit", "plugins")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PLUGINS_FIELD_NUMBER: _ClassVar[int]
    limit: int
    plugins: _containers.RepeatedCompositeFieldContainer[PluginArtifactTypes]
    def __init__(self, limit: _Optional[int] = ..., plugins: _Optional[_Iterable[_Union[PluginArtifactTypes, _Mapping]]] = ...) -> None: ...

class ExpAwaiting(_message.Message):
    __slots__ = ("exp_id", "exp_name", "exp_type", "creator_email", "artifact_id", "artifact_path", "artifact_type", "plugin_name", "finished_at")
    EXP_ID_FIELD_NUMBER: _ClassVar[int]
    EXP_NAME_FIELD_NUMBER: _ClassVar[int]
    EXP_TYPE_FIELD_NUMBER: _ClassVar[int]
    CREATOR_EMAIL_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_PATH_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_TYPE_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_NAME_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    exp_id: int
    exp_name: str
    exp_type: str
    creator_email: str
    artifact_id: int
    artifact_path: str
    artifact_type: str
    plugin_name: str
    finished_at: _timestamp_pb2.Timestamp
    def __init__(self, exp_id: _Optional[int] = ..., exp_name: _Optional[str] = ..., exp_type: _Optional[str] = ..., creator_email: _Optional[str] = ..., artifact_id: _Optional[int] = ..., artifact_path: _Optional[str] = ..., artifact_type: _Optional[str] = ..., plugin_name: _Optional[str] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListExpsAwaitingAnalysisResp(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ExpAwaiting]
    def __init__(self, items: _Optional[_Iterable[_Union[ExpAwaiting, _Mapping]]] = ...) -> None: ...

class AnalysisRecord(_message.Message):
    __slots__ = ("analysis_id", "name", "exp_id", "analysis_type", "plugin_name", "status", "result_path", "error_message", "command", "script_content", "script_bytes", "artifact_id", "artifact_path", "artifact_type", "creator_email", "attempts", "cluster_object_name", "reason", "created_at", "updated_at", "started_at", "finished_at", "script_name")
    ANALYSIS_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXP_ID_FIELD_NUMBER: _ClassVar[int]
    ANALYSIS_TYPE_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESULT_PATH_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    SCRIPT_CONTENT_FIELD_NUMBER: _ClassVar[int]
    SCRIPT_BYTES_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_PATH_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_TYPE_FIELD_NUMBER: _ClassVar[int]
    CREATOR_EMAIL_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_OBJECT_NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    SCRIPT_NAME_FIELD_NUMBER: _ClassVar[int]
    analysis_id: str
    name: str
    exp_id: int
    analysis_type: str
    plugin_name: str
    status: str
    result_path: str
    error_message: str
    command: str
    script_content: str
    script_bytes: int
    artifact_id: int
    artifact_path: str
    artifact_type: str
    creator_email: str
    attempts: int
    cluster_object_name: str
    reason: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    script_name: str
    def __init__(self, analysis_id: _Optional[str] = ..., name: _Optional[str] = ..., exp_id: _Optional[int] = ..., analysis_type: _Optional[str] = ..., plugin_name: _Optional[str] = ..., status: _Optional[str] = ..., result_path: _Optional[str] = ..., error_message: _Optional[str] = ..., command: _Optional[str] = ..., script_content: _Optional[str] = ..., script_bytes: _Optional[int] = ..., artifact_id: _Optional[int] = ..., artifact_path: _Optional[str] = ..., artifact_type: _Optional[str] = ..., creator_email: _Optional[str] = ..., attempts: _Optional[int] = ..., cluster_object_name: _Optional[str] = ..., reason: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., script_name: _Optional[str] = ...) -> None: ...

class CreateAnalysisRecordReq(_message.Message):
    __slots__ = ("name", "exp_id", "analysis_type", "plugin_name", "command", "script_content", "artifact_id", "creator_email", "result_root", "analysis_id", "script_name", "plugin_artifact_types")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXP_ID_FIELD_NUMBER: _ClassVar[int]
    ANALYSIS_TYPE_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_NAME_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    SCRIPT_CONTENT_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    CREATOR_EMAIL_FIELD_NUMBER: _ClassVar[int]
    RESULT_ROOT_FIELD_NUMBER: _ClassVar[int]
    ANALYSIS_ID_FIELD_NUMBER: _ClassVar[int]
    SCRIPT_NAME_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_ARTIFACT_TYPES_FIELD_NUMBER: _ClassVar[int]
    name: str
    exp_id: int
    analysis_type: str
    plugin_name: str
    command: str
    script_content: str
    artifact_id: int
    creator_email: str
    result_root: str
    analysis_id: str
    script_name: str
    plugin_artifact_types: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., exp_id: _Optional[int] = ..., analysis_type: _Optional[str] = ..., plugin_name: _Optional[str] = ..., command: _Optional[str] = ..., script_content: _Optional[str] = ..., artifact_id: _Optional[int] = ..., creator_email: _Optional[str] = ..., result_root: _Optional[str] = ..., analysis_id: _Optional[str] = ..., script_name: _Optional[str] = ..., plugin_artifact_types: _Optional[_Iterable[str]] = ...) -> None: ...

class GetAnalysisRecordReq(_message.Message):
    __slots__ = ("analysis_id", "with_script")
    ANALYSIS_ID_FIELD_NUMBER: _ClassVar[int]
    WITH_SCRIPT_FIELD_NUMBER: _ClassVar[int]
    analysis_id: str
    with_script: bool
    def __init__(self, analysis_id: _Optional[str] = ..., with_script: _Optional[bool] = ...) -> None: ...

class ListAnalysisRecordsReq(_message.Message):
    __slots__ = ("exp_id", "statuses", "analysis_type", "page_size", "page_token")
    EXP_ID_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    ANALYSIS_TYPE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    exp_id: int
    statuses: _containers.RepeatedScalarFieldContainer[str]
    analysis_type: str
    page_size: int
    page_token: str
    def __init__(self, exp_id: _Optional[int] = ..., statuses: _Optional[_Iterable[str]] = ..., analysis_type: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListAnalysisRecordsResp(_message.Message):
    __slots__ = ("records", "next_page_token")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[AnalysisRecord]
    next_page_token: str
    def __init__(self, records: _Optional[_Iterable[_Union[AnalysisRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateAnalysisRecordReq(_message.Message):
    __slots__ = ("analysis_id", "record", "update_mask", "expected_status")
    ANALYSIS_ID_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_STATUS_FIELD_NUMBER: _ClassVar[int]
    analysis_id: str
    record: AnalysisRecord
    update_mask: _field_mask_pb2.FieldMask
    expected_status: str
    def __init__(self, analysis_id: _Optional[str] = ..., record: _Optional[_Union[AnalysisRecord, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ..., expected_status: _Optional[str] = ...) -> None: ...

class AnalysisRecordResp(_message.Message):
    __slots__ = ("record", "changed")
    RECORD_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    record: AnalysisRecord
    changed: bool
    def __init__(self, record: _Optional[_Union[AnalysisRecord, _Mapping]] = ..., changed: _Optional[bool] = ...) -> None: ...

class DeleteAnalysisRecordReq(_message.Message):
    __slots__ = ("analysis_id",)
    ANALYSIS_ID_FIELD_NUMBER: _ClassVar[int]
    analysis_id: str
    def __init__(self, analysis_id: _Optional[str] = ...) -> None: ...

class DeleteAnalysisRecordResp(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListRunningAnalysesReq(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ResourceOverride(_message.Message):
    __slots__ = ("cpu_request", "cpu_limit", "memory_request", "memory_limit")
    CPU_REQUEST_FIELD_NUMBER: _ClassVar[int]
    CPU_LIMIT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_REQUEST_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    cpu_request: str
    cpu_limit: str
    memory_request: str
    memory_limit: str
    def __init__(self, cpu_request: _Optional[str] = ..., cpu_limit: _Optional[str] = ..., memory_request: _Optional[str] = ..., memory_limit: _Optional[str] = ...) -> None: ...

class CreateAnalysisReq(_message.Message):
    __slots__ = ("name", "exp_id", "analysis_type", "plugin_name", "command", "script_content", "resource_override", "creator_email", "script_name", "analysis_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXP_ID_FIELD_NUMBER: _ClassVar[int]
    ANALYSIS_TYPE_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_NAME_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    SCRIPT_CONTENT_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_OVERRIDE_FIELD_NUMBER: _ClassVar[int]
    CREATOR_EMAIL_FIELD_NUMBER: _ClassVar[int]
    SCRIPT_NAME_FIELD_NUMBER: _ClassVar[int]
    ANALYSIS_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    exp_id: int
    analysis_type: str
    plugin_name: str
    command: str
    script_content: str
    resource_override: ResourceOverride
    creator_email: str
    script_name: str
    analysis_id: str
    def __init__(self, name: _Optional[str] = ..., exp_id: _Optional[int] = ..., analysis_type: _Optional[str] = ..., plugin_name: _Optional[str] = ..., command: _Optional[str] = ..., script_content: _Optional[str] = ..., resource_override: _Optional[_Union[ResourceOverride, _Mapping]] = ..., creator_email: _Optional[str] = ..., script_name: _Optional[str] = ..., analysis_id: _Optional[str] = ...) -> None: ...

class CreateAnalysisResp(_message.Message):
    __slots__ = ("analysis_id", "record")
    ANALYSIS_ID_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    analysis_id: str
    record: AnalysisRecord
    def __init__(self, analysis_id: _Optional[str] = ..., record: _Optional[_Union[AnalysisRecord, _Mapping]] = ...) -> None: ...

class CancelAnalysisReq(_message.Message):
    __slots__ = ("analysis_id", "requester_email")
    ANALYSIS_ID_FIELD_NUMBER: _ClassVar[int]
    REQUESTER_EMAIL_FIELD_NUMBER: _ClassVar[int]
    analysis_id: str
    requester_email: str
    def __init__(self, analysis_id: _Optional[str] = ..., requester_email: _Optional[str] = ...) -> None: ...

class CancelAnalysisResp(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: AnalysisRecord
    def __init__(self, record: _Optional[_Union[AnalysisRecord, _Mapping]] = ...) -> None: ...

class DeleteAnalysisReq(_message.Message):
    __slots__ = ("analysis_id", "purge_gcs")
    ANALYSIS_ID_FIELD_NUMBER: _ClassVar[int]
    PURGE_GCS_FIELD_NUMBER: _ClassVar[int]
    analysis_id: str
    purge_gcs: bool
    def __init__(self, analysis_id: _Optional[str] = ..., purge_gcs: _Optional[bool] = ...) -> None: ...

class DeleteAnalysisResp(_message.Message):
    __slots__ = ("purged_files",)
    PURGED_FILES_FIELD_NUMBER: _ClassVar[int]
    purged_files: int
    def __init__(self, purged_files: _Optional[int] = ...) -> None: ...

class GetAnalysisLogsReq(_message.Message):
    __slots__ = ("analysis_id", "offset", "limit_bytes")
    ANALYSIS_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    analysis_id: str
    offset: int
    limit_bytes: int
    def __init__(self, analysis_id: _Optional[str] = ..., offset: _Optional[int] = ..., limit_bytes: _Optional[int] = ...) -> None: ...

class GetAnalysisLogsResp(_message.Message):
    __slots__ = ("content", "next_offset", "complete", "note")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    content: bytes
    next_offset: int
    complete: bool
    note: str
    def __init__(self, content: _Optional[bytes] = ..., next_offset: _Optional[int] = ..., complete: _Optional[bool] = ..., note: _Optional[str] = ...) -> None: ...

class ListPluginsReq(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Plugin(_message.Message):
    __slots__ = ("name", "description", "command", "artifact_types", "resources", "timeout_seconds")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_TYPES_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    command: str
    artifact_types: _containers.RepeatedScalarFieldContainer[str]
    resources: ResourceOverride
    timeout_seconds: int
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., command: _Optional[str] = ..., artifact_types: _Optional[_Iterable[str]] = ..., resources: _Optional[_Union[ResourceOverride, _Mapping]] = ..., timeout_seconds: _Optional[int] = ...) -> None: ...

class ListPluginsResp(_message.Message):
    __slots__ = ("plugins",)
    PLUGINS_FIELD_NUMBER: _ClassVar[int]
    plugins: _containers.RepeatedCompositeFieldContainer[Plugin]
    def __init__(self, plugins: _Optional[_Iterable[_Union[Plugin, _Mapping]]] = ...) -> None: ...

class GetPluginReq(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...
