"""ArtifactService over a real gRPC channel (and the artifact services it calls)."""
from __future__ import annotations

import grpc
import pytest

from experiments.grpc.artifact_servicer import ArtifactServicer
from artifacts.models import Artifact
from core.domain.statuses import ArtifactStatus
from artifacts.services import artifact_update_status
from core.domain.statuses import ExpStatus
from experiments.services import exp_abort, exp_update_status
from experiments.tests.factories import make_exp
from core.grpc.errors import ERROR_CODE_KEY
from falcon_proto.falcon.v1 import artifact_pb2, common_pb2
from falcon_site.grpc.testing import grpc_channel, grpc_server, stubs  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


def rpc_error(call, request, md) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(request, metadata=md, timeout=10)
    return info.value


def code_of(err: grpc.RpcError) -> str:
    return dict(err.trailing_metadata())[ERROR_CODE_KEY]


def test_update_and_get_artifact(stubs):
    exp = make_exp()
    art = exp.artifact
    resp = stubs.artifacts.UpdateArtifactStatus(
        artifact_pb2.UpdateArtifactStatusReq(id=art.pk, status="Succeeded", reason="FilesFound"),
        metadata=stubs.md, timeout=10)
    assert resp.changed and resp.artifact.status == "Succeeded"
    assert resp.artifact.reason == "FilesFound" and resp.artifact.HasField("finished_at")
    item = stubs.artifacts.GetArtifact(artifact_pb2.GetArtifactReq(id=art.pk), metadata=stubs.md,
                                       timeout=10)
    assert (item.id, item.exp_id, item.path, item.artifact_type, item.status) == (
        art.pk, exp.pk, exp.artifact_path, "profiling", "Succeeded")


