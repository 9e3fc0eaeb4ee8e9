"""The Experiment entity: the aggregate root of its Jobs and its Artifact."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from core.models import RunModel
from core.domain.statemachine import run_lifecycle
from core.domain.statuses import EXP_TERMINAL, ExpStatus, choices


class Experiment(RunModel):
    """One experiment: a cluster, a type, one task spec per role and a verbatim config.

    `config` is stored exactly as sent (the server never parses it) so runs can be compared, and
    is injected into every task as `CUSTOM_CONFIG_KEY` (`core.domain.statuses.CONFIG_ENV`). Jobs (one per role) and the Artifact are
    created with it in one transaction by `experiments.services.exp_create`.
    """

    # Indexed with the list order for the name search, per database (migration 0004).
    name = models.CharField(max_length=255)
    creator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="experiments",
        db_column="creator_id", db_index=False,  # exp_creator_created leads with it
    )
    # Filtered columns are indexed together with the list order (Meta.indexes), not alone.
    cluster_name = models.CharField(max_length=255)
    exp_type = models.CharField(max_length=255)
    role_to_task_spec = models.JSONField()
    config = models.TextField(blank=True, default="")
    artifact_path = models.CharField(max_length=512, blank=True, default="")
    priority = models.IntegerField(default=-1)
    status = models.CharField(max_length=16, choices=choices(ExpStatus), default=ExpStatus.CREATED)
    # `{key: value}` Kubernetes-style labels, the copy a list row and GetExp show (no join).
    # Filters read `ExpLabel`, written with it in the same transaction (decisions.md#dec-labels).
    labels = models.JSONField(default=dict, blank=True)
    # The id of the experiment this one was cloned from (`falcon exp clone`); kept as a plain id
    # so the record survives the deletion of its source.
    cloned_from = models.PositiveBigIntegerField(null=True, blank=True)
    # Indexed with the id and the name (Meta.indexes), not alone: the list order's index.
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "experiments"
        ordering = ["-created_at", "-id"]
        # One index per list filter, followed by the list order and its unique tie-breaker:
        # a filtered page is a backward range scan of one index, LIMIT rows long, never a sort
        # of every matching row (docs/architecture.md, "List queries and their indexes").
        # The unfiltered list walks the list order's own index, which carries the name too: a
        # name search held by many experiments walks it testing names, never reading the table
        # (migration 0005).
        indexes = [
            models.Index(fields=["created_at", "id", "name"], name="exp_created_id_name"),
            models.Index(fields=["status", "created_at", "id"], name="exp_status_created"),
            models.Index(fields=["creator", "created_at", "id"], name="exp_creator_created"),
            models.Index(fields=["cluster_name", "created_at", "id"],
                         name="exp_cluster_created"),
            models.Index(fields=["exp_type", "created_at", "id"], name="exp_type_created"),
        ]

    statuses = ExpStatus
    machine = run_lifecycle("Experiment", ExpStatus, terminal=EXP_TERMINAL)

    def __str__(self) -> str:
        return f"{self.name} ({self.pk})"


class ExpLabel(models.Model):
    """One label of an experiment: the rows label selectors filter on.

    The index on (key, value, created_at, experiment) serves `key=value` and `key` (exists)
    alike, on SQLite and MariaDB, as an index range scan; for `key=value` its entries are in
    the list order, so a page of the experiments holding a label is the next entries of one
    range, however many experiments hold it (decisions.md#dec-labels). Rules of keys and
    values: `experiments.labels`.
    """

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE,
                                   related_name="label_rows", db_index=False)
    # Case-sensitive, as Kubernetes labels: on MariaDB both columns are utf8mb4_bin, set by
    # migration 0007 in SQL (a collation is per database engine); an AlterField of either
    # must set it again there.
    key = models.CharField(max_length=317)
    value = models.CharField(max_length=63, blank=True, default="")
    # The experiment's `created_at`, copied when the label is written (it never changes).
    created_at = models.DateTimeField()

    class Meta:
        db_table = "experiment_labels"
        constraints = [models.UniqueConstraint(fields=["experiment", "key"],
                                               name="uk_explabel_exp_key")]
        indexes = [models.Index(fields=["key", "value", "created_at", "experiment"],
                                name="explabel_key_value_created")]

    def __str__(self) -> str:
        return f"{self.key}={self.value}"


class IdempotencyKey(models.Model):
    """A CreateExp idempotency key: (creator, key) is unique, so a retried create finds the first.

    `request_hash` is the SHA-256 of the validated request, so the same key with another body
    is refused (IETF draft "The Idempotency-Key HTTP Header Field"). The row goes with its
    experiment when that one is deleted.
    """

    creator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="+", db_index=False)
    key = models.CharField(max_length=255)  # utf8mb4_bin on MariaDB (migration 0007)
    request_hash = models.CharField(max_length=64)
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "experiment_idempotency_keys"
        constraints = [models.UniqueConstraint(fields=["creator", "key"],
                                               name="uk_idempotency_creator_key")]

    def __str__(self) -> str:
        return f"{self.key} -> {self.experiment_id}"
