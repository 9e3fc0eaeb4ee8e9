"""Offline discovery starts a plugin only on an artifact holding one of its inputs (the catalog's
`inputs` globs); otherwise the record is skipped, never run, never offered again (real runner
processes, real files; tests/test_analyzer_e2e.py does the same through the API server)."""
from __future__ import annotations

import dataclasses

from controllers.analyzer.contract import AwaitingView

from .fake_records import FakeRecordAPI
from .helpers import CATALOG, artifact, make_controller, plugin, until


def _awaiting(path: str, *plugins: str) -> list[AwaitingView]:
    return [AwaitingView(exp_id=5, exp_name="profile", exp_type="profiling",
                         creator_email="u@example.com", artifact_id=9, artifact_path=path,
                         artifact_type="profiling", plugin_name=name) for name in plugins]


def test_offline_discovery_skips_a_plugin_whose_inputs_are_absent(tmp_path):
    api = FakeRecordAPI()
    api.awaiting = _awaiting(artifact(tmp_path), "hlo", "trace")  # holds trace.json only
    ran = tmp_path / "hlo-ran"
    catalog = {"hlo": dataclasses.replace(plugin("hlo", f"touch {ran}"), inputs=("**/*.hlo",)),
               "trace": dataclasses.replace(CATALOG["echo-ok"], name="trace",
                                            inputs=("**/*.json",))}
    c = make_controller(api, tmp_path, catalog=catalog)
    by_plugin = lambda: {r.plugin_name: r for r in api.records.values()}  # noqa: E731
    until(lambda: by_plugin().get("trace") and by_plugin()["trace"].status == "succeeded",
          tick=c.tick)
    hlo = by_plugin()["hlo"]
    assert (hlo.status, hlo.reason, hlo.attempts) == ("skipped", "NoInputs", 0)
    assert "**/*.hlo" in hlo.error_message and not ran.exists()
    assert not c.queues.holds(hlo.analysis_id)
    for _ in range(3):  # later polls: nothing is offered again, nothing more is created
        c.next_poll = 0
        c.tick()
    assert len(api.records) == 2 and api.calls.count("create_record") == 2


def test_an_artifact_that_cannot_be_listed_is_asked_about_again_next_poll(tmp_path):
    api = FakeRecordAPI()
    api.awaiting = _awaiting("s3://not-a-store/x", "trace")
    catalog = {"trace": dataclasses.replace(CATALOG["echo-ok"], name="trace",
                                            inputs=("**/*.json",))}
    c = make_controller(api, tmp_path, catalog=catalog)
    c.tick()
    assert not api.records and "create_record" not in api.calls
    api.awaiting = _awaiting(artifact(tmp_path), "trace")
    c.next_poll = 0
    until(lambda: [r for r in api.records.values() if r.status == "succeeded"], tick=c.tick)
