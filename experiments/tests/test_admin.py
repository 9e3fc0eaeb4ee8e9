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


def test_abort_action_calls_the_service(staff_client, user):
    running = make_exp(creator=user, name="a")
    done = make_exp(creator=user, name="b")
    exp_update_status(exp_id=done.pk, status="Succeeded")
    res = staff_client.post("/admin/experiments/experiment/", {
        "action": "abort_experiments", "_selected_action": [running.pk, done.pk]}, follow=True)
    assert res.status_code == 200
    assert Experiment.objects.get(pk=running.pk).status == "Aborting"
    assert running.jobs.get().status == "Aborting"
    assert Experiment.objects.get(pk=done.pk).status == "Succeeded"
    assert b"already Succeeded" in res.content


def test_delete_action_only_deletes_finished(staff_client, user):
    running = make_exp(creator=user, name="a")
    done = make_exp(creator=user, name="b")
    exp_update_status(exp_id=done.pk, status="Failed")
    staff_client.post("/admin/experiments/experiment/", {
        "action": "delete_experiments", "_selected_action": [running.pk, done.pk]})
    assert list(Experiment.objects.values_list("pk", flat=True)) == [running.pk]


def test_admin_needs_staff(client, user):
    res = client.get("/admin/experiments/experiment/")
    assert res.status_code == 302 and "/admin/login/" in res["Location"]
