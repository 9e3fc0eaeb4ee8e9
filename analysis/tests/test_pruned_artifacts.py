"""A pruned artifact's files are gone: no analysis reads it. Online analyses are refused (HTTP
409 and gRPC FAILED_PRECONDITION, naming the prune) and offline discovery skips it, so a plugin
added later does not backfill analyses onto pruned experiments."""
from __future__ import annotations

from datetime import timedelta
from io import StringIO

import grpc
import pytest
from django.core.management import call_command
from django.utils import timezone

from analysis.tests.factories import make_finished_exp
from analysis.tests.test_api import _analysis_root, analyzer, client_for  # noqa: F401
from analysis.tests.test_grpc import MD, create_req, records, rpc_error  # noqa: F401
from artifacts.models import Artifact
from falcon_proto.falcon.v1 import analysis_pb2 as pb
from falcon_site.grpc.testing import grpc_channel, grpc_server  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def pruned(exp):
    """Prune `exp`'s artifact through `prune_artifacts`, as retention does."""
    Artifact.objects.filter(pk=exp.artifact.pk).update(
        finished_at=timezone.now() - timedelta(days=40))
    call_command("prune_artifacts", "--older-than", "30d", stdout=StringIO(),
                 stderr=StringIO())
    assert Artifact.objects.get(pk=exp.artifact.pk).prune_state == "Pruned"
    return exp


def test_an_online_analysis_of_a_pruned_artifact_is_a_409_naming_the_prune(token_for,
                                                                           analyzer):
    client, user = client_for(token_for, "alice@example.com")
    exp = pruned(make_finished_exp(creator=user))
    resp = client.post("/api/v1/analyses", {"exp_id": exp.pk, "plugin": "summary"},
                       format="json")
    assert resp.status_code == 409, resp.content
    body = resp.json()
    assert body["code"] == "conflict" and "Pruned" in body["detail"]
    assert "prune_artifacts" in body["detail"]
    assert not any(call[0] == "CreateAnalysis" for call in analyzer.calls)
    kept = make_finished_exp(creator=user, name="kept")
    assert client.post("/api/v1/analyses", {"exp_id": kept.pk, "plugin": "summary"},
                       format="json").status_code == 201


@pytest.mark.parametrize("analysis_type", ["online", "offline"])
def test_creating_a_record_on_a_pruned_artifact_is_failed_precondition(records, analysis_type):
    exp = pruned(make_finished_exp())
    err = rpc_error(records.CreateAnalysisRecord, create_req(exp, analysis_type=analysis_type))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "Pruned" in err.details()


def test_offline_discovery_skips_pruned_artifacts(records):
    """A plugin added after the prune finds only the kept experiments to backfill."""
    old = pruned(make_finished_exp(name="old"))
    kept = make_finished_exp(name="kept")
    req = pb.ListExpsAwaitingAnalysisReq(limit=10, plugins=[
        pb.PluginArtifactTypes(plugin_name="added-later", artifact_types=["profiling"])])
    items = records.ListExpsAwaitingAnalysis(req, timeout=10, metadata=MD).items
    assert [i.exp_id for i in items] == [kept.pk]
    assert old.pk not in [i.exp_id for i in items]
