"""HTTP shapes of experiments, jobs and artifacts (thin: no business rules, no `.save()`)."""
from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime
from datetime import timezone as dt_timezone

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from artifacts.models import Artifact
from core.limits.jsoninput import first_surrogate, path_part
from jobs.models import Job
from jobs.specs import (
    DNS1123_LABEL, ENV_NAME, MAX_DEVICE_COUNT, MAX_ENV_NAME_CHARS, MAX_ENVS, MAX_REPLICA,
    MAX_ROLES, TOPOLOGY, kind_of,
)

from ..labels import KEY_PATTERN, MAX_LABELS, VALUE_PATTERN
from ..models import Experiment
from ..specs import EXP_TYPE, NAME, PRIORITY_MAX, PRIORITY_MIN

# Text a process can receive as an argument or an environment string: no NUL character
# (the domain refuses one, naming the field); the non-blank variant for the command.
TEXT = r"^[^\x00]*$"
NON_BLANK_TEXT = r"^[^\x00]*[^\s\x00][^\x00]*$"

TASK_SPEC_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "command": {"type": "string", "minLength": 1, "pattern": NON_BLANK_TEXT,
                    "description": "Shell command run by every replica, not blank; at most "
                                   "65,536 bytes in UTF-8."},
        "replica": {"type": "integer", "minimum": 1, "maximum": MAX_REPLICA, "default": 1},
        "image": {"type": ["string", "null"], "pattern": TEXT,
                  "description": "Container image (Kubernetes clusters); null means \"\"."},
        "device_count": {"type": ["integer", "null"], "minimum": 1,
                         "maximum": MAX_DEVICE_COUNT},
        "device_type": {"type": ["string", "null"], "pattern": TEXT, "example": "tpu-v5p",
                        "description": "The accelerator; \"\" or null for none, else "
                                       "device_count is required."},
        "device_topo": {"type": ["string", "null"], "pattern": f"^({TOPOLOGY.pattern[1:-1]})?$",
                        "example": "2x2x2", "description": "A topology such as 2x2x2, or \"\" "
                                                           "or null for none."},
        "envs": {"type": "object", "maxProperties": MAX_ENVS,
                 "propertyNames": {"pattern": ENV_NAME.pattern,
                                   "maxLength": MAX_ENV_NAME_CHARS},
                 "description": f"NAME: value; names match {ENV_NAME.pattern}, at most "
                                f"{MAX_ENV_NAME_CHARS} characters; values at most 65,536 "
                                "bytes; all of one role's command, envs and config at most "
                                "1 MiB together (docs/limits.md).",
                 "additionalProperties": {"type": "string", "pattern": TEXT}},
    },
    "required": ["command"],
    # A device type asks for an accelerator: how many is then required.
    "if": {"properties": {"device_type": {"type": "string", "minLength": 1}},
           "required": ["device_type"]},
    "then": {"properties": {"device_count": {"type": "integer"}}, "required": ["device_count"]},
}


@extend_schema_field({"type": "object", "additionalProperties": TASK_SPEC_SCHEMA,
                      "propertyNames": {"pattern": DNS1123_LABEL.pattern, "maxLength": 63},
                      "minProperties": 1, "maxProperties": MAX_ROLES,
                      "description": f"Role name ({DNS1123_LABEL.pattern}, at most 63 "
                                     f"characters) to TaskSpec; at most {MAX_ROLES} roles and "
                                     "4,096 replicas in all (docs/limits.md).",
                      "example": {"main": {"command": "python bench.py", "replica": 1}}})
class RoleToTaskSpecField(serializers.JSONField):
    """`{role: TaskSpec}`; the domain validates its content (`experiments.specs`, `jobs.specs`)."""



