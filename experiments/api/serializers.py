"""HTTP shapes of experiments, jobs and artifacts (thin: no business rules, no `.save()`)."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from artifacts.models import Artifact
from jobs.models import Job

from ..models import Experiment

TASK_SPEC_SCHEMA = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "Shell command run by every replica."},
        "replica": {"type": "integer", "minimum": 1, "default": 1},
        "image": {"type": "string", "description": "Container image (Kubernetes clusters)."},
        "device_count": {"type": "integer", "minimum": 1},
        "device_type": {"type": "string", "example": "tpu-v5p"},
        "device_topo": {"type": "string", "example": "2x2x2"},
        "envs": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["command"],
}


@extend_schema_field({"type": "object", "additionalProperties": TASK_SPEC_SCHEMA,
                      "example": {"main": {"command": "python bench.py", "replica": 1}}})
class RoleToTaskSpecField(serializers.JSONField):
    """`{role: TaskSpec}`; its content is validated by the domain (`experiments.specs`, `jobs.specs`)."""


class ExpCreateInputSerializer(serializers.Serializer):
    """CreateExpReq: the fields of CreateExp."""

    name = serializers.CharField(max_length=128)
    cluster_name = serializers.CharField(max_length=255)
    exp_type = serializers.CharField(max_length=255)
    role_to_task_spec = RoleToTaskSpecField()
    config = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False,
                                   default="", help_text="The config file's text, stored "
                                   "verbatim and injected as CUSTOM_CONFIG_KEY (< 128 KiB).")
    priority = serializers.IntegerField(required=False, default=-1)


class JobOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = Job
        fields = ["id", "role", "cluster_name", "exp_type", "task_spec", "artifact_path",
                  "priority", "status", "reason", "message", "cluster_job_name", "created_at",
                  "updated_at", "started_at", "finished_at", "aborting_at", "aborted_at"]
        read_only_fields = fields


class ArtifactOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = Artifact
        fields = ["id", "path", "artifact_type", "status", "reason", "message", "created_at",
                  "updated_at", "finished_at"]
        read_only_fields = fields


class ExpListItemSerializer(serializers.ModelSerializer):
    """An experiment in a list: everything but the (possibly large) config."""

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
                  "aborting_at", "aborted_at", "jobs", "artifact"]
        read_only_fields = fields


class ExpDetailSerializer(ExpListItemSerializer):
    """One experiment with its verbatim config, jobs and artifact."""

    class Meta(ExpListItemSerializer.Meta):
        fields = ExpListItemSerializer.Meta.fields + ["config"]
        read_only_fields = fields
