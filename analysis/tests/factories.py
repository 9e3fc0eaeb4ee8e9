"""Factories for analyses: finished experiments built through the services, records through
`analysis_record_create`, as production does."""
from __future__ import annotations

import factory

from accounts.tests.factories import UserFactory
from analysis.models import AnalysisRecord
from analysis.services import analysis_record_create
from artifacts.services import artifact_update_status
from core.domain.statuses import ArtifactStatus, ExpStatus
from experiments.services import exp_update_status
from experiments.tests.factories import make_exp
from jobs.models import Job
from jobs.services import job_update_status

RESULT_ROOT = "file:///tmp/falcon-analysis-tests"


def finish_exp(exp, *, status: str = ExpStatus.SUCCEEDED,
               artifact_status: str = ArtifactStatus.SUCCEEDED):
    """Move `exp` (from `make_exp`) to `status` through its state machines; return it fresh."""
    for job in Job.objects.filter(experiment=exp):
        job_update_status(job_id=job.pk, status="Running")
        if status in (ExpStatus.SUCCEEDED, ExpStatus.FAILED):
            job_update_status(job_id=job.pk, status=status)
    if artifact_status is not None and status != ExpStatus.ABORTED:
        artifact_update_status(artifact_id=exp.artifact.pk, status=artifact_status)
    if status == ExpStatus.ABORTED:
        exp_update_status(exp_id=exp.pk, status=ExpStatus.ABORTING)
    elif status != ExpStatus.RUNNING:
        exp_update_status(exp_id=exp.pk, status=ExpStatus.RUNNING)
    if status != ExpStatus.RUNNING:
        exp_update_status(exp_id=exp.pk, status=status)
    exp.refresh_from_db()
    return exp


def make_finished_exp(*, creator=None, status: str = ExpStatus.SUCCEEDED,
                      artifact_status: str = ArtifactStatus.SUCCEEDED, **kwargs):
    """An experiment through CreateExp, then finished in `status` with its artifact."""
    return finish_exp(make_exp(creator=creator, **kwargs), status=status,
                      artifact_status=artifact_status)


class AnalysisRecordFactory(factory.Factory):
    """A record through `analysis_record_create` (offline by default, plugin `summary`).

    Pass `exp=` an experiment (default: a new Succeeded one) and any create argument.
    """

    class Meta:
        model = AnalysisRecord

    exp = factory.LazyFunction(make_finished_exp)
    analysis_type = "offline"
    plugin_name = "summary"
    command = ""
    script_content = ""
    name = ""
    result_root = RESULT_ROOT

    @classmethod
    def _create(cls, model_class, *, exp, creator=None, **kwargs):
        creator = creator or exp.creator
        return analysis_record_create(exp_id=exp.pk, creator_email=creator.email, **kwargs)

    _build = _create


def make_analysis(**kwargs) -> AnalysisRecord:
    """Create one record (see `AnalysisRecordFactory`)."""
    return AnalysisRecordFactory(**kwargs)


__all__ = ["AnalysisRecordFactory", "RESULT_ROOT", "UserFactory", "finish_exp",
           "make_analysis", "make_finished_exp"]
