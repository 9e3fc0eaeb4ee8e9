"""HTTP shapes of analyses and plugins (docs/analyzer.md, "HTTP API"): thin, no business rules.

The create body is checked here first (field errors 400 naming the request's field), with the
domain's own rules (`analysis.services.validate_create_fields`), so a bad request never reaches
the analyzer controller.
"""
from __future__ import annotations

import re

from django.core.validators import RegexValidator
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.http.filters import MAX_ID
from experiments.api.serializers import StrictCharField, StrictIntegerField, StrictSerializer

from .. import selectors
from plugins.rules import SCRIPT_NAME_MAX_CHARS, resource_problems, script_with_plugin_problem

from ..models import SCRIPT_MAX_BYTES, AnalysisRecord
from ..services import (
    COMMAND_MAX_BYTES, NAME_MAX_CHARS, PLUGIN_NAME_MAX_CHARS, validate_create_fields,
)

# A Kubernetes quantity ("500m", "2", "1.5", "512Mi", "1G"), or empty for the plugin's default.
QUANTITY = re.compile(r"^([0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?)?$")
QUANTITY_MAX_CHARS = 32
RESOURCE_KEYS = ("cpu_request", "cpu_limit", "memory_request", "memory_limit")
# Request field -> the domain's (and AnalyzerService's) field name: errors of
# `validate_create_fields` and of the analyzer controller are named by the request's fields.
DOMAIN_FIELD = {"plugin": "plugin_name", "script": "script_content", "name": "name",
                "command": "command", "script_name": "script_name", "exp_id": "exp_id"}
RESOURCES_PREFIX = ("resources.", "resource_override.")


def request_field(name: str) -> str | None:
    """The request's name of a domain or AnalyzerService field (`plugin_name` -> `plugin`,
    `script_content` -> `script`, `resource_override.cpu_limit` -> `resources.cpu_limit`);
    None for a field the request does not have (the controller's own, such as
    `creator_email`)."""
    for prefix in RESOURCES_PREFIX:
        if name.startswith(prefix):
            return "resources." + name[len(prefix):]
    if name in ("resources", "resource_override"):
        return "resources"
    if name in DOMAIN_FIELD:
        return name
    return {domain: field for field, domain in DOMAIN_FIELD.items()}.get(name)


def request_errors(errors: dict, *, foreign_to_detail: bool = False) -> dict[str, list[str]]:
    """Field errors keyed by the request's field names (`request_field`), nested errors
    flattened (`{"resources": {"cpu_limit": [...]}}` -> `resources.cpu_limit`).

    Args:
        errors: `{field: [message, ...] | {key: [...]}}`.
        foreign_to_detail: put an error of a field the request does not have (the
            controller's own, such as `creator_email`) under `detail`, prefixed with its name;
            otherwise it keeps its name (an unknown field the request sent).
    """
    out: dict[str, list[str]] = {}

    def add(name: str, messages) -> None:
        if isinstance(messages, dict):
            for key, inner in messages.items():
                add(f"{name}.{key}", inner)
            return
        messages = [str(m) for m in (messages if isinstance(messages, list) else [messages])]
        field = request_field(name)
        if field is None and foreign_to_detail and name not in ("detail", "non_field_errors"):
            out.setdefault("detail", []).extend(f"{name}: {m}" for m in messages)
        else:
            out.setdefault(field or name, []).extend(messages)

    for name, messages in errors.items():
        add(str(name), messages)
    return out


def _quantity_field() -> StrictCharField:
    return StrictCharField(
        required=False, allow_blank=True, max_length=QUANTITY_MAX_CHARS,
        nul_hint="send a Kubernetes quantity such as 500m or 2Gi",
        validators=[RegexValidator(QUANTITY.pattern, message=(
            "is not a Kubernetes quantity: a number with an optional suffix such as 500m, 2, "
            "512Mi or 4Gi; empty keeps the plugin's default."))])


