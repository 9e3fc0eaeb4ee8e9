"""The AnalysisRecord entity: one analysis of an experiment's artifact by a plugin or a command.

The columns are the analyzer design's `analysis_records` table (analysis_id as a string key, name,
exp, analysis_type, plugin_name, status, result path, error_message, command, script_content,
created_at, updated_at), plus the script's file name (`script_name`) and what running and
recovering an analysis needs: the artifact it reads, its creator, the number of runs started
(`attempts`), the name of the cluster object that runs it, `started_at` and `finished_at`.
"""
from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models

from core.models import StatefulModel
from core.domain.statemachine import StateMachine
from core.domain.statuses import ANALYSIS_TERMINAL, AnalysisStatus, AnalysisType, choices
from plugins import rules

# An analysis id is a DNS-1123 label (it names the run's cluster object and a store folder).
ANALYSIS_ID_MAX = 40
ANALYSIS_ID_PREFIX = "an-"
# The largest user script, in UTF-8 bytes: one limit for every caller (plugins.rules).
SCRIPT_MAX_BYTES = rules.SCRIPT_MAX_BYTES


def new_analysis_id() -> str:
    """Return a fresh analysis id: `an-` and 16 random hex digits (64 bits)."""
    return f"{ANALYSIS_ID_PREFIX}{secrets.token_hex(8)}"


class AnalysisRecord(StatefulModel):
    """One analysis: a plugin or a user's command run over one experiment's artifact.

    `message` (from `StatefulModel`) is stored in the column `error_message`, the design's name;
    the APIs call it `error_message` too. Offline records carry `dedupe_key`
    (`<artifact id>/<plugin name>`, unique), so the poller can never create two offline
    analyses of one artifact by one plugin; online records leave it NULL (any number of them).
    """

    analysis_id = models.CharField(primary_key=True, max_length=ANALYSIS_ID_MAX,
                                   default=new_analysis_id)
    name = models.CharField(max_length=255)
    experiment = models.ForeignKey("experiments.Experiment", on_delete=models.CASCADE,
                                   related_name="analyses", db_column="exp_id")
    artifact = models.ForeignKey("artifacts.Artifact", on_delete=models.CASCADE,
                                 related_name="analyses", db_column="artifact_id")
    creator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT,
                                related_name="analyses", db_column="creator_id")
    analysis_type = models.CharField(max_length=16, choices=choices(AnalysisType))
    plugin_name = models.CharField(max_length=64, blank=True, default="")
    status = models.CharField(max_length=16, choices=choices(AnalysisStatus),
                              default=AnalysisStatus.PENDING)
    message = models.TextField(blank=True, default="", db_column="error_message")
    result_path = models.CharField(max_length=1024, blank=True, default="")
    command = models.TextField(blank=True, default="")
    script_content = models.TextField(blank=True, default="")
    # The script's file name in the run's work folder (besides `script`); "" for none.
    script_name = models.CharField(max_length=255, blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    cluster_object_name = models.CharField(max_length=253, blank=True, default="")
    started_at = models.DateTimeField(null=True, blank=True)
    dedupe_key = models.CharField(max_length=128, null=True, blank=True, unique=True,
                                  editable=False)

    class Meta:
        db_table = "analysis_records"
        ordering = ["created_at", "analysis_id"]
        indexes = [
            # The queues (pending records in FIFO order), the running list and the queue
            # position of one record: a status filter read in the list order.
            models.Index(fields=["status", "analysis_type", "created_at", "analysis_id"],
                         name="analysis_queue_idx"),
            models.Index(fields=["experiment", "created_at", "analysis_id"],
                         name="analysis_exp_idx"),
        ]

    # pending -> running -> succeeded | failed; pending -> failed (it could not start);
    # any non-terminal -> cancelled; pending -> skipped (offline, none of the plugin's inputs
    # in the artifact: the record stays so discovery does not ask again).
    machine = StateMachine(
        name="Analysis",
        transitions={
            AnalysisStatus.PENDING: frozenset(),  # entered on create only
            AnalysisStatus.RUNNING: frozenset({AnalysisStatus.PENDING}),
            AnalysisStatus.SUCCEEDED: frozenset({AnalysisStatus.RUNNING}),
            AnalysisStatus.FAILED: frozenset({AnalysisStatus.PENDING, AnalysisStatus.RUNNING}),
            AnalysisStatus.CANCELLED: frozenset({AnalysisStatus.PENDING,
                                                 AnalysisStatus.RUNNING}),
            AnalysisStatus.SKIPPED: frozenset({AnalysisStatus.PENDING}),
        },
        terminal=ANALYSIS_TERMINAL,
        set_on_enter={AnalysisStatus.SUCCEEDED: ("finished_at",),
                      AnalysisStatus.FAILED: ("finished_at",),
                      AnalysisStatus.CANCELLED: ("finished_at",),
                      AnalysisStatus.SKIPPED: ("finished_at",)},
        set_once_on_enter={AnalysisStatus.RUNNING: ("started_at",)},
    )

    def __str__(self) -> str:
        return f"{self.name} ({self.analysis_id})"

    @property
    def error_message(self) -> str:
        """The design's name for `message`: why the analysis failed or was cancelled."""
        return self.message

    @property
    def script_bytes(self) -> int:
        """The user script's size in UTF-8 bytes (0 without a script)."""
        return len(self.script_content.encode()) if self.script_content else 0

    def mark_running(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """pending -> running: its run started on the cluster; sets `started_at` once."""
        return self.transition(AnalysisStatus.RUNNING, reason=reason, message=message)

    def mark_succeeded(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """running -> succeeded: the run exited 0 and its results are stored."""
        return self.transition(AnalysisStatus.SUCCEEDED, reason=reason, message=message)

    def mark_failed(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """pending | running -> failed: the run failed, was lost, or could not start."""
        return self.transition(AnalysisStatus.FAILED, reason=reason, message=message)

    def mark_skipped(self, *, reason: str | None = "NoInputs",
                     message: str | None = None) -> bool:
        """pending -> skipped: offline discovery found none of the plugin's inputs in the
        artifact; nothing runs, and the record keeps the pair from being offered again."""
        return self.transition(AnalysisStatus.SKIPPED, reason=reason, message=message)

    def cancel(self, *, reason: str | None = "Cancelled", message: str | None = None) -> bool:
        """pending | running -> cancelled: a user asked; the controller stops the run."""
        return self.transition(AnalysisStatus.CANCELLED, reason=reason, message=message)