LABELS_DESCRIPTION = ("Kubernetes-style labels, `{key: value}`: key `[prefix/]name` (prefix a "
                      "DNS subdomain of at most 253 characters, name at most 63 characters of "
                      "letters, digits, '-', '_', '.', alphanumeric at both ends), value empty or "
                      f"the name's rule; at most {MAX_LABELS} labels.")


@extend_schema_field({"type": "object", "maxProperties": MAX_LABELS,
                      "additionalProperties": {"type": "string", "maxLength": 63,
                                               "pattern": f"^{VALUE_PATTERN}$"},
                      "propertyNames": {"maxLength": 317, "pattern": f"^{KEY_PATTERN}$"},
                      "description": LABELS_DESCRIPTION, "example": {"baseline": "true"}})
class LabelsField(serializers.JSONField):
    """`{key: value}` labels; the domain checks them (`experiments.labels`)."""


@extend_schema_field({"type": "object", "maxProperties": MAX_LABELS,
                      "additionalProperties": {"type": ["string", "null"], "maxLength": 63,
                                               "pattern": f"^{VALUE_PATTERN}$"},
                      "propertyNames": {"maxLength": 317, "pattern": f"^{KEY_PATTERN}$"},
                      "description": "Labels to set (`key: value`) or remove (`key: null`).",
                      "example": {"baseline": "true", "stale": None}})
class LabelsPatchField(serializers.JSONField):
    """`{key: value or null}`: a JSON merge patch of the labels."""


class ProhibitSurrogates(ProhibitSurrogateCharactersValidator):
    """DRF's `ProhibitSurrogateCharactersValidator` (same message, code and first code point
    named), searching the text with a regular expression instead of a loop over characters."""

    def __call__(self, value):
        found = first_surrogate(str(value))
        if found is not None:
            raise serializers.ValidationError(self.message.format(code_point=ord(found)),
                                              code=self.code)


