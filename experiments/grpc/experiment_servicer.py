"""ExperimentService (falcon.v1): parse the request, call the service or selector, map the result.

No business rules here: they are in `experiments.services` / `experiments.selectors`, which the
HTTP views call too. Domain errors propagate to `falcon_site.grpc.interceptors`, which maps them
to gRPC status codes once.
"""
from __future__ import annotations

from accounts.grpc_auth import creator_for, current_principal
from falcon_proto.falcon.v1 import common_pb2, experiment_pb2, experiment_pb2_grpc
from core.grpc.from_proto import (
    json_value,
    list_filters,
    optional,
    repeated_values,
    require_choice,
    require_id,
    status_changes,
)
from core.grpc.paging import (
    decode_page_token, encode_page_token, fill_page, keyset_page, page_size_of,
)

from .. import selectors, services
from ..filters import ExperimentFilter
from core.domain.statuses import ExpStatus
from .to_proto import exp_state_to_item, exp_to_item

# ListExpStates' page sizes, in experiments: its rows are small (no config, specs or labels).
STATES_PAGE_SIZE = 1000
STATES_MAX_PAGE_SIZE = 5000


def _detail(exp_id: int) -> experiment_pb2.ExpItem:
    return exp_to_item(selectors.exp_get(exp_id=exp_id))


def _summary(exp_id: int) -> experiment_pb2.ExpItem:
    """The write replies' experiment: no config, task specs or jobs, so a reply never passes
    the message limit because of what the user sent (GetExp has them)."""
    return exp_to_item(selectors.exp_get_summary(exp_id=exp_id), detail=False, specs=False)


class ExperimentServicer(experiment_pb2_grpc.ExperimentServiceServicer):
    """ExperimentService over the service layer."""

    def CreateExp(self, request, context):
        """CreateExp -> `services.exp_create`; creator from the caller (`auth.creator_for`).

        The reply is the new experiment's summary (`_summary`): its id, status and names, not
        the specs and config just sent, which may fill a whole message already; a reply that
        could not be sent would make a caller retry and create the experiment twice. With an
        `idempotency_key` such a retry is safe: a repeat returns the first experiment with
        `changed` false.
        """
        creator = creator_for(current_principal(), request.creator_email)
        exp = services.exp_create(
            creator=creator, name=request.name, cluster_name=request.cluster_name,
            exp_type=request.exp_type,
            role_to_task_spec=json_value(request.role_to_task_spec_json,
                                         "role_to_task_spec_json"),
            config=request.config, priority=optional(request, "priority"),
            labels=dict(request.labels), cloned_from=optional(request, "cloned_from"),
            idempotency_key=request.idempotency_key or None)
        return experiment_pb2.ExpCommonResp(exp=_summary(exp.pk), changed=not exp.replayed,
                                            id=exp.pk)

    def UpdateExpStatus(self, request, context):
        """UpdateExpStatus -> `services.exp_update_status` (guarded transition)."""
        exp_id = require_id(request.id)
        expected = optional(request, "expected")
        exp, changed = services.exp_update_status(
            exp_id=exp_id, status=require_choice(request.status, "status", list(ExpStatus)),
            reason=optional(request, "reason"), message=optional(request, "message"),
            expected=None if expected is None else require_choice(expected, "expected",
                                                                  list(ExpStatus)))
        return experiment_pb2.ExpCommonResp(exp=_summary(exp.pk), changed=changed, id=exp.pk)

    def UpdateExpStatuses(self, request, context):
        """UpdateExpStatuses -> `services.exp_update_statuses`: one guarded transition per item,
        one result per item (a refused item never fails the call)."""
        outcomes = services.exp_update_statuses(status_changes(request.items, ExpStatus))
        return experiment_pb2.UpdateExpStatusesResp(results=[
            experiment_pb2.UpdateExpStatusResult(
                id=o.pk, changed=o.changed, status=o.status,
                error_code=o.error.code if o.error else "",
                error_message=o.error.message if o.error else "")
            for o in outcomes])

    def AbortExp(self, request, context):
        """AbortExp -> `services.exp_abort` (idempotent, `changed` unset; creator or staff)."""
        exp_id = require_id(request.id)
        services.exp_abort(exp_id=exp_id, actor=current_principal().actor)
        return experiment_pb2.ExpCommonResp(exp=_summary(exp_id), id=exp_id)

    def GetExp(self, request, context):
        """GetExp -> `selectors.exp_get`, with config, jobs and artifact."""
        return _detail(require_id(request.id))

    def ListExps(self, request, context):
        """ListExps -> `selectors.exp_list` over `exp_summary_queryset`, one keyset page.

        The filters are `ExperimentFilter`'s, as over HTTP (`list_filters` maps the fields). A
        row that cannot be encoded is skipped and reported in `skipped` (`keyset_page`).
        """
        filters = list_filters(request, ExperimentFilter, rpc="ListExps")
        qs = selectors.exp_list(filters=filters, queryset=selectors.exp_summary_queryset())
        page = keyset_page(qs, page_size=request.page_size, page_token=request.page_token,
                           to_message=lambda exp: exp_to_item(exp, detail=False), rpc="ListExps")
        return experiment_pb2.ListExpsResp(
            exps=page.items, next_page_token=page.next_page_token,
            skipped=[common_pb2.SkippedRow(id=exp.pk, exp_id=exp.pk) for exp in page.skipped])

    def ListExpStates(self, request, context):
        """ListExpStates -> `selectors.exp_states`: a page of experiments with all their jobs
        and their artifact (the exp controller's read of a tick, in one call per page).

        A row that cannot be encoded is skipped and reported in `skipped` (`fill_page`).

        Raises:
            ValidationFailed: an unknown status, or a bad `page_size` / `page_token`.
        """
        statuses = repeated_values(request.statuses, "statuses", choices=ExpStatus)
        size = page_size_of(request.page_size, default=STATES_PAGE_SIZE,
                            maximum=STATES_MAX_PAGE_SIZE)
        states = selectors.exp_states(statuses=statuses,
                                      after=decode_page_token(request.page_token), size=size)
        page = fill_page(states.exps, size, to_message=exp_state_to_item,
                         token_of=lambda row: encode_page_token(row["id"]), rpc="ListExpStates",
                         id_of=lambda row: row["id"], kind_of=lambda row: "Experiment",
                         more=states.more)
        return experiment_pb2.ListExpStatesResp(
            exps=page.items, next_page_token=page.next_page_token,
            skipped=[common_pb2.SkippedRow(id=row["id"], exp_id=row["id"])
                     for row in page.skipped])

    def DeleteExp(self, request, context):
        """DeleteExp -> `services.exp_delete` (terminal experiments only; creator or staff)."""
        exp_id = require_id(request.id)
        services.exp_delete(exp_id=exp_id, actor=current_principal().actor)
        return experiment_pb2.ExpCommonResp(changed=True, id=exp_id)
