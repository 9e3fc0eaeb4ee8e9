"""The admin for operators: list, filters, search, and the actions that call the services."""
from __future__ import annotations

import pytest

from accounts.models import User
from experiments.models import Experiment
from experiments.services import exp_update_status
from experiments.tests.factories import make_exp

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client):
    admin = User.objects.create_superuser("ops@example.com", password="pw-for-tests")
    client.force_login(admin)
    return client


def test_changelist_filters_and_search(staff_client, user):
    make_exp(creator=user, name="llama-profile")
    make_exp(creator=user, name="resnet-bench", exp_type="benchmark")
    res = staff_client.get("/admin/experiments/experiment/?q=llama")
    assert res.status_code == 200
    assert b"llama-profile" in res.content and b"resnet-bench" not in res.content
    res = staff_client.get("/admin/experiments/experiment/?exp_type=benchmark&status=Created")
    assert b"resnet-bench" in res.content and b"llama-profile" not in res.content


def test_change_page_shows_jobs_and_artifact_read_only(staff_client, user):
    exp = make_exp(creator=user, roles=("main", "worker"))
    res = staff_client.get(f"/admin/experiments/experiment/{exp.pk}/change/")
    assert res.status_code == 200
    assert b"worker" in res.content and exp.artifact_path.encode() in res.content
    # A POST cannot change the name or the status: every field is read-only.
    staff_client.post(f"/admin/experiments/experiment/{exp.pk}/change/",
                      {"name": "Bad Name!/../x", "priority": 5, "status": "Succeeded"})
    after = Experiment.objects.get(pk=exp.pk)
    assert (after.name, after.priority, after.status) == (exp.name, -1, "Created")


def test_abort_action_confirms_then_calls_the_service(staff_client, user):
    running = make_exp(creator=user, name="a")
    done = make_exp(creator=user, name="b")
    exp_update_status(exp_id=done.pk, status="Succeeded")
    selection = {"action": "abort_experiments", "_selected_action": [running.pk, done.pk]}
    page = staff_client.post("/admin/experiments/experiment/", selection)
    # First a confirmation page: what will change and what will not, and why; nothing moved.
    assert page.status_code == 200
    text = page.content.decode()
    assert "These will change (1)" in text and "These will not change (1)" in text
    assert "already Succeeded" in text and "Yes, abort 1" in text
    assert Experiment.objects.get(pk=running.pk).status == "Created"
    res = staff_client.post("/admin/experiments/experiment/", {**selection, "confirm": "yes"},
                            follow=True)
    assert res.status_code == 200
    assert Experiment.objects.get(pk=running.pk).status == "Aborting"
    assert running.jobs.get().status == "Aborting"
    assert Experiment.objects.get(pk=done.pk).status == "Succeeded"
    assert b"Abort requested for 1 experiment(s)." in res.content


def test_delete_action_confirms_then_only_deletes_finished(staff_client, user):
    running = make_exp(creator=user, name="a")
    done = make_exp(creator=user, name="b")
    exp_update_status(exp_id=done.pk, status="Failed")
    selection = {"action": "delete_experiments", "_selected_action": [running.pk, done.pk]}
    page = staff_client.post("/admin/experiments/experiment/", selection)
    assert "is Created; only Succeeded, Failed or Aborted experiments can be deleted. Abort it " \
        "first" in page.content.decode()
    assert Experiment.objects.count() == 2
    staff_client.post("/admin/experiments/experiment/", {**selection, "confirm": "yes"})
    assert list(Experiment.objects.values_list("pk", flat=True)) == [running.pk]


def test_admin_needs_staff(client, user):
    res = client.get("/admin/experiments/experiment/")
    assert res.status_code == 302 and "/admin/login/" in res["Location"]


# -- filters: the entity's FilterSet, as the HTTP and gRPC lists -------------------------------

def test_changelist_filters_by_status_with_the_filtersets_names_and_choices(staff_client, user):
    from core.domain.statuses import ExpStatus

    make_exp(creator=user, name="still-created")
    running = make_exp(creator=user, name="now-running")
    failed = make_exp(creator=user, name="has-failed")
    exp_update_status(exp_id=running.pk, status="Running")
    exp_update_status(exp_id=failed.pk, status="Failed")

    def names(query: str) -> set[str]:
        res = staff_client.get(f"/admin/experiments/experiment/?{query}")
        assert res.status_code == 200
        page = res.content.decode()
        return {n for n in ("still-created", "now-running", "has-failed") if n in page}

    assert names("status=Running") == {"now-running"}
    assert names("status=Running,Failed") == {"now-running", "has-failed"}
    assert names("status=Created&cluster_name=local") == {"still-created"}
    assert names("status=Aborted") == set()
    # The sidebar offers every experiment status, under the API's parameter name.
    page = staff_client.get("/admin/experiments/experiment/").content.decode()
    for status in ExpStatus:
        assert f"?status={status}" in page
    assert "?exp_type=profiling" in page and "?cluster_name=local" in page
    # A value the FilterSet refuses is the admin's "invalid lookup" page, not a crash.
    res = staff_client.get("/admin/experiments/experiment/?status=Exploded")
    assert res.status_code == 302 and res["Location"].endswith("?e=1")


def test_job_and_artifact_changelists_filter_by_status(staff_client, user):
    from artifacts.services import artifact_update_status
    from jobs.services import job_update_status

    exp = make_exp(creator=user, roles=("alpha-role", "beta-role"))
    job_update_status(job_id=exp.jobs.get(role="beta-role").pk, status="Running")
    res = staff_client.get("/admin/jobs/job/?status=Running")
    assert b"beta-role" in res.content and b"alpha-role" not in res.content
    res = staff_client.get("/admin/jobs/job/?status=Pending,Running&exp_status=Created")
    assert b"beta-role" in res.content and b"alpha-role" in res.content
    page = staff_client.get("/admin/jobs/job/").content
    assert b"?status=Pending" in page and b"?exp_status=Created" in page  # the enums' choices

    other = make_exp(creator=user, name="other")
    artifact_update_status(artifact_id=other.artifact.pk, status="Succeeded")
    res = staff_client.get("/admin/artifacts/artifact/?status=Succeeded")
    assert other.artifact.path.encode() in res.content
    assert exp.artifact.path.encode() not in res.content
    res = staff_client.get("/admin/artifacts/artifact/?status=Running")  # not an artifact status
    assert res.status_code == 302 and res["Location"].endswith("?e=1")


def test_every_falcon_admin_is_read_only(staff_client):
    from django.contrib import admin
    from django.test import RequestFactory

    from artifacts.models import Artifact
    from core.admin import ReadOnlyAdminMixin
    from jobs.models import Job

    request = RequestFactory().get("/admin/")
    request.user = User.objects.get(email="ops@example.com")  # a superuser
    for model in (Experiment, Job, Artifact):
        model_admin = admin.site._registry[model]
        for each in [model_admin, *model_admin.get_inline_instances(request)]:
            assert isinstance(each, ReadOnlyAdminMixin), each
            assert not each.has_add_permission(request)
            assert not each.has_change_permission(request)
            assert not each.has_delete_permission(request)
            assert each.has_view_permission(request)
        assert set(model_admin.get_fields(request)) <= set(
            model_admin.get_readonly_fields(request))
    res = staff_client.get("/admin/experiments/experiment/add/")
    assert res.status_code == 403
