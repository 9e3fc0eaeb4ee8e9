"""drf-spectacular description of the create body's rules JSON Schema can state: a plugin or a
command is required (one of them not blank), a script goes with a command (never with a
plugin), `script_name` goes with a script and is a plain file name, and unknown fields are
refused."""
from drf_spectacular.extensions import OpenApiSerializerExtension

from plugins.rules import RESERVED_NAMES, SCRIPT_NAME_MAX_CHARS

NON_BLANK_TEXT = r"^[^\x00]*[^\s\x00][^\x00]*$"
BLANK_TEXT = r"^\s*$"
# A plain file name: no '/', no NUL ("." and ".." and the reserved names are refused apart).
FILE_NAME = r"^[^/\x00]*$"


def _absent_or_empty(field: str) -> list[dict]:
    return [{"not": {"required": [field]}},
            {"properties": {field: {"type": "string", "maxLength": 0}}}]


class AnalysisCreateInputExtension(OpenApiSerializerExtension):
    """`AnalysisCreateInputSerializer`: `additionalProperties: false`; `allOf`: a non-blank
    `plugin` or a non-blank `command` (`analysis.services.validate_create_fields`); no `script`
    with a non-blank `plugin`; no `script_name` without a `script`; `script_name` a plain file
    name (`plugins.rules.script_name_problem`)."""

    target_class = "analysis.api.serializers.AnalysisCreateInputSerializer"
    priority = 1  # over experiments.api.schema.StrictSerializerExtension

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        schema["additionalProperties"] = False
        name = schema["properties"]["script_name"]
        name.update({"maxLength": SCRIPT_NAME_MAX_CHARS, "pattern": FILE_NAME,
                     "not": {"enum": [".", "..", *RESERVED_NAMES]}})
        schema["allOf"] = [
            {"anyOf": [
                {"required": [field], "properties": {field: {"type": "string",
                                                             "pattern": NON_BLANK_TEXT}}}
                for field in ("plugin", "command")]},
            {"anyOf": [*_absent_or_empty("script"), {"not": {"required": ["plugin"]}},
                       {"properties": {"plugin": {"type": "string", "pattern": BLANK_TEXT}}}]},
            {"anyOf": [*_absent_or_empty("script_name"),
                       {"required": ["script"], "properties": {"script": {"type": "string",
                                                                          "minLength": 1}}}]},
        ]
        return schema
