"""The analysis filters of every list: HTTP `GET /api/v1/analyses`, gRPC ListAnalysisRecords and
ListRunningAnalyses, and the admin's changelist (docs/analyzer.md, "HTTP API").

gRPC's ListAnalysisRecordsReq fields map onto these names in `analysis.grpc.record_servicer`
(`exp_id` -> `exp`, `statuses` -> `status`, `analysis_type`).
"""
from __future__ import annotations

from core.http.filters import ChoiceListFilter, FalconFilterSet, IdListFilter, MultiValueFilter
from core.domain.statuses import AnalysisStatus, AnalysisType, choices

from .models import AnalysisRecord


class AnalysisFilter(FalconFilterSet):
    """Analyses matching every filter given; a multi-value filter keeps any of its values.

    Filters: `status` (pending, running, succeeded, failed, cancelled), `analysis_type`
    (offline, online), `plugin` (plugin names), `exp` (experiment ids), each repeated or a
    comma list.

    Raises (from `validate`):
        ValidationFailed: a status or type is unknown, an id is not a positive integer, or a
            name is over 255 characters; keyed by the filter's name.
    """

    status = ChoiceListFilter(choices=choices(AnalysisStatus),
                              help_text="Only analyses in these statuses.")
    analysis_type = ChoiceListFilter(choices=choices(AnalysisType),
                                     help_text="Only offline or only online analyses.")
    plugin = MultiValueFilter(field_name="plugin_name",
                              help_text="Only analyses by these plugins.")
    exp = IdListFilter(field_name="experiment_id",
                       help_text="Only the analyses of these experiments.")

    class Meta:
        model = AnalysisRecord
        fields: list[str] = []
