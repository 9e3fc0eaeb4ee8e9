"""The admin in a real browser: headless Chromium (Debian's package) driven by Playwright.

An operator logs in, filters experiments by status, opens one, reads its transition history,
and aborts it through the action and its confirmation page, against pytest-django's
`live_server` (the real Django app on a local port). scripts/setup.sh installs Chromium.
"""
from __future__ import annotations

import os
import re

import pytest

from accounts.models import User
from core.observability.context import acting_as
from experiments.models import Experiment
from experiments.services import exp_update_status
from experiments.tests.factories import make_exp
from jobs.services import job_update_status

pytestmark = pytest.mark.django_db(transaction=True)

CHROMIUM = os.environ.get("FALCON_CHROMIUM", "/usr/bin/chromium")
# The flags that work on a machine without a display, a sandbox or an outside network.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@pytest.fixture
def page(monkeypatch, tmp_path):
    """A Chromium page 1400 pixels wide (the width the admin's lists must fit)."""
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls are
    # synchronous and safe (Django would otherwise refuse them in a thread with a loop).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run scripts/setup.sh (it installs Debian's "
                    "chromium), or point FALCON_CHROMIUM at a Chromium binary.")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                             headless=True)
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        page.set_default_timeout(20_000)
        yield page
        context.close()
        browser.close()


def test_operator_filters_reads_history_and_aborts_with_confirmation(page, live_server, user):
    User.objects.create_superuser("ops@example.com", password="pw-for-browser-tests")
    running = make_exp(creator=user, name="browser-running-" + "x" * 60, roles=("main",))
    with acting_as("service exp-controller"):
        job_update_status(job_id=running.created_jobs[0].pk, status="Running",
                          reason="PodsRunning")
        exp_update_status(exp_id=running.pk, status="Running", reason="JobRunning",
                          message="1 of 1 jobs running")
    finished = make_exp(creator=user, name="browser-finished")
    exp_update_status(exp_id=finished.pk, status="Succeeded")

    # Log in.
    page.goto(f"{live_server.url}/admin/")
    page.fill("#id_username", "ops@example.com")
    page.fill("#id_password", "pw-for-browser-tests")
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")

    # Filter experiments by status, in the sidebar.
    page.goto(f"{live_server.url}/admin/experiments/experiment/")
    page.locator("#changelist-filter").get_by_role("link", name="Running", exact=True).click()
    page.wait_for_url(re.compile(r"status=Running"))
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 1
    assert "browser-running" in rows.first.inner_text()
    assert "browser-finished" not in page.locator("#result_list").inner_text()
    # The list fits 1400 pixels: every column is within the window, none scrolled out of view.
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    assert page.evaluate(
        "document.querySelector('#result_list').getBoundingClientRect().right <= "
        "document.querySelector('#changelist-filter').getBoundingClientRect().left")
    headers = page.locator("#result_list thead th").all_inner_texts()
    assert {"STATUS", "REASON", "DURATION", "CREATOR", "CREATED AT"} <= {
        h.strip().splitlines()[-1].upper() for h in headers if h.strip()}
    badge = rows.first.locator(".falcon-status")
    assert badge.inner_text() == "Running"

    # Open it and read its history.
    rows.first.locator("th a, td a").first.click()
    page.wait_for_selector("table.falcon-history")
    history = page.locator("table.falcon-history tbody tr")
    texts = [history.nth(i).inner_text() for i in range(history.count())]
    assert len(texts) == 2
    assert "job/main" in texts[0] and "PodsRunning" in texts[0]
    assert "JobRunning" in texts[1] and "service exp-controller" in texts[1]
    assert page.locator("input[name=_save]").count() == 0

    # Abort it through the action, with its confirmation page.
    page.goto(f"{live_server.url}/admin/experiments/experiment/?status=Running")
    page.locator("#result_list tbody tr").first.locator("input.action-select").check()
    page.select_option("select[name=action]", "abort_experiments")
    page.click("button[name=index]")
    page.wait_for_selector("#falcon-confirm")
    assert "These will change (1)" in page.inner_text("#falcon-confirm")
    assert Experiment.objects.get(pk=running.pk).status == "Running"  # nothing yet
    page.click("#falcon-confirm-submit")
    page.wait_for_selector(".messagelist")
    assert "Abort requested for 1 experiment(s)." in page.inner_text(".messagelist")
    assert Experiment.objects.get(pk=running.pk).status == "Aborting"

    # The abort is in the history, by the operator.
    page.goto(f"{live_server.url}/admin/experiments/experiment/{running.pk}/change/")
    last = page.locator("table.falcon-history tbody tr").nth(2).inner_text()
    assert "Aborting" in last and "ops@example.com" in last and "AbortRequested" in last
    if os.environ.get("FALCON_SCREENSHOTS"):
        page.screenshot(path=os.path.join(os.environ["FALCON_SCREENSHOTS"], "exp-change.png"),
                        full_page=True)
        page.goto(f"{live_server.url}/admin/experiments/experiment/")
        page.screenshot(path=os.path.join(os.environ["FALCON_SCREENSHOTS"], "exp-list.png"))
