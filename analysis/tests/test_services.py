"""The analysis services and selectors: every create rule, updates through the state machine,
delete, the database cancel, the queue position and the offline work (constant queries)."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.tests.factories import UserFactory
from analysis import selectors, services
from analysis.models import SCRIPT_MAX_BYTES, AnalysisRecord
from analysis.tests.factories import RESULT_ROOT, make_analysis, make_finished_exp
from core.errors import (
    AlreadyExists, Conflict, InvalidTransition, NotFound, TransitionRace, ValidationFailed,
)
from core.domain.statuses import AnalysisStatus, ArtifactStatus, ExpStatus
from experiments.tests.factories import make_exp

pytestmark = pytest.mark.django_db


def create(exp, **overrides):
    kwargs = {"exp_id": exp.pk, "analysis_type": "online", "plugin_name": "summary",
              "creator_email": exp.creator.email, "result_root": RESULT_ROOT}
    kwargs.update(overrides)
    return services.analysis_record_create(**kwargs)


def field_errors(excinfo) -> dict:
    return excinfo.value.errors


# -- create ----------------------------------------------------------------------------------

def test_create_online_sets_path_name_and_no_dedupe_key():
    exp = make_finished_exp()
    record = create(exp, result_root="gs://bucket/prefix/", command="python x.py")
    assert record.status == AnalysisStatus.PENDING
    assert record.result_path == f"gs://bucket/prefix/analysis/{exp.pk}/{record.analysis_id}/"
    assert record.dedupe_key is None
    assert record.name == "summary"
    assert record.artifact_id == exp.artifact.pk
    assert record.analysis_id.startswith("an-")


@pytest.mark.parametrize("overrides, field", [
    ({"name": "x" * 256}, "name"),
    ({"analysis_type": "batch"}, "analysis_type"),
    ({"plugin_name": "", "command": ""}, "plugin_name"),
    ({"plugin_name": "", "command": "   "}, "plugin_name"),
    ({"command": "echo \x00"}, "command"),
    ({"script_content": "a\x00b"}, "script_content"),
    ({"analysis_id": "Not_A_Label"}, "analysis_id"),
    ({"analysis_id": "a" * 41}, "analysis_id"),
    ({"result_root": ""}, "result_root"),
    ({"result_root": "s3://bucket"}, "result_root"),
    ({"creator_email": "nobody@example.com"}, "creator_email"),
    ({"creator_email": ""}, "creator_email"),
])
def test_create_refuses_bad_fields_naming_them(overrides, field):
    exp = make_finished_exp()
    with pytest.raises(ValidationFailed) as info:
        create(exp, **overrides)
    assert field in field_errors(info)
    assert not AnalysisRecord.objects.exists()


def test_script_limit_is_one_mib_in_utf8_bytes():
    exp = make_finished_exp()
    assert create(exp, script_content="a" * SCRIPT_MAX_BYTES).script_bytes == SCRIPT_MAX_BYTES
    with pytest.raises(ValidationFailed) as info:
        create(exp, script_content="a" * (SCRIPT_MAX_BYTES + 1))
    assert str(SCRIPT_MAX_BYTES) in " ".join(field_errors(info)["script_content"])
    # Characters are not bytes: 2-byte characters pass the limit at half the count.
    with pytest.raises(ValidationFailed):
        create(exp, script_content="é" * (SCRIPT_MAX_BYTES // 2 + 1))


def test_create_unknown_experiment_is_not_found():
    user = UserFactory()
    with pytest.raises(NotFound):
        services.analysis_record_create(exp_id=999999, analysis_type="online",
                                        plugin_name="p", creator_email=user.email,
                                        result_root=RESULT_ROOT)


def test_offline_needs_succeeded_experiment_and_artifact():
    with pytest.raises(Conflict, match="Succeeded experiments only"):
        create(make_finished_exp(status=ExpStatus.FAILED, artifact_status=ArtifactStatus.FAILED),
               analysis_type="offline")
    running = make_exp()
    with pytest.raises(Conflict):
        create(running, analysis_type="offline")


def test_online_needs_a_finished_experiment():
    with pytest.raises(Conflict, match="has not finished"):
        create(make_exp(), analysis_type="online")
    for status, artifact in ((ExpStatus.SUCCEEDED, ArtifactStatus.SUCCEEDED),
                             (ExpStatus.FAILED, ArtifactStatus.FAILED),
                             (ExpStatus.ABORTED, None)):
        exp = make_finished_exp(status=status, artifact_status=artifact)
        assert create(exp).status == AnalysisStatus.PENDING


def test_artifact_must_belong_to_the_experiment():
    exp, other = make_finished_exp(), make_finished_exp()
    with pytest.raises(ValidationFailed) as info:
        create(exp, artifact_id=other.artifact.pk)
    assert "artifact_id" in field_errors(info)
    assert create(exp, artifact_id=exp.artifact.pk).artifact_id == exp.artifact.pk


def test_offline_duplicate_is_already_exists_with_the_id():
    exp = make_finished_exp()
    first = create(exp, analysis_type="offline")
    assert first.dedupe_key == f"{exp.artifact.pk}/summary"
    with pytest.raises(AlreadyExists) as info:
        create(exp, analysis_type="offline")
    assert info.value.metadata == {"falcon-analysis-id": first.analysis_id}
    # Online ones are never deduplicated.
    create(exp)
    create(exp)
    assert AnalysisRecord.objects.count() == 3


def test_caller_chosen_id_and_its_retry():
    exp = make_finished_exp()
    record = create(exp, analysis_id="an-mine")
    assert record.analysis_id == "an-mine"
    assert record.result_path.endswith(f"/analysis/{exp.pk}/an-mine/")
    with pytest.raises(AlreadyExists) as info:
        create(exp, analysis_id="an-mine")
    assert info.value.metadata["falcon-analysis-id"] == "an-mine"


# -- update, state machine -------------------------------------------------------------------

def test_status_change_is_one_guarded_transition_with_the_other_columns():
    record = make_analysis()
    row, changed = services.analysis_record_update(
        record.analysis_id, {"status": "running", "attempts": 1,
                             "cluster_object_name": "pod-1"}, expected_status="pending")
    assert changed and row.status == "running" and row.attempts == 1
    assert row.cluster_object_name == "pod-1" and row.started_at is not None
    again, changed = services.analysis_record_update(record.analysis_id, {"status": "running"})
    assert not changed and again.status == "running"
    done, changed = services.analysis_record_update(
        record.analysis_id, {"status": "succeeded", "error_message": ""})
    assert changed and done.finished_at is not None


def test_state_machine_guards():
    record = make_analysis()
    with pytest.raises(InvalidTransition):
        services.analysis_record_update(record.analysis_id, {"status": "succeeded"})
    services.analysis_record_update(record.analysis_id, {"status": "cancelled"})
    for target in ("pending", "running", "failed", "succeeded"):
        with pytest.raises(InvalidTransition):
            services.analysis_record_update(record.analysis_id, {"status": target})
    # Repeating the terminal transition is a no-op.
    row, changed = services.analysis_record_update(record.analysis_id, {"status": "cancelled"})
    assert row.status == "cancelled" and not changed


def test_skipped_is_entered_from_pending_only_and_is_terminal():
    record = make_analysis()
    row, changed = services.analysis_record_update(
        record.analysis_id, {"status": "skipped", "reason": "NoInputs",
                             "error_message": "none of **/*.hlo"}, expected_status="pending")
    assert changed and row.status == "skipped" and row.finished_at and not row.started_at
    for target in ("pending", "running", "failed", "succeeded", "cancelled"):
        with pytest.raises(InvalidTransition):
            services.analysis_record_update(record.analysis_id, {"status": target})
    services.analysis_record_delete(record.analysis_id)  # terminal: may be deleted (asks again)
    running = make_analysis()
    services.analysis_record_update(running.analysis_id, {"status": "running"})
    with pytest.raises(InvalidTransition):
        services.analysis_record_update(running.analysis_id, {"status": "skipped"})


def test_expected_status_race():
    record = make_analysis()
    with pytest.raises(TransitionRace):
        services.analysis_record_update(record.analysis_id, {"status": "failed"},
                                        expected_status="running")
    with pytest.raises(TransitionRace):
        services.analysis_record_update(record.analysis_id, {"reason": "X"},
                                        expected_status="running")


def test_update_without_status_writes_only_allowed_columns():
    record = make_analysis()
    row, changed = services.analysis_record_update(
        record.analysis_id, {"reason": "Queued", "error_message": "waiting", "attempts": 2})
    assert not changed and row.status == "pending"
    assert (row.reason, row.message, row.attempts) == ("Queued", "waiting", 2)
    with pytest.raises(ValidationFailed) as info:
        services.analysis_record_update(record.analysis_id, {"name": "x"})
    assert "name" in info.value.errors
    with pytest.raises(ValidationFailed):
        services.analysis_record_update(record.analysis_id, {"attempts": -1})
    with pytest.raises(NotFound):
        services.analysis_record_update("an-missing", {"reason": "X"})


# -- delete and cancel -----------------------------------------------------------------------

def test_delete_terminal_only():
    record = make_analysis()
    with pytest.raises(Conflict):
        services.analysis_record_delete(record.analysis_id)
    services.analysis_cancel_in_db(record.analysis_id)
    services.analysis_record_delete(record.analysis_id)
    assert not AnalysisRecord.objects.exists()
    with pytest.raises(NotFound):
        services.analysis_record_delete(record.analysis_id)


def test_cancel_in_db_is_guarded_and_idempotent():
    record = make_analysis()
    row = services.analysis_cancel_in_db(record.analysis_id, actor=record.creator)
    assert row.status == "cancelled" and row.reason == "Cancelled" and row.finished_at
    again = services.analysis_cancel_in_db(record.analysis_id)
    assert again.status == "cancelled" and again.finished_at == row.finished_at
    with pytest.raises(NotFound):
        services.analysis_cancel_in_db("an-missing")


# -- selectors -------------------------------------------------------------------------------

def test_queue_position_counts_pending_of_the_same_type_before():
    exp = make_finished_exp()
    online = [create(exp) for _ in range(3)]
    offline = create(exp, analysis_type="offline")
    assert [selectors.queue_position(r) for r in online] == [1, 2, 3]
    assert selectors.queue_position(offline) == 1
    services.analysis_record_update(online[0].analysis_id, {"status": "running"})
    online[0].refresh_from_db()
    assert selectors.queue_position(online[0]) is None
    assert selectors.queue_position(online[2]) == 2
    with CaptureQueriesContext(connection) as queries:
        selectors.queue_position(online[2])
    assert len(queries) == 1


def test_list_filters():
    exp = make_finished_exp()
    a = create(exp, plugin_name="p1")
    b = create(exp, analysis_type="offline", plugin_name="p2")
    make_analysis()
    assert list(selectors.analysis_list(filters={"exp": [exp.pk]})) == [a, b]
    assert list(selectors.analysis_list(filters={"plugin": ["p2"]})) == [b]
    assert list(selectors.analysis_list(filters={"analysis_type": ["online"],
                                                 "exp": [exp.pk]})) == [a]


PLUGINS = [("summary", ["profiling"]), ("trace", ["profiling", "benchmark"])]


def test_awaiting_only_succeeded_of_mapped_types_without_offline_record():
    done = make_finished_exp()
    make_finished_exp(exp_type="training")  # no plugin maps this type
    make_finished_exp(status=ExpStatus.FAILED, artifact_status=ArtifactStatus.FAILED)
    make_exp()  # running
    triples = selectors.exps_awaiting_analysis(limit=0, plugins=PLUGINS)
    assert [(t.experiment.pk, t.plugin_name) for t in triples] == [
        (done.pk, "summary"), (done.pk, "trace")]
    # An offline record excludes its plugin, whatever its status; an online one does not.
    record = create(done, analysis_type="offline", plugin_name="summary")
    services.analysis_cancel_in_db(record.analysis_id)
    create(done, analysis_type="online", plugin_name="trace")
    triples = selectors.exps_awaiting_analysis(limit=0, plugins=PLUGINS)
    assert [(t.experiment.pk, t.plugin_name) for t in triples] == [(done.pk, "trace")]


def test_awaiting_order_and_limit():
    exps = [make_finished_exp() for _ in range(3)]
    triples = selectors.exps_awaiting_analysis(limit=4, plugins=PLUGINS)
    assert [(t.experiment.pk, t.plugin_name) for t in triples] == [
        (exps[0].pk, "summary"), (exps[0].pk, "trace"),
        (exps[1].pk, "summary"), (exps[1].pk, "trace")]
    with pytest.raises(ValidationFailed):
        selectors.exps_awaiting_analysis(limit=1001, plugins=PLUGINS)
    with pytest.raises(ValidationFailed):
        selectors.exps_awaiting_analysis(limit=1, plugins=[("", ["x"])])


def _bulk_succeeded_exps(count: int) -> None:
    """`count` Succeeded experiments with Succeeded artifacts, written in bulk (fast)."""
    from django.utils import timezone

    from artifacts.models import Artifact
    from experiments.models import Experiment

    creator = UserFactory()
    now = timezone.now()
    exps = Experiment.objects.bulk_create([
        Experiment(name=f"bulk-{i}", creator=creator, cluster_name="local",
                   exp_type="profiling", role_to_task_spec={}, status=ExpStatus.SUCCEEDED,
                   finished_at=now) for i in range(count)])
    if not all(e.pk for e in exps):  # backends that do not return ids
        exps = list(Experiment.objects.filter(name__startswith="bulk-"))
    # Marked for offline discovery, as the transitions to Succeeded mark them.
    Artifact.objects.bulk_create([
        Artifact(experiment=e, path=f"file:///tmp/{e.pk}", artifact_type="profiling",
                 status=ArtifactStatus.SUCCEEDED, offline_settled="") for e in exps])


@pytest.mark.parametrize("count", [50, 500])
def test_awaiting_query_count_is_constant(count, django_assert_num_queries):
    _bulk_succeeded_exps(count)
    # The candidates (two walks of the mark's index), one query a plugin, the experiments'
    # ends, the triples chosen (artifacts, experiments, creators).
    with django_assert_num_queries(2 + len(PLUGINS) + 4):
        triples = selectors.exps_awaiting_analysis(limit=1000, plugins=PLUGINS)
        assert len(triples) == min(1000, 2 * count)
        [t.experiment.creator.email for t in triples]
