"""The names of the falcon.v1 services the API server registers, read from the protos.

Its own module so that the server (which registers them) and the interceptor (whose metrics count
their methods) both read it without importing each other.
"""
from __future__ import annotations

from falcon_proto.falcon.v1 import (
    analysis_pb2, artifact_pb2, experiment_pb2, history_pb2, job_pb2, schedule_pb2,
)

SERVICE_NAMES = (
    experiment_pb2.DESCRIPTOR.services_by_name["ExperimentService"].full_name,
    job_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
    artifact_pb2.DESCRIPTOR.services_by_name["ArtifactService"].full_name,
    analysis_pb2.DESCRIPTOR.services_by_name["AnalysisRecordService"].full_name,
    history_pb2.DESCRIPTOR.services_by_name["HistoryService"].full_name,
    schedule_pb2.DESCRIPTOR.services_by_name["ScheduleService"].full_name,
)
