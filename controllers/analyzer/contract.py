"""What the analyzer controller sees of analysis records: frozen views and the record calls.

`AnalysisRecordAPI` is the contract of the API server's AnalysisRecordService
(protos/falcon/v1/analysis.proto) as the controller uses it;
`controllers.analyzer.grpc_client.GrpcAnalysisRecordAPI` implements it over gRPC, and tests use an
in-memory double. No Django imports: plain data across the boundary.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from core.errors import AlreadyExists
from core.domain.statuses import AnalysisStatus

# The statuses as the enum (`core.domain.statuses.AnalysisStatus`), named for this package's callers.
PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED, SKIPPED = (
    AnalysisStatus.PENDING, AnalysisStatus.RUNNING, AnalysisStatus.SUCCEEDED,
    AnalysisStatus.FAILED, AnalysisStatus.CANCELLED, AnalysisStatus.SKIPPED)
TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED, SKIPPED})
OFFLINE, ONLINE = "offline", "online"
QUEUES = (OFFLINE, ONLINE)
# UpdateAnalysisRecord's writable paths (analysis.proto, UpdateAnalysisRecordReq).
WRITABLE_FIELDS = frozenset({"status", "reason", "error_message", "attempts",
                             "cluster_object_name"})


# The trailing-metadata key of the existing record's id in an ALREADY_EXISTS answer
# (`core.errors.AlreadyExists.metadata`).
ANALYSIS_ID_KEY = "falcon-analysis-id"


def existing_analysis_id(exc: AlreadyExists) -> str:
    """The existing record's id an ALREADY_EXISTS answer named ("" when it named none)."""
    return exc.metadata.get(ANALYSIS_ID_KEY, "")


@dataclass(frozen=True)
class AnalysisView:
    """An analysis record (falcon.v1.AnalysisRecord) as the controller sees it.

    `script_content` is filled only by `get_record(..., with_script=True)`; `script_bytes` is
    its size in bytes everywhere; `script_name` the file name it is also saved under ("" for
    `script` only).
    """

    analysis_id: str
    exp_id: int
    analysis_type: str
    status: AnalysisStatus
    result_path: str
    name: str = ""
    plugin_name: str = ""
    error_message: str = ""
    command: str = ""
    script_content: str = ""
    script_bytes: int = 0
    script_name: str = ""
    artifact_id: int = 0
    artifact_path: str = ""
    artifact_type: str = ""
    creator_email: str = ""
    attempts: int = 0
    cluster_object_name: str = ""
    reason: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def terminal(self) -> bool:
        """Whether the status is succeeded, failed, cancelled or skipped."""
        return self.status in TERMINAL


@dataclass(frozen=True)
class AwaitingView:
    """One (experiment, artifact, plugin) triple of ListExpsAwaitingAnalysis."""

    exp_id: int
    exp_name: str
    exp_type: str
    creator_email: str
    artifact_id: int
    artifact_path: str
    artifact_type: str
    plugin_name: str
    finished_at: datetime | None = None


@dataclass(frozen=True)
class PluginView:
    """A catalog entry as AnalyzerService shows it.

    `resources` maps cpu_request, cpu_limit, memory_request, memory_limit to Kubernetes
    quantities; `timeout_seconds` is the run's time limit in seconds.
    """

    name: str
    description: str
    command: str
    artifact_types: tuple[str, ...]
    resources: dict[str, str]
    timeout_seconds: int


class AnalysisRecordAPI(Protocol):
    """The AnalysisRecordService calls of the analyzer controller. Lists follow page tokens.

    Errors are `core.errors.FalconError` subclasses rebuilt from the gRPC status: NotFound,
    ValidationFailed, Conflict (FAILED_PRECONDITION), TransitionRace (ABORTED: the record was not
    in `expected_status`), AlreadyExists, and ApiUnavailable (retryable) for an unreachable server.
    """

    def list_awaiting(self, plugins: dict[str, tuple[str, ...]],
                      limit: int = 100) -> list[AwaitingView]: ...

    def create_record(self, *, exp_id: int, analysis_type: str, result_root: str,
                      plugin_name: str = "", command: str = "", script_content: str = "",
                      artifact_id: int = 0, creator_email: str = "", name: str = "",
                      analysis_id: str = "", script_name: str = "",
                      plugin_artifact_types: tuple[str, ...] = ()) -> AnalysisView: ...

    def get_record(self, analysis_id: str, with_script: bool = False) -> AnalysisView: ...

    def list_records(self, *, statuses: tuple[str, ...] = (), exp_id: int = 0,
                     analysis_type: str = "") -> list[AnalysisView]: ...

    def list_running(self) -> list[AnalysisView]: ...

    def update_record(self, analysis_id: str, *, expected_status: str | None = None,
                      **fields) -> AnalysisView: ...

    def delete_record(self, analysis_id: str) -> None: ...
