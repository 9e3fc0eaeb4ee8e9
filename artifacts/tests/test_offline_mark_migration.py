"""Migration 0003 marks the artifacts that may owe offline analysis, and only those."""
from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("artifacts", "0002_manifest_pruned")]
AFTER = [("artifacts", "0003_offline_settled")]


@pytest.mark.django_db(transaction=True)
def test_backfill_marks_succeeded_kept_artifacts_of_succeeded_experiments():
    from accounts.models import User
    from experiments.models import Experiment

    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)  # artifacts only: the other apps stay at their latest
    Artifact = executor.loader.project_state(BEFORE).apps.get_model("artifacts", "Artifact")
    user = User.objects.create(user_id="m1", email="m1@example.com")
    cases = {  # name: (experiment status, artifact status, prune state, marked)
        "owes": ("Succeeded", "Succeeded", "", True),
        "pruned": ("Succeeded", "Succeeded", "Pruned", False),
        "failed-artifact": ("Succeeded", "Failed", "", False),
        "running": ("Running", "Created", "", False),
    }
    for name, (exp_status, artifact_status, prune, _) in cases.items():
        exp = Experiment.objects.create(name=name, creator=user, cluster_name="local",
                                        exp_type="profiling", role_to_task_spec={},
                                        status=exp_status)
        Artifact.objects.create(experiment_id=exp.pk, path=f"file:///tmp/{name}",
                                artifact_type="profiling", status=artifact_status,
                                prune_state=prune)
    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    from artifacts.models import Artifact as Current

    marks = dict(Current.objects.values_list("experiment__name", "offline_settled"))
    assert marks == {name: ("" if marked else None)
                     for name, (_, _, _, marked) in cases.items()}
