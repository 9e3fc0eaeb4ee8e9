"""drf-spectacular description of the create body's rule JSON Schema can state: a plugin or a
command is required (one of them not blank), and unknown fields are refused."""
from drf_spectacular.extensions import OpenApiSerializerExtension

NON_BLANK_TEXT = r"^[^\x00]*[^\s\x00][^\x00]*$"


class AnalysisCreateInputExtension(OpenApiSerializerExtension):
    """`AnalysisCreateInputSerializer`: `additionalProperties: false`, and `anyOf` a non-blank
    `plugin` or a non-blank `command` (`analysis.services.validate_create_fields`)."""

    target_class = "analysis.api.serializers.AnalysisCreateInputSerializer"
    priority = 1  # over experiments.api.schema.StrictSerializerExtension

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        schema["additionalProperties"] = False
        schema["anyOf"] = [
            {"required": [field], "properties": {field: {"type": "string",
                                                         "pattern": NON_BLANK_TEXT}}}
            for field in ("plugin", "command")]
        return schema