class ResourcesSerializer(StrictSerializer):
    """The resource override: Kubernetes quantities, each optional (only these four keys)."""

    cpu_request = _quantity_field()
    cpu_limit = _quantity_field()
    memory_request = _quantity_field()
    memory_limit = _quantity_field()


class AnalysisCreateInputSerializer(StrictSerializer):
    """POST /api/v1/analyses: an online analysis of one finished experiment."""

    exp_id = StrictIntegerField(min_value=1, max_value=MAX_ID,
                                help_text="The experiment to analyse (finished).")
    plugin = StrictCharField(required=False, allow_blank=True, default="",
                             max_length=PLUGIN_NAME_MAX_CHARS,
                             nul_hint="send a catalog plugin name",
                             help_text="A catalog plugin (GET /api/v1/plugins); a plugin or a "
                                       "command is required.")
    command = StrictCharField(required=False, allow_blank=True, default="",
                              trim_whitespace=False, nul_hint="send a shell command",
                              help_text=f"A shell command, at most {COMMAND_MAX_BYTES} bytes "
                                        "in UTF-8; a plugin or a command is required.")
    script = StrictCharField(required=False, allow_blank=True, default="", trim_whitespace=False,
                             max_length=SCRIPT_MAX_BYTES, nul_hint="send a text script",
                             help_text=f"The script's text, at most {SCRIPT_MAX_BYTES} bytes "
                                       "(1 MiB) in UTF-8.")
    script_name = StrictCharField(
        required=False, allow_blank=True, default="", trim_whitespace=False,
        nul_hint="send the script's plain file name, e.g. run.py",
        help_text="The script's file name (e.g. run.py): the run saves the script under it in "
                  "its work folder, besides $FALCON_SCRIPT. A plain file name: no '/', no NUL, "
                  f"at most {SCRIPT_NAME_MAX_CHARS} characters, not '.' or '..'.")
    name = StrictCharField(required=False, allow_blank=True, default="",
                           max_length=NAME_MAX_CHARS, nul_hint="send plain text")
    resources = ResourcesSerializer(required=False)

    def validate(self, attrs):
        """Apply the domain's rules (a plugin or a command; a script with a command only, and
        its size in bytes; the
        resource override's values above 0, sensible, each request at most its limit).

        Raises:
            serializers.ValidationError: keyed by the request's field names.
        """
        errors = validate_create_fields(
            name=attrs.get("name", ""), analysis_type="online",
            plugin_name=attrs.get("plugin", ""), command=attrs.get("command", ""),
            script_content=attrs.get("script", ""), script_name=attrs.get("script_name", ""))
        errors = request_errors(errors)
        blank_plugin = not (attrs.get("plugin") or "").strip()
        given = self.initial_data if isinstance(self.initial_data, dict) else {}
        if "plugin" in errors and "command" in given and blank_plugin \
                and not str(given.get("command") or "").strip():
            # An explicit empty command: say so, under its own name.
            del errors["plugin"]
            errors["command"] = ["is empty; give the shell command to run (or a catalog "
                                 "plugin instead)."]
        if "script" not in errors and (problem := script_with_plugin_problem(
                attrs.get("plugin"), attrs.get("script"), script_field="script",
                plugin_field="plugin")):
            errors["script"] = [problem]
        # The plugin's own defaults are the controller's: it checks a one-sided override
        # against them (its errors come back named `resources.<key>` too).
        for key, problem in resource_problems(dict(attrs.get("resources") or {})).items():
            errors[f"resources.{key}"] = [problem]
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


