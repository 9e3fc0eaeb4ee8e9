"""Use cases that write analysis records: create, update (status through the state machine),
delete, and cancel in the database when the analyzer controller cannot be reached.

The rules are the analyzer design's (docs/analyzer.md): the API server is the only writer of
`analysis_records`; the analyzer controller writes through AnalysisRecordService (gRPC), users
through the HTTP API (which asks the controller first), operators through the admin. Every
interface calls these functions, so none can skip a rule. Every status change is ONE guarded
transition (`core.domain.statemachine`); nothing assigns `status`.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import IntegrityError, transaction

from accounts.models import User
from accounts.principals import actor_label
from accounts.selectors import user_get_by_email
from artifacts.models import Artifact, PruneState
from core.database.db import retry_on_lock_conflict
from core.errors import (
    AlreadyExists, Conflict, InvalidTransition, NotFound, TransitionRace, ValidationFailed,
)
from core.domain.statemachine import bounded_text
from core.domain.statuses import EXP_TERMINAL, AnalysisStatus, AnalysisType, ArtifactStatus, ExpStatus
from experiments.models import Experiment
from jobs.specs import DNS1123_LABEL
from plugins import rules

from . import selectors
from .models import ANALYSIS_ID_MAX, AnalysisRecord, new_analysis_id

NAME_MAX_CHARS = 255
PLUGIN_NAME_MAX_CHARS = 64
COMMAND_MAX_BYTES = 64 * 1024
RESULT_ROOT_SCHEMES = ("file://", "gs://")
# The trailing metadata key of a duplicate create's ALREADY_EXISTS: the existing record's id.
ANALYSIS_ID_METADATA_KEY = "falcon-analysis-id"
# The columns UpdateAnalysisRecord writes besides `status` (`message` is `error_message`).
UPDATABLE_COLUMNS = ("reason", "message", "attempts", "cluster_object_name")
ATTEMPTS_MAX = 2**31 - 1


def result_path_for(*, result_root: str, exp_id: int, analysis_id: str) -> str:
    """Return an analysis' output folder: `{result_root}/analysis/{exp_id}/{analysis_id}/`.

    The root's trailing slashes are dropped, so no `//` appears (the analyzer design,
    "Storage layout").
    """
    return f"{result_root.rstrip('/')}/analysis/{exp_id}/{analysis_id}/"


def _text_problem(value: Any, *, required: bool, max_chars: int | None = None,
                  max_bytes: int | None = None) -> str | None:
    if not isinstance(value, str):
        return "must be a string."
    if required and not value.strip():
        return "is required and must not be blank."
    if "\x00" in value:
        return "contains a NUL character; send plain text."
    if max_chars is not None and len(value) > max_chars:
        return f"must be at most {max_chars} characters; got {len(value)}."
    if max_bytes is not None and len(value.encode("utf-8", "surrogatepass")) > max_bytes:
        return (f"must be at most {max_bytes} bytes in UTF-8; got "
                f"{len(value.encode('utf-8', 'surrogatepass'))}.")
    return None


def validate_create_fields(*, name: Any, analysis_type: Any, plugin_name: Any, command: Any,
                           script_content: Any, script_name: Any = "") -> dict[str, list[str]]:
    """Return the field errors of a new analysis' own fields (no database read).

    The analyzer design's rules: a name of at most 255 characters, type offline or online, a
    plugin or a command, a script of at most `plugins.rules.SCRIPT_MAX_BYTES` UTF-8 bytes (1 MiB), no NUL
    character in any text; the script's file name a plain file name
    (`plugins.rules.script_name_problem`), given with a script only. Shared by the HTTP
    serializer and `analysis_record_create`.
    """
    errors: dict[str, list[str]] = {}
    for field, value, kwargs in (
        ("name", name, {"required": False, "max_chars": NAME_MAX_CHARS}),
        ("plugin_name", plugin_name, {"required": False, "max_chars": PLUGIN_NAME_MAX_CHARS}),
        ("command", command, {"required": False, "max_bytes": COMMAND_MAX_BYTES}),
    ):
        if problem := _text_problem(value, **kwargs):
            errors[field] = [problem]
    if analysis_type not in list(AnalysisType):
        errors["analysis_type"] = [f"must be one of {', '.join(AnalysisType)}; "
                                   f"got {analysis_type!r}."]
    if problem := rules.script_problem(script_content):
        errors["script_content"] = [problem]
    if problem := (rules.script_name_problem(script_name)
                   or rules.lone_script_name_problem(script_name, script_content)):
        errors["script_name"] = [problem]
    if "plugin_name" not in errors and "command" not in errors and (
            problem := rules.plugin_or_command_problem(plugin_name, command)):
        errors["plugin_name"] = [problem]
    return errors


def analysable_experiment(*, exp_id: int, analysis_type: str) -> Experiment:
    """The experiment an analysis of `analysis_type` may run on (the analyzer design, 3.2).

    Offline analysis runs on Succeeded experiments; online analysis on any finished one
    (Succeeded, Failed or Aborted: a failed run's profiles are worth reading too). The HTTP API
    asks this before it calls the analyzer controller, so the answer does not depend on the
    controller being up; `analysis_record_create` applies it again.

    Raises:
        NotFound: no experiment `exp_id`.
        Conflict: the experiment is not in a state this kind of analysis runs on.
    """
    exp = Experiment.objects.filter(pk=exp_id).first()
    if exp is None:
        raise NotFound(f"Experiment {exp_id} does not exist.")
    if analysis_type == AnalysisType.OFFLINE and exp.status != ExpStatus.SUCCEEDED:
        raise Conflict(f"Experiment {exp_id} is {exp.status}; offline analysis runs on "
                       "Succeeded experiments only.")
    if analysis_type == AnalysisType.ONLINE and exp.status not in EXP_TERMINAL:
        raise Conflict(f"Experiment {exp_id} is {exp.status} and has not finished; analyse it "
                       "once it is Succeeded, Failed or Aborted.")
    return exp


def analysable_artifact(*, exp_id: int, analysis_type: str,
                        artifact_id: int = 0) -> tuple[Experiment, Artifact]:
    """The experiment and artifact an analysis of `analysis_type` may read.

    `analysable_experiment`'s rules, and the artifact's: it belongs to the experiment, offline
    analysis reads Succeeded artifacts only, and no analysis reads a pruned (or pruning)
    artifact: its files are gone (`prune_artifacts`), so a run would "succeed" on no input.
    The HTTP API asks this before it calls the analyzer controller; `analysis_record_create`
    applies it again.

    Args:
        exp_id: the experiment.
        analysis_type: "online" or "offline".
        artifact_id: the experiment's artifact to read; 0 for the experiment's artifact.

    Raises:
        NotFound: no experiment `exp_id`.
        ValidationFailed: `artifact_id` is not the experiment's.
        Conflict: the experiment or artifact is not in a state this analysis runs on, the
            experiment has no artifact, or the artifact was pruned (named, with when).
    """
    exp = analysable_experiment(exp_id=exp_id, analysis_type=analysis_type)
    if artifact_id:
        artifact = Artifact.objects.filter(pk=artifact_id).first()
        if artifact is None or artifact.experiment_id != exp.pk:
            raise ValidationFailed({"artifact_id": [
                f"artifact {artifact_id} is not experiment {exp_id}'s; send 0 for the "
                "experiment's artifact."]})
    else:
        artifact = Artifact.objects.filter(experiment_id=exp.pk).first()
        if artifact is None:
            raise Conflict(f"Experiment {exp_id} has no artifact to analyse.")
    if analysis_type == AnalysisType.OFFLINE and artifact.status != ArtifactStatus.SUCCEEDED:
        raise Conflict(f"Artifact {artifact.pk} of experiment {exp_id} is {artifact.status}; "
                       "offline analysis runs on Succeeded artifacts only.")
    if artifact.prune_state != PruneState.KEPT:
        when = (f" on {artifact.pruned_at:%Y-%m-%d %H:%M} UTC" if artifact.pruned_at else "")
        raise Conflict(f"Artifact {artifact.pk} of experiment {exp_id} is "
                       f"{artifact.prune_state}{when}: its stored files were deleted by "
                       "prune_artifacts (retention), so there is nothing to analyse.")
    return exp, artifact


def _existing_duplicate(*, analysis_id: str, dedupe_key: str | None) -> AnalysisRecord | None:
    query = AnalysisRecord.objects.filter(pk=analysis_id)
    if dedupe_key:
        query = AnalysisRecord.objects.filter(dedupe_key=dedupe_key) | query
    return query.order_by("created_at").first()


@retry_on_lock_conflict
def analysis_record_create(*, name: Any = "", exp_id: int, analysis_type: Any,
                           plugin_name: Any = "", command: Any = "", script_content: Any = "",
                           script_name: Any = "", artifact_id: int = 0, creator_email: Any,
                           result_root: Any, analysis_id: Any = "",
                           plugin_artifact_types: tuple[str, ...] = ()) -> AnalysisRecord:
    """CreateAnalysisRecord: write one pending record, in one transaction.

    Args:
        name: free text of at most 255 characters; empty names it after the plugin or "command".
        exp_id: the experiment analysed.
        analysis_type: "offline" (the controller's poller) or "online" (a user).
        plugin_name, command: at least one; a plugin's command comes from the catalog.
        script_content: the user's script, at most `SCRIPT_MAX_BYTES` UTF-8 bytes (1 MiB).
        script_name: the script's file name in the run's work folder (a plain file name, e.g.
            `run.py`), besides `script`; "" for none. Needs `script_content`.
        artifact_id: the experiment's artifact to read; 0 for the experiment's artifact.
        creator_email: the user the analysis belongs to; must have logged in once.
        result_root: the store root (`file://...` or `gs://...`); the record's `result_path` is
            `{result_root}/analysis/{exp_id}/{analysis_id}/`.
        analysis_id: optional id chosen by the caller, a DNS-1123 label of at most 40
            characters; empty makes one (`an-` and 16 hex digits).
        plugin_artifact_types: the artifact types the plugin reads (its catalog entry, which
            the analyzer controller holds); the artifact must be of one of them. Empty: not
            checked (a command, or a caller without a catalog).

    Returns:
        The created record (pending).

    Raises:
        ValidationFailed: a field is missing or malformed, naming it (the script over 1 MiB is
            named `script_content` with the limit); the plugin does not read the artifact's
            type (`plugin_name`, naming the plugin and both types).
        NotFound: no such experiment.
        Conflict: offline and the experiment or its artifact is not Succeeded; online and the
            experiment has not finished (Succeeded, Failed or Aborted); the artifact was
            pruned (gRPC FAILED_PRECONDITION, HTTP 409).
        AlreadyExists: an offline record of this artifact and plugin, or a record with this id,
            exists; its id is in `metadata["falcon-analysis-id"]` (the analyzer design:
            offline analyses are never duplicated; a retried create is recognised).
    """
    errors = validate_create_fields(name=name, analysis_type=analysis_type,
                                    plugin_name=plugin_name, command=command,
                                    script_content=script_content, script_name=script_name)
    if analysis_id:
        if (not isinstance(analysis_id, str) or len(analysis_id) > ANALYSIS_ID_MAX
                or not DNS1123_LABEL.fullmatch(analysis_id)):
            errors["analysis_id"] = [
                f"must be a DNS-1123 label (lower-case letters, digits and '-', starting and "
                f"ending with a letter or digit) of at most {ANALYSIS_ID_MAX} characters, or "
                "empty for a new id."]
    if not isinstance(result_root, str) or not result_root.startswith(RESULT_ROOT_SCHEMES) \
            or len(result_root.rstrip("/")) <= len("gs://"):
        errors["result_root"] = ["is required: the store root of analysis outputs, "
                                 "file:///absolute/path or gs://bucket/prefix."]
    if not isinstance(creator_email, str) or not creator_email.strip():
        errors["creator_email"] = ["is required: the email of the user the analysis belongs "
                                   "to."]
    if errors:
        raise ValidationFailed(errors)
    try:
        creator = user_get_by_email(email=creator_email)
    except NotFound as exc:
        raise ValidationFailed({"creator_email": [exc.message]}) from None
    exp, artifact = analysable_artifact(exp_id=exp_id, analysis_type=analysis_type,
                                        artifact_id=artifact_id)
    plugin_name = plugin_name.strip()
    if plugin_name and plugin_artifact_types \
            and artifact.artifact_type not in plugin_artifact_types:
        # Refused before the record exists: a run would only find none of its inputs.
        raise ValidationFailed({"plugin_name": [
            f"plugin {plugin_name!r} reads artifacts of type "
            f"{', '.join(repr(t) for t in plugin_artifact_types)}; experiment {exp.pk}'s "
            f"artifact is of type {artifact.artifact_type!r}. Pick a plugin for that type "
            "(falcon plugins list) or give a command."]})
    analysis_id = analysis_id or new_analysis_id()
    dedupe_key = (f"{artifact.pk}/{plugin_name}"
                  if analysis_type == AnalysisType.OFFLINE and plugin_name else None)
    try:
        with transaction.atomic():
            return AnalysisRecord.objects.create(
                analysis_id=analysis_id, name=name or plugin_name or "command",
                experiment=exp, artifact=artifact, creator=creator,
                analysis_type=analysis_type, plugin_name=plugin_name,
                status=AnalysisStatus.PENDING, command=command, script_content=script_content,
                script_name=script_name,
                result_path=result_path_for(result_root=result_root, exp_id=exp.pk,
                                            analysis_id=analysis_id),
                dedupe_key=dedupe_key)
    except IntegrityError:
        existing = _existing_duplicate(analysis_id=analysis_id, dedupe_key=dedupe_key)
        if existing is None:  # the row that collided is gone again (or the experiment)
            raise Conflict(f"Analysis {analysis_id!r} could not be created: a concurrent "
                           "change to the experiment or its analyses; try again.") from None
        what = (f"an offline analysis of artifact {artifact.pk} by plugin {plugin_name!r}"
                if existing.dedupe_key and existing.dedupe_key == dedupe_key
                else f"an analysis with id {analysis_id!r}")
        raise AlreadyExists(f"{what[0].upper()}{what[1:]} exists already: "
                            f"{existing.analysis_id}.",
                            metadata={ANALYSIS_ID_METADATA_KEY: existing.analysis_id}) from None


def _update_problems(fields: dict[str, Any]) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    unknown = sorted(set(fields) - {"status", "error_message", *UPDATABLE_COLUMNS})
    for name in unknown:
        errors[name] = ["is not writable; write status, reason, error_message, attempts or "
                        "cluster_object_name."]
    if "status" in fields and fields["status"] not in list(AnalysisStatus):
        errors["status"] = [f"must be one of {', '.join(AnalysisStatus)}; "
                            f"got {fields['status']!r}."]
    if "attempts" in fields:
        value = fields["attempts"]
        if isinstance(value, bool) or not isinstance(value, int) or \
                not 0 <= value <= ATTEMPTS_MAX:
            errors["attempts"] = [f"must be an integer from 0 to {ATTEMPTS_MAX}; got {value!r}."]
    for name in ("reason", "message", "error_message", "cluster_object_name"):
        if name in fields and (problem := _text_problem(fields[name], required=False)):
            errors[name] = [problem]
    return errors


@retry_on_lock_conflict
def analysis_record_update(analysis_id: str, fields: dict[str, Any],
                           expected_status: str | None = None) -> tuple[AnalysisRecord, bool]:
    """UpdateAnalysisRecord: write the given fields; a status change is a guarded transition.

    With `status` in `fields`, the other columns are written in the same guarded UPDATE
    (`AnalysisRecord.transition_pk(..., extra=...)`); repeating a transition already applied
    changes nothing and answers `changed=False`. Without it, only the columns are written, by
    primary key (and only while the record is in `expected_status`, when given).

    Args:
        analysis_id: the record's id.
        fields: `{"status"?, "reason"?, "message" | "error_message"?, "attempts"?,
            "cluster_object_name"?}`; text is cut to its column with a visible marker.
        expected_status: the status the caller read; a record found in another one raises
            TransitionRace.

    Returns:
        `(record, changed)`: the fresh record and whether its status changed.

    Raises:
        ValidationFailed: a field is not writable or its value is malformed (named).
        NotFound: no such record.
        InvalidTransition: the state machine refuses the status change (pending -> succeeded,
            anything out of a terminal state).
        TransitionRace: the record is not in `expected_status`.
    """
    fields = dict(fields)
    if "error_message" in fields:
        fields["message"] = fields.pop("error_message")
    if expected_status is not None and expected_status not in list(AnalysisStatus):
        raise ValidationFailed({"expected_status": [
            f"must be one of {', '.join(AnalysisStatus)}; got {expected_status!r}."]})
    if errors := _update_problems(fields):
        raise ValidationFailed(errors)
    status = fields.pop("status", None)
    reason, message = fields.pop("reason", None), fields.pop("message", None)
    extra = {column: fields[column] for column in ("attempts", "cluster_object_name")
             if column in fields}
    if status is not None:
        return AnalysisRecord.transition_pk(analysis_id, status, reason=reason, message=message,
                                            expected=expected_status, extra=extra or None)
    columns = dict(extra)
    if reason is not None:
        columns["reason"] = reason
    if message is not None:
        columns["message"] = message
    columns = {column: bounded_text(AnalysisRecord, column, value)
               for column, value in columns.items()}
    with transaction.atomic():
        row = AnalysisRecord.objects.select_for_update().filter(pk=analysis_id).first()
        if row is None:
            raise NotFound(f"Analysis {analysis_id!r} does not exist.")
        if expected_status is not None and row.status != expected_status:
            raise TransitionRace(f"Analysis {analysis_id} is {row.status}, not "
                                 f"{expected_status}: another writer moved it first.")
        if columns:
            # `save(update_fields=...)` writes these columns (and updated_at) only, by pk.
            for column, value in columns.items():
                setattr(row, column, value)
            row.save(update_fields=[*columns, "updated_at"])
    return AnalysisRecord.objects.get(pk=analysis_id), False


@retry_on_lock_conflict
def analysis_record_delete(analysis_id: str) -> None:
    """DeleteAnalysisRecord: delete a terminal record, in one guarded DELETE.

    The outputs in the store are not touched (the controller's DeleteAnalysis purges them).

    An offline record's artifact owes its plugin again: its offline discovery mark goes back
    to "" (examined at the next poll), in the same transaction.

    Raises:
        NotFound: no such record.
        Conflict: the record is pending or running (gRPC FAILED_PRECONDITION, HTTP 409).
    """
    with transaction.atomic():
        artifact_id = (AnalysisRecord.objects.filter(
            pk=analysis_id, analysis_type=AnalysisType.OFFLINE)
            .values_list("artifact_id", flat=True).first())
        AnalysisRecord.delete_terminal_pk(
            analysis_id, hint=" Cancel it first, then delete it once it is cancelled.")
        if artifact_id is not None:
            Artifact.objects.filter(pk=artifact_id, offline_settled__isnull=False).update(
                offline_settled="")


@retry_on_lock_conflict
def analysis_offline_discovery(*, limit: int, plugins: Sequence[tuple[str, Iterable[str]]]
                               ) -> list[selectors.AwaitingTriple]:
    """ListExpsAwaitingAnalysis for the analyzer's poll: the owed triples, and the artifacts
    examined that owe nothing settled for this catalog.

    Reads `selectors.offline_candidates` (at most `OFFLINE_SCAN` marked artifacts not settled
    for the catalog's fingerprint), answers `selectors.exps_awaiting_analysis` over them, then
    writes the fingerprint on those of them that owe no plugin of the catalog, checked again by
    the UPDATE itself (`selectors.offline_owed`), so an artifact is settled only once it has an
    offline record of every plugin of its type, or can owe none (failed, pruned). A later poll
    with the same catalog never reads it again; a catalog with another plugin or type has
    another fingerprint, and examines every settled artifact again, `OFFLINE_SCAN` a poll.

    Args:
        limit, plugins: as `selectors.exps_awaiting_analysis`.

    Returns:
        The `selectors.AwaitingTriple`s owed, as `exps_awaiting_analysis` orders them.

    Raises:
        ValidationFailed: as `selectors.validate_awaiting`.
    """
    limit, plugins = selectors.validate_awaiting(limit, plugins)
    fingerprint = selectors.catalog_fingerprint(plugins)
    candidates = selectors.offline_candidates(fingerprint=fingerprint)
    triples = selectors.exps_awaiting_analysis(limit=limit, plugins=plugins,
                                               candidates=candidates)
    if candidates:
        Artifact.objects.filter(pk__in=candidates).exclude(
            selectors.offline_owed(plugins)).update(offline_settled=fingerprint)
    return triples


@retry_on_lock_conflict
def analysis_cancel_in_db(analysis_id: str, *, actor=None) -> AnalysisRecord:
    """Cancel an analysis in the database only, when the analyzer controller is unreachable.

    A guarded transition to cancelled with reason `Cancelled`. The run itself, if any, is
    stopped by the controller when it comes back: it reconciles cancelled records with its
    live runs (the analyzer design, "States"). OK when the record is already terminal: it is
    returned unchanged.

    Args:
        analysis_id: the record's id.
        actor: who asked (a `User` or a service identity), named in the message.

    Raises:
        NotFound: no such record.
    """
    who = actor_label(actor) if actor is not None else "an operator"
    try:
        record, _changed = AnalysisRecord.transition_pk(
            analysis_id, AnalysisStatus.CANCELLED, reason="Cancelled",
            message=f"Cancelled by {who}; the analyzer controller was unavailable, so its run "
                    "is stopped when the controller is back.")
    except InvalidTransition:
        record = AnalysisRecord.objects.get(pk=analysis_id)
    return record


def analysis_may_change(*, record: AnalysisRecord, actor) -> bool:
    """True when `actor` may cancel or delete `record`: its creator, or active staff.

    The experiments' rule (`experiments.services.exp_may_change`) applied to analyses.
    """
    if getattr(actor, "is_staff", False) and getattr(actor, "is_active", False):
        return True
    return isinstance(actor, User) and actor.is_active and actor.pk == record.creator_id