def test_update_artifact_status_errors(stubs):
    art = make_exp().artifact
    artifact_update_status(artifact_id=art.pk, status=ArtifactStatus.FAILED)
    err = rpc_error(stubs.artifacts.UpdateArtifactStatus,
                    artifact_pb2.UpdateArtifactStatusReq(id=art.pk, status="Succeeded"), stubs.md)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert code_of(err) == "invalid_transition" and "terminal" in err.details()
    err = rpc_error(stubs.artifacts.UpdateArtifactStatus,
                    artifact_pb2.UpdateArtifactStatusReq(id=art.pk, status="Succeeded",
                                                         expected="Created"), stubs.md)
    assert err.code() == grpc.StatusCode.ABORTED and code_of(err) == "transition_race"
    err = rpc_error(stubs.artifacts.UpdateArtifactStatus,
                    artifact_pb2.UpdateArtifactStatusReq(id=art.pk, status="Running"), stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "status" in err.details()
    err = rpc_error(stubs.artifacts.GetArtifact, artifact_pb2.GetArtifactReq(id=art.pk + 9),
                    stubs.md)
    assert err.code() == grpc.StatusCode.NOT_FOUND


def test_delete_then_create_artifact(stubs):
    exp = make_exp()
    exp_update_status(exp_id=exp.pk, status=ExpStatus.RUNNING)
    art = exp.artifact
    err = rpc_error(stubs.artifacts.DeleteArtifact, artifact_pb2.DeleteArtifactReq(id=art.pk),
                    stubs.md)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "Created" in err.details()
    err = rpc_error(stubs.artifacts.CreateArtifact, artifact_pb2.CreateArtifactReq(exp_id=exp.pk),
                    stubs.md)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "already" in err.details()

    artifact_update_status(artifact_id=art.pk, status=ArtifactStatus.FAILED)
    resp = stubs.artifacts.DeleteArtifact(artifact_pb2.DeleteArtifactReq(id=art.pk),
                                          metadata=stubs.md, timeout=10)
    assert resp.changed and resp.id == art.pk and not Artifact.objects.filter(pk=art.pk).exists()
    err = rpc_error(stubs.artifacts.DeleteArtifact, artifact_pb2.DeleteArtifactReq(id=art.pk),
                    stubs.md)
    assert err.code() == grpc.StatusCode.NOT_FOUND

    created = stubs.artifacts.CreateArtifact(
        artifact_pb2.CreateArtifactReq(exp_id=exp.pk), metadata=stubs.md, timeout=10).artifact
    assert (created.exp_id, created.path, created.artifact_type, created.status) == (
        exp.pk, exp.artifact_path, exp.exp_type, "Created")
    Artifact.objects.filter(pk=created.id).delete()
    custom = stubs.artifacts.CreateArtifact(
        artifact_pb2.CreateArtifactReq(exp_id=exp.pk, path="gs://bucket/runs/1",
                                       artifact_type="trace"),
        metadata=stubs.md, timeout=10).artifact
    assert (custom.path, custom.artifact_type) == ("gs://bucket/runs/1", "trace")


def test_create_artifact_errors(stubs):
    exp = make_exp()
    Artifact.objects.filter(experiment=exp).delete()
    for req, field in [
        (artifact_pb2.CreateArtifactReq(exp_id=exp.pk, path="s3://bucket/x"), "path"),
        (artifact_pb2.CreateArtifactReq(exp_id=exp.pk, artifact_type="Bad Type"),
         "artifact_type"),
        (artifact_pb2.CreateArtifactReq(), "exp_id"),
    ]:
        err = rpc_error(stubs.artifacts.CreateArtifact, req, stubs.md)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and field in err.details()
    err = rpc_error(stubs.artifacts.CreateArtifact,
                    artifact_pb2.CreateArtifactReq(exp_id=exp.pk + 9), stubs.md)
    assert err.code() == grpc.StatusCode.NOT_FOUND
    exp_abort(exp_id=exp.pk, actor=exp.creator)
    err = rpc_error(stubs.artifacts.CreateArtifact, artifact_pb2.CreateArtifactReq(exp_id=exp.pk),
                    stubs.md)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "Aborting" in err.details()
    assert not Artifact.objects.filter(experiment=exp).exists()


def list_ids(stubs, **filters) -> list[int]:
    resp = stubs.artifacts.ListArtifacts(common_pb2.CommonListReq(**filters), metadata=stubs.md,
                                         timeout=10)
    return [a.id for a in resp.artifacts]


def test_list_artifacts_pages_and_filters(stubs):
    exps = [make_exp(name=f"l{i}", cluster_name="c1" if i < 4 else "c2",
                     exp_type="profiling" if i % 2 else "benchmark") for i in range(7)]
    arts = [e.artifact.pk for e in exps]
    seen, token, pages = [], "", 0
    while True:
        resp = stubs.artifacts.ListArtifacts(
            common_pb2.CommonListReq(page_size=3, page_token=token), metadata=stubs.md,
            timeout=10)
        pages += 1
        seen.extend(a.id for a in resp.artifacts)
        token = resp.next_page_token
        if not token:
            break
    assert pages == 3 and seen == arts

    artifact_update_status(artifact_id=arts[0], status=ArtifactStatus.SUCCEEDED)
    exp_update_status(exp_id=exps[1].pk, status=ExpStatus.RUNNING)
    assert list_ids(stubs, statuses=["Succeeded"]) == [arts[0]]
    assert list_ids(stubs, exp_statuses=["Running"]) == [arts[1]]
    assert list_ids(stubs, cluster_names=["c2"]) == arts[4:]
    assert list_ids(stubs, exp_types=["profiling"]) == arts[1::2]
    assert list_ids(stubs, exp_ids=[exps[2].pk, exps[5].pk]) == [arts[2], arts[5]]
    assert list_ids(stubs, ids=[arts[6]], statuses=["Created"]) == [arts[6]]
    err = rpc_error(stubs.artifacts.ListArtifacts,
                    common_pb2.CommonListReq(statuses=["Running"]), stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "statuses" in err.details()


def test_list_artifacts_page_is_one_query(django_assert_num_queries):
    for i in range(3):
        make_exp(name=f"q{i}")
    with django_assert_num_queries(1):
        resp = ArtifactServicer().ListArtifacts(
            common_pb2.CommonListReq(page_size=2, exp_statuses=["Created"]), None)
    assert len(resp.artifacts) == 2 and resp.next_page_token


def test_a_succeeded_artifact_carries_its_manifest(stubs, tmp_path):
    from artifacts.store import store_for

    exp = make_exp()
    src = tmp_path / "trace.json"
    src.write_bytes(b"{}" * 10)
    url = f"{exp.artifact_path}/main/trace.json"
    store_for(url).put_file(src, url)
    item = stubs.artifacts.GetArtifact(artifact_pb2.GetArtifactReq(id=exp.artifact.pk),
                                       metadata=stubs.md, timeout=10)
    assert not item.HasField("file_count") and item.prune_state == ""
    resp = stubs.artifacts.UpdateArtifactStatus(
        artifact_pb2.UpdateArtifactStatusReq(id=exp.artifact.pk, status="Succeeded"),
        metadata=stubs.md, timeout=10)
    assert (resp.artifact.file_count, resp.artifact.total_bytes) == (1, 20)
    assert not resp.artifact.HasField("pruned_at")
