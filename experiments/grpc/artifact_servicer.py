"""ArtifactService (falcon.v1): parse the request, call the service or selector, map the result.

No business rules here: they are in `artifacts.services` / `artifacts.selectors`, and in
`experiments.services.artifact_create`, which adds a row to an experiment under its row lock. The
servicer lives with the experiment, the aggregate root, so the artifacts app never imports
experiments. Domain errors propagate to `falcon_site.grpc.interceptors`, which maps them to gRPC
status codes once.
"""
from __future__ import annotations

from artifacts import selectors, services
from artifacts.filters import ArtifactFilter
from artifacts.grpc.to_proto import artifact_to_item
from core.grpc.from_proto import list_filters, optional, require_choice, require_id
from core.grpc.paging import keyset_page
from core.domain.statuses import ArtifactStatus
from experiments.services import artifact_create
from falcon_proto.falcon.v1 import artifact_pb2, artifact_pb2_grpc, common_pb2


class ArtifactServicer(artifact_pb2_grpc.ArtifactServiceServicer):
    """ArtifactService over the service layer."""

    def CreateArtifact(self, request, context):
        """CreateArtifact -> `experiments.services.artifact_create` (open experiments without one)."""
        artifact = artifact_create(exp_id=require_id(request.exp_id, "exp_id"),
                                            path=request.path,
                                            artifact_type=request.artifact_type)
        return artifact_pb2.ArtifactCommonResp(artifact=artifact_to_item(artifact), changed=True,
                                               id=artifact.pk)

    def UpdateArtifactStatus(self, request, context):
        """UpdateArtifactStatus -> `services.artifact_update_status` (guarded transition)."""
        artifact_id = require_id(request.id)
        expected = optional(request, "expected")
        artifact, changed = services.artifact_update_status(
            artifact_id=artifact_id,
            status=require_choice(request.status, "status", list(ArtifactStatus)),
            reason=optional(request, "reason"), message=optional(request, "message"),
            expected=None if expected is None else require_choice(expected, "expected",
                                                                  list(ArtifactStatus)))
        return artifact_pb2.ArtifactCommonResp(artifact=artifact_to_item(artifact),
                                               changed=changed, id=artifact.pk)

    def GetArtifact(self, request, context):
        """GetArtifact -> `selectors.artifact_get`."""
        return artifact_to_item(selectors.artifact_get(artifact_id=require_id(request.id)))

    def ListArtifacts(self, request, context):
        """ListArtifacts -> `selectors.artifact_list`, one keyset page.

        The filters are `ArtifactFilter`'s (`list_filters` maps the request's fields onto them).
        A row that cannot be encoded is skipped and reported in `skipped` (`keyset_page`).
        """
        filters = list_filters(request, ArtifactFilter, rpc="ListArtifacts")
        page = keyset_page(selectors.artifact_list(filters=filters), page_size=request.page_size,
                           page_token=request.page_token, to_message=artifact_to_item,
                           rpc="ListArtifacts")
        return artifact_pb2.ListArtifactsResp(
            artifacts=page.items, next_page_token=page.next_page_token,
            skipped=[common_pb2.SkippedRow(id=artifact.pk, exp_id=artifact.experiment_id)
                     for artifact in page.skipped])

    def DeleteArtifact(self, request, context):
        """DeleteArtifact -> `services.artifact_delete` (terminal artifacts only)."""
        artifact_id = require_id(request.id)
        services.artifact_delete(artifact_id=artifact_id)
        return artifact_pb2.ArtifactCommonResp(changed=True, id=artifact_id)