class AnalysisSerializer(serializers.Serializer):
    """An analysis in JSON (docs/analyzer.md): `queue_position` only while pending."""

    id = serializers.CharField(source="analysis_id", read_only=True)
    name = serializers.CharField(read_only=True)
    exp_id = serializers.IntegerField(source="experiment_id", read_only=True)
    analysis_type = serializers.CharField(read_only=True)
    plugin_name = serializers.CharField(read_only=True)
    status = serializers.CharField(read_only=True)
    reason = serializers.CharField(read_only=True)
    error_message = serializers.CharField(source="message", read_only=True)
    command = serializers.CharField(read_only=True)
    has_script = serializers.SerializerMethodField()
    script_bytes = serializers.IntegerField(read_only=True)
    script_name = serializers.CharField(read_only=True)
    artifact_id = serializers.IntegerField(read_only=True)
    result_path = serializers.CharField(read_only=True)
    creator = serializers.CharField(source="creator.email", read_only=True)
    attempts = serializers.IntegerField(read_only=True)
    cluster_object_name = serializers.CharField(read_only=True)
    queue_position = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField(read_only=True)
    updated_at = serializers.DateTimeField(read_only=True)
    started_at = serializers.DateTimeField(read_only=True, allow_null=True)
    finished_at = serializers.DateTimeField(read_only=True, allow_null=True)

    @extend_schema_field(OpenApiTypes.BOOL)
    def get_has_script(self, record: AnalysisRecord) -> bool:
        return bool(record.script_content)

    @extend_schema_field({"type": "integer", "minimum": 1, "nullable": True,
                          "description": "1 = next in its queue; null unless pending."})
    def get_queue_position(self, record: AnalysisRecord) -> int | None:
        if not self.context.get("queue_position"):
            return None
        return selectors.queue_position(record)


class LogsSerializer(serializers.Serializer):
    """A piece of the analysis' log (output.log)."""

    content = serializers.CharField(help_text="The log's bytes from `offset`, as UTF-8 text "
                                              "(undecodable bytes replaced).")
    next_offset = serializers.IntegerField(help_text="The offset to ask for next.")
    complete = serializers.BooleanField(help_text="True once nothing more will be written.")
    note = serializers.CharField(allow_blank=True, help_text=(
        "Why there is no log (yet), or where it was read from; e.g. \"the analysis is pending "
        "(queue position 2); its log starts when it runs\". Empty when there is nothing to "
        "say."))


@extend_schema_field({"type": "object", "additionalProperties": True})
class AnyObjectField(serializers.JSONField):
    """One JSON object of the results file, as written by the plugin."""


class UnparsableLineSerializer(serializers.Serializer):
    """A line of the results file that is not a JSON object, and why."""

    line = serializers.IntegerField(min_value=1, help_text="The line's number (1-based).")
    error = serializers.CharField(help_text="Why it is not read: `not UTF-8`, `not JSON: ... "
                                            "at column N`, `not a JSON object (an array)`, ...")


class ResultsSerializer(serializers.Serializer):
    """The results file, parsed: one object a line in `records`; the lines that are not JSON
    objects in `unparsable`, apart (a record of any shape is the plugin's)."""

    file = serializers.CharField(help_text="The results file's URL in the store.")
    records = serializers.ListField(child=AnyObjectField(),
                                    help_text="The JSON objects, in the file's order.")
    truncated = serializers.BooleanField(help_text="True when the file holds more than was "
                                                   "returned (record or byte cap).")
    unparsable = UnparsableLineSerializer(many=True, help_text=(
        "The lines that could not be read as JSON objects (at most 100), with the reason."))


class ResourceOutputSerializer(serializers.Serializer):
    cpu_request = serializers.CharField(allow_blank=True)
    cpu_limit = serializers.CharField(allow_blank=True)
    memory_request = serializers.CharField(allow_blank=True)
    memory_limit = serializers.CharField(allow_blank=True)


class PluginSerializer(serializers.Serializer):
    """One plugin of the analyzer controller's catalog."""

    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    command = serializers.CharField(allow_blank=True)
    artifact_types = serializers.ListField(child=serializers.CharField())
    resources = ResourceOutputSerializer()
    timeout_seconds = serializers.IntegerField()


class PluginListSerializer(serializers.Serializer):
    plugins = PluginSerializer(many=True)
