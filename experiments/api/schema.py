"""drf-spectacular description of the strict input serializers: unknown fields are refused."""
from drf_spectacular.extensions import OpenApiSerializerExtension


class StrictSerializerExtension(OpenApiSerializerExtension):
    """`StrictSerializer` refuses fields it does not declare (a 400): `additionalProperties:
    false`, so the schema says so too."""

    target_class = "experiments.api.serializers.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        schema["additionalProperties"] = False
        return schema
