"""A list row, rendered as JSON by the database, is what the documented serializer gives.

`selectors.exp_list_rows` asks SQLite or MariaDB for each row's JSON text
(`core.http.jsonrows`); `ExpListItemSerializer` documents the same row in the OpenAPI schema.
These check that both agree value for value on the awkward cases: date-times with and
without a fraction, NULLs, names and messages that need JSON escaping, labels, several
roles, an artifact manifest.
"""
from __future__ import annotations

from datetime import datetime, timezone

import orjson
import pytest
from django.db import connection
from django.db.models import F

from artifacts.models import Artifact
from core.http.jsonrows import IsoUTC, JsonObject, json_row
from experiments.api.serializers import ExpListItemSerializer, utc_iso
from experiments.models import Experiment
from experiments.tests.factories import make_exp
from jobs.models import Job


def _expected(exp_id: int) -> dict:
    """The serializer's row, through JSON as a client receives it."""
    exp = (Experiment.objects.select_related("creator", "artifact").defer("config")
           .get(pk=exp_id))
    exp.jobs_sorted = list(exp.jobs.order_by("role"))
    data = ExpListItemSerializer(exp).data
    data["jobs"] = [dict(job) for job in
                    ExpListItemSerializer().fields["jobs"].to_representation(exp.jobs_sorted)]
    return orjson.loads(orjson.dumps(data))


@pytest.mark.django_db
def test_list_rows_equal_the_serializer_on_awkward_values(auth_api, user):
    plain = make_exp(creator=user, name="plain")
    tricky = make_exp(creator=user, name="tricky", roles=("worker", "main", "eval"))
    Experiment.objects.filter(pk=tricky.pk).update(
        message='line 1\nline 2\t"quoted" \\ \x01 ünï 😀 end', reason="Evicted",
        labels={"team": "infra", "example.com/owner": "a-b_c.d"},
        started_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc),  # no fraction
        finished_at=datetime(2026, 1, 2, 3, 4, 6, 789, tzinfo=timezone.utc),
        cloned_from=plain.pk, priority=7)
    Job.objects.filter(experiment=tricky, role="main").update(
        cluster_job_name="falcon-1-main", started_at=datetime(2026, 1, 2, 3, 4, 5, 1,
                                                              tzinfo=timezone.utc))
    Artifact.objects.filter(experiment=tricky).update(
        finished_at=datetime(2030, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc))

    res = auth_api.get("/api/v1/exps?ordering=created_at")
    assert res.status_code == 200
    rows = {row["id"]: row for row in res.json()["results"]}
    for exp in (plain, tricky):
        assert rows[exp.pk] == _expected(exp.pk)
    assert [job["role"] for job in rows[tricky.pk]["jobs"]] == ["eval", "main", "worker"]
    assert rows[tricky.pk]["started_at"] == "2026-01-02T03:04:05Z"
    assert rows[tricky.pk]["finished_at"] == "2026-01-02T03:04:06.000789Z"


@pytest.mark.django_db
def test_an_experiment_without_an_artifact_row_has_no_artifact_key(auth_api, user):
    exp = make_exp(creator=user, name="no-artifact")
    Artifact.objects.filter(experiment=exp).delete()
    row = auth_api.get("/api/v1/exps").json()["results"][0]
    expected = _expected(exp.pk)
    assert expected.pop("artifact") is None  # the serializer writes a null; the list, no key
    assert "artifact" not in row and row == expected


@pytest.mark.django_db
@pytest.mark.parametrize("moment", [
    datetime(2026, 12, 1, 18, 52, 44, 516012, tzinfo=timezone.utc),
    datetime(2026, 12, 1, 18, 52, 44, tzinfo=timezone.utc),
    datetime(1970, 1, 1, tzinfo=timezone.utc),
    datetime(9999, 12, 31, 23, 59, 59, 1, tzinfo=timezone.utc),
])
def test_iso_utc_formats_as_the_serializers_do(user, moment):
    exp = make_exp(creator=user)
    Experiment.objects.filter(pk=exp.pk).update(started_at=moment)
    text = (Experiment.objects.filter(pk=exp.pk)
            .values_list(IsoUTC(F("started_at")), flat=True).get())
    assert text == utc_iso(moment)


@pytest.mark.django_db
def test_json_row_renders_null_json_and_numbers(user):
    exp = make_exp(creator=user)
    row = (Experiment.objects.filter(pk=exp.pk)
           .values_list(json_row(Experiment, ["id", "labels", "finished_at", "priority"]),
                        flat=True).get())
    assert orjson.loads(row) == {"id": exp.pk, "labels": {}, "finished_at": None,
                                 "priority": -1}


def test_json_object_keys_must_be_identifiers():
    with pytest.raises(ValueError, match="lower-case identifiers"):
        JsonObject({"bad key": F("id")})


@pytest.mark.django_db
def test_the_page_query_binds_only_ids(auth_api, user, django_assert_max_num_queries):
    """The row query (experiments with their jobs and artifacts) is compiled once and binds
    the page's ids alone (no JSON keys as parameters), so `core.database.prepared.IdsQuery` can reuse
    it."""
    from experiments import selectors

    make_exp(creator=user)
    assert selectors._exp_rows(("id", "role"), ("id", "path"))._compile(connection.alias, 4)


@pytest.mark.django_db
def test_the_largest_experiment_lists_every_job_whole(auth_api, user):
    """64 roles (`MAX_ROLES`) with long values: the jobs array is one aggregate of their JSON
    (GROUP_CONCAT on MySQL and MariaDB, which cuts at `group_concat_max_len`), and no job is
    cut off."""
    from jobs.specs import MAX_ROLES

    roles = [f"role-{i:02d}-" + "r" * 40 for i in range(MAX_ROLES)]
    exp = make_exp(creator=user, name="many-roles", roles=tuple(reversed(roles)))
    Job.objects.filter(experiment=exp).update(cluster_job_name="j" * 200, reason="R" * 200)
    row = auth_api.get("/api/v1/exps").json()["results"][0]
    assert len(orjson.dumps(row["jobs"])) > 16 * 1024  # far above MySQL's default of 1,024
    assert [job["role"] for job in row["jobs"]] == sorted(roles)
    assert row == _expected(exp.pk)


@pytest.mark.django_db
def test_an_experiment_deleted_between_the_two_page_queries_is_left_out(user):
    from experiments import selectors
    from experiments.api.serializers import ARTIFACT_SUMMARY_FIELDS, JOB_SUMMARY_FIELDS

    kept, gone = make_exp(creator=user, name="kept"), make_exp(creator=user, name="gone")
    ids = [gone.pk, kept.pk]
    gone.delete()
    rows = selectors.exp_list_rows(ids, job_fields=JOB_SUMMARY_FIELDS,
                                   artifact_fields=ARTIFACT_SUMMARY_FIELDS)
    assert [orjson.loads(orjson.dumps(row))["id"] for row in rows] == [kept.pk]


@pytest.mark.skipif(connection.vendor != "mysql", reason="a MySQL/MariaDB session variable")
@pytest.mark.django_db
def test_every_mysql_connection_raises_group_concat_max_len():
    from django.conf import settings

    with connection.cursor() as cursor:
        cursor.execute("SELECT @@SESSION.group_concat_max_len")
        assert cursor.fetchone()[0] == settings.GROUP_CONCAT_MAX_BYTES == 4 * 1024 * 1024
