"""What an operator sees in the admin: badges, truncated names, seconds and zone, no Save
button, the history inline, links; and the landing page at /."""
from __future__ import annotations

import re

import pytest

from accounts.models import User
from core.observability.context import acting_as
from experiments.services import exp_update_status
from experiments.tests.factories import make_exp
from jobs.services import job_update_status

pytestmark = pytest.mark.django_db

LONG_NAME = "a-very-long-experiment-name-that-would-push-every-other-column-off-the-screen-0001"


@pytest.fixture
def staff_client(client):
    admin = User.objects.create_superuser("ops@example.com", password="pw-for-tests")
    client.force_login(admin)
    return client


def test_changelist_has_badges_truncated_names_and_times_to_the_second(staff_client, user):
    exp = make_exp(creator=user, name=LONG_NAME)
    exp_update_status(exp_id=exp.pk, status="Running", reason="JobRunning")
    text = staff_client.get("/admin/experiments/experiment/").content.decode()
    assert 'class="falcon-status falcon-status-running"' in text
    # The full name only in the title attribute; the cell holds 31 characters and an ellipsis.
    assert f'title="{LONG_NAME}"' in text and f">{LONG_NAME}<" not in text
    assert f">{LONG_NAME[:31]}…<" in text
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", text)
    for column in ("duration", "reason", "creator"):
        assert f"column-{column}" in text or f">{column.capitalize()}<" in text, column


def test_change_page_is_read_only_with_yaml_specs_verbatim_config_and_history(staff_client,
                                                                               user):
    config = "model: qwen\nbatch:   [1, 2]   # spaces kept\n"
    exp = make_exp(creator=user, name="shown", config=config, roles=("main",))
    job = exp.created_jobs[0]
    with acting_as("service exp-controller"):
        job_update_status(job_id=job.pk, status="Running", reason="PodsRunning")
    text = staff_client.get(f"/admin/experiments/experiment/{exp.pk}/change/").content.decode()
    assert 'name="_save"' not in text and 'name="_continue"' not in text
    assert "command: echo hello" in text and "replica: 1" in text  # the spec as YAML
    assert "batch:   [1, 2]   # spaces kept" in text  # the config verbatim
    assert "- 1\n" in text  # and parsed as YAML
    assert 'class="falcon-history"' in text and "job/main" in text
    assert "PodsRunning" in text and "service exp-controller" in text
    assert f"/admin/analysis/analysisrecord/?exp={exp.pk}" in text
    assert f"/api/v1/exps/{exp.pk}/events" in text
    job_page = staff_client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    assert 'class="falcon-history"' in job_page and 'name="_save"' not in job_page


def test_landing_page_links_docs_browsable_api_and_admin(client):
    res = client.get("/")
    assert res.status_code == 200
    text = res.content.decode()
    for href in ('href="/api/docs/"', 'href="/api/v1/exps"', 'href="/admin/"'):
        assert href in text


def test_the_api_root_names_every_collection_and_each_answers(client):
    """The landing page says the API is under /api/v1/: that URL answers with a map of it,
    and every URL of the map is served (401 without a token, never 404)."""
    res = client.get("/api/v1/", HTTP_ACCEPT="application/json")
    assert res.status_code == 200
    links = res.json()
    assert links["exps"] == "http://testserver/api/v1/exps"
    assert {"analyses", "plugins", "schema", "docs", "whoami"} <= set(links)
    for url in links.values():
        assert client.get(url).status_code in (200, 401), url


def test_operators_edit_and_pause_a_schedule_in_the_admin(staff_client):
    import importlib

    from django.apps import apps
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    from schedules.selectors import schedule_get

    importlib.import_module("core.migrations.0002_default_schedules").create(apps, None)
    task = PeriodicTask.objects.get(name="resource-sync")
    page = staff_client.get(f"/admin/django_celery_beat/periodictask/{task.pk}/change/")
    assert page.status_code == 200
    five, _ = IntervalSchedule.objects.get_or_create(every=5, period="seconds")
    form = {"name": task.name, "regtask": "", "task": task.task, "interval": five.pk,
            "args": "[]", "kwargs": "{}", "headers": "{}", "priority": "", "queue": "",
            "exchange": "", "routing_key": "", "expire_seconds": "", "description": "",
            "one_off": "", "start_time_0": "", "start_time_1": "", "_save": "Save"}
    res = staff_client.post(f"/admin/django_celery_beat/periodictask/{task.pk}/change/", form)
    assert res.status_code == 302, res.content.decode()[:3000]
    view = schedule_get("resource-sync")
    assert (view.enabled, view.interval_seconds) == (False, 5.0)  # unticked: paused