class StrictCharField(serializers.CharField):
    """A string field that refuses numbers and booleans instead of turning them into text.

    A value with a NUL character gets one error, `contains a NUL character; {nul_hint}.`, and
    no other validator's (DRF's own NUL check and a pattern would each answer otherwise).

    Args:
        nul_hint: how to fix a value with a NUL character (default "send text without it").
    """

    def __init__(self, *, nul_hint: str = "send text without it", **kwargs):
        super().__init__(**kwargs)
        # DRF's surrogate check calls ord() per character in Python (a 1 KiB config: 1,200
        # calls a create); the same answer from one regular-expression search.
        self.validators = [ProhibitSurrogates() if type(v) is ProhibitSurrogateCharactersValidator
                           else v for v in self.validators]
        self.nul_message = f"contains a NUL character; {nul_hint}."
        if not any(isinstance(v, RegexValidator) for v in self.validators):
            # States the rule in the OpenAPI schema (a pattern); `run_validators` answers it.
            self.validators.append(RegexValidator(TEXT, message=self.nul_message))

    def run_validators(self, value):
        """The field's validators; a NUL character alone answers (one message)."""
        if isinstance(value, str) and "\x00" in value:
            raise serializers.ValidationError([self.nul_message], code="null_characters")
        super().run_validators(value)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError(f"must be a string; got {kind_of(data)}.",
                                              code="invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """An integer field that refuses strings ("5"), floats and booleans instead of converting."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.range_text = f"an integer from {self.min_value} to {self.max_value}"
        for key in ("max_value", "min_value"):
            self.error_messages[key] = f"must be {self.range_text}; got {{value}}."

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            raise serializers.ValidationError(
                f"must be {self.range_text}; got {kind_of(data)}.", code="invalid")
        if self.max_value is not None and data > self.max_value:
            self.fail("max_value", value=data)
        if self.min_value is not None and data < self.min_value:
            self.fail("min_value", value=data)
        return data


class StrictSerializer(serializers.Serializer):
    """A serializer that refuses fields it does not declare instead of dropping them.

    Its fields are built once per class: DRF deep-copies the declared fields for every
    serializer, which builds each of them again (validators, messages; a fifth of a create's
    CPU in DRF). Here each instance gets a shallow copy of a field built once, which it binds
    to itself (its name, parent and source are its own); what the copies share (validators,
    error messages, settings) no validation changes. A field with fields or a child of its own
    (a nested serializer, a list of values) is deep-copied as DRF does.
    """

    def get_fields(self):
        cls = type(self)
        built = cls.__dict__.get("_built_fields")
        if built is None:
            built = super().get_fields()
            cls._built_fields = built
        return {name: copy.deepcopy(field) if isinstance(field, serializers.BaseSerializer)
                or hasattr(field, "child") else copy.copy(field)
                for name, field in built.items()}

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            unknown = sorted(set(data) - set(self.fields), key=str)
            if unknown:
                accepted = ", ".join(self.fields)
                raise serializers.ValidationError(
                    {path_part(key): [f"is not a field of this request; send only {accepted}."]
                     for key in unknown}, code="invalid")
        return super().to_internal_value(data)


def _pattern(regex, hint: str) -> RegexValidator:
    return RegexValidator(regex.pattern, message=f"is not valid: {hint}.")


class ExpCreateInputSerializer(StrictSerializer):
    """CreateExpReq: the fields of CreateExp (unknown fields are refused)."""

    name = StrictCharField(max_length=128, validators=[_pattern(
        NAME, "letters, digits, '.', '_' or '-', starting with a letter or digit")])
    cluster_name = StrictCharField(max_length=255, validators=[_pattern(
        NAME, "the name of a configured cluster (letters, digits, '.', '_', '-')")])
    exp_type = StrictCharField(max_length=63, validators=[_pattern(
        EXP_TYPE, "a lowercase type such as profiling or benchmark")])
    role_to_task_spec = RoleToTaskSpecField()
    config = StrictCharField(required=False, allow_blank=True, trim_whitespace=False,
                             nul_hint="send a text file",
                             default="", help_text="The config file's text, stored verbatim "
                             "and injected as CUSTOM_CONFIG_KEY; at most "
                             f"{settings.FALCON_CONFIG_MAX_BYTES} bytes in UTF-8 (413 beyond).")
    priority = StrictIntegerField(required=False, default=-1, min_value=PRIORITY_MIN,
                                  max_value=PRIORITY_MAX,
                                  help_text="A 32-bit signed integer (the gRPC field is int32).")
    labels = LabelsField(required=False, default=dict)
    cloned_from = StrictIntegerField(required=False, default=None, allow_null=True, min_value=1,
                                     max_value=2**63 - 1,
                                     help_text="The id of the experiment this one copies "
                                               "(`falcon exp clone`).")


class ExpLabelsPatchSerializer(StrictSerializer):
    """The labels to change, as a JSON merge patch (RFC 7396): a string sets, null removes."""

    labels = LabelsPatchField(required=False, default=dict)


class UTCDateTimeField(serializers.DateTimeField):
    """DRF's ISO 8601 date-time (`...Z`), formatted without a time-zone lookup per value.

    The database gives aware UTC datetimes (USE_TZ, TIME_ZONE UTC); DRF's own field converts
    each to the current time zone first. Same text, a fraction of the cost.
    """

    def to_representation(self, value):
        return utc_iso(value)


def utc_iso(value: datetime | None) -> str | None:
    """Return `value` as ISO 8601 in UTC with a `Z` (DRF's format), or None."""
    if value is None:
        return None
    if value.tzinfo is not dt_timezone.utc:
        value = value.astimezone(dt_timezone.utc)
    return value.isoformat()[:-6] + "Z"


class UTCModelSerializer(serializers.ModelSerializer):
    """A ModelSerializer whose date-times are `UTCDateTimeField`s."""

    serializer_field_mapping = {**serializers.ModelSerializer.serializer_field_mapping,
                                models.DateTimeField: UTCDateTimeField}


JOB_FIELDS = ["id", "role", "cluster_name", "exp_type", "task_spec", "artifact_path", "priority",
              "status", "reason", "message", "cluster_job_name", "created_at", "updated_at",
              "started_at", "finished_at", "aborting_at", "aborted_at"]
ARTIFACT_FIELDS = ["id", "path", "artifact_type", "status", "reason", "message", "created_at",
                   "updated_at", "finished_at",
                   "file_count", "total_bytes", "prune_state", "pruned_at"]  # manifest, retention
# A list row's job and artifact: what a table of experiments shows, nothing large.
JOB_SUMMARY_FIELDS = ["id", "role", "status", "reason", "cluster_job_name", "started_at",
                      "finished_at"]
ARTIFACT_SUMMARY_FIELDS = ["id", "path", "artifact_type", "status", "reason", "finished_at"]
EXP_SUMMARY_FIELDS = ["id", "name", "creator", "creator_id", "cluster_name", "exp_type",
                      "artifact_path", "priority", "status", "reason", "message", "created_at",
                      "updated_at", "started_at", "finished_at", "aborting_at", "aborted_at",
                      "labels", "cloned_from", "jobs", "artifact"]


class JobOutputSerializer(UTCModelSerializer):
    class Meta:
        model = Job
        fields = JOB_FIELDS
        read_only_fields = fields


class ArtifactOutputSerializer(UTCModelSerializer):
    class Meta:
        model = Artifact
        fields = ARTIFACT_FIELDS
        read_only_fields = fields


class JobSummarySerializer(UTCModelSerializer):
    """A job in a list row: its role and state (GetExp has the task spec)."""

    class Meta:
        model = Job
        fields = JOB_SUMMARY_FIELDS
        read_only_fields = fields


class ArtifactSummarySerializer(UTCModelSerializer):
    """The artifact in a list row: where and in which state (GetExp has all of it)."""

    class Meta:
        model = Artifact
        fields = ARTIFACT_SUMMARY_FIELDS
        read_only_fields = fields


class ExpListItemSerializer(UTCModelSerializer):
    """An experiment in a list: a summary row, without config and task specs (GetExp has them).

    Documents the rows `selectors.exp_list_rows` builds; the list does not run this serializer.
    """

    creator = serializers.EmailField(source="creator.email", read_only=True)
    creator_id = serializers.CharField(read_only=True)
    jobs = JobSummarySerializer(many=True, read_only=True)
    artifact = ArtifactSummarySerializer(read_only=True)

    class Meta:
        model = Experiment
        fields = EXP_SUMMARY_FIELDS
        read_only_fields = fields


class ExpDetailSerializer(UTCModelSerializer):
    """One experiment with its verbatim config, task specs, jobs and artifact."""

    creator = serializers.EmailField(source="creator.email", read_only=True)
    creator_id = serializers.CharField(read_only=True)
    jobs = JobOutputSerializer(many=True, read_only=True)
    artifact = ArtifactOutputSerializer(read_only=True)
    role_to_task_spec = RoleToTaskSpecField(read_only=True)

    class Meta:
        model = Experiment
        fields = ["id", "name", "creator", "creator_id", "cluster_name", "exp_type",
                  "role_to_task_spec", "artifact_path", "priority", "status", "reason",
                  "message", "created_at", "updated_at", "started_at", "finished_at",
                  "aborting_at", "aborted_at", "labels", "cloned_from", "jobs", "artifact",
                  "config"]
        read_only_fields = fields


class ExpCreatedSerializer(ExpDetailSerializer):
    """`ExpDetailSerializer` of the experiment `services.exp_create` returns, read from memory.

    Its creator and artifact are loaded and its jobs are in `created_jobs`, so the 201 reply
    costs no query; the fields and their values are those GetExp then reads.
    """

    jobs = JobOutputSerializer(many=True, read_only=True, source="created_jobs")
