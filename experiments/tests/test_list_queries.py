"""The list reads a page in two queries whatever its size: the page's ids, then its rows with
their creators, jobs and artifacts (never a query per experiment); a known token's user is
cached."""
from __future__ import annotations

from experiments.tests.factories import make_exp


def test_list_page_costs_two_queries_whatever_its_size(auth_api, user,
                                                       django_assert_num_queries):
    for i in range(6):
        make_exp(creator=user, name=f"exp-{i}", roles=("main", "worker"))
    auth_api.get("/api/v1/exps")  # the token's user is now cached
    with django_assert_num_queries(2):
        res = auth_api.get("/api/v1/exps?page_size=5")
    body = res.json()
    assert res.status_code == 200 and len(body["results"]) == 5 and body["next"]
    row = body["results"][0]
    assert [job["role"] for job in row["jobs"]] == ["main", "worker"]
    assert row["artifact"]["status"] == "Created" and row["creator"] == user.email
    assert "config" not in row and "role_to_task_spec" not in row
    assert row["created_at"].endswith("Z")


def test_an_experiment_without_job_rows_lists_an_empty_jobs_array(auth_api, user):
    from jobs.models import Job

    exp = make_exp(creator=user, name="no-jobs", roles=("main",))
    Job.objects.filter(experiment=exp).delete()
    row = auth_api.get("/api/v1/exps").json()["results"][0]
    assert row["id"] == exp.pk and row["jobs"] == []
