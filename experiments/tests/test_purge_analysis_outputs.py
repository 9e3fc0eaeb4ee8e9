"""`exp delete --purge` removes everything stored for the experiment, its analyses' outputs
(results and `output.log` under `{root}/analysis/{exp}/`) included, also those of analyses
deleted earlier without purge, whose files stayed for this."""
from __future__ import annotations

import pytest

from analysis.tests.factories import make_analysis, make_finished_exp
from analysis.tests.test_grpc import MD, records, update  # noqa: F401
from artifacts.store import store_for
from experiments.tests.test_exp_files import EXPS, alice, put  # noqa: F401
from falcon_proto.falcon.v1 import analysis_pb2 as pb
from falcon_site.grpc.testing import grpc_channel, grpc_server  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def outputs(record, tmp_path) -> list[str]:
    """Write a record's results and log, as the analyzer does; return their URLs."""
    urls = [f"{record.result_path}{record.plugin_name or 'command'}.jsonl",
            f"{record.result_path}output.log"]
    for url in urls:
        put(url, b'{"a": 1}\n', tmp_path)
    return urls


def exists(url: str) -> bool:
    return store_for(url).size_of(url) is not None


def test_purge_removes_every_analysis_output_of_the_experiment(auth_api, alice, records,
                                                                settings, tmp_path):
    settings.FALCON_ANALYSIS_ROOT = (tmp_path / "analysis-root").as_uri()
    root = settings.FALCON_ANALYSIS_ROOT
    exp = make_finished_exp(creator=alice, name="analysed")
    kept = make_analysis(exp=exp, result_root=root)
    deleted = make_analysis(exp=exp, result_root=root, plugin_name="other")
    elsewhere = make_analysis(exp=exp, plugin_name="third",  # a controller with another root
                              result_root=(tmp_path / "other-root").as_uri())
    kept_files, deleted_files = outputs(kept, tmp_path), outputs(deleted, tmp_path)
    elsewhere_files = outputs(elsewhere, tmp_path)
    # Experiment 5's neighbour 50 (a prefix of the folder's name) keeps its outputs.
    neighbour_url = f"{root}/analysis/{exp.pk}0/an-x/summary.jsonl"
    put(neighbour_url, b"{}\n", tmp_path)

    # A plain analysis delete (the record only, as the controller's DeleteAnalysis without
    # purge): its files stay, for a later purge.
    records.UpdateAnalysisRecord(update(records, deleted.analysis_id, ["status"],
                                        status="cancelled"), timeout=10, metadata=MD)
    records.DeleteAnalysisRecord(pb.DeleteAnalysisRecordReq(analysis_id=deleted.analysis_id),
                                 timeout=10, metadata=MD)
    assert all(exists(url) for url in deleted_files)

    res = auth_api.delete(f"{EXPS}/{exp.pk}?purge=true")
    assert res.status_code == 204, res.content
    for url in kept_files + deleted_files + elsewhere_files:
        assert not exists(url), url
    assert exists(neighbour_url)


def test_a_plain_delete_keeps_the_analysis_outputs(auth_api, alice, settings, tmp_path):
    settings.FALCON_ANALYSIS_ROOT = (tmp_path / "analysis-root").as_uri()
    exp = make_finished_exp(creator=alice, name="kept-outputs")
    files = outputs(make_analysis(exp=exp, result_root=settings.FALCON_ANALYSIS_ROOT), tmp_path)
    assert auth_api.delete(f"{EXPS}/{exp.pk}").status_code == 204
    assert all(exists(url) for url in files)
