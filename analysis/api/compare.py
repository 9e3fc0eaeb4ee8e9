"""HTTP gateway of CompareExps: `GET /api/v1/exps/compare` (docs/compare.md).

Routed in `falcon_site/urls.py` before the experiments' routes, since the document joins
experiments and their analyses and `experiments` may not import `analysis`.
"""
from __future__ import annotations

import re

from django.forms import ValidationError as FormError
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import ValidationFailed
from core.http.filters import MAX_ID, IdSequenceField
from core.limits.numbers import BadNumber, parse_decimal
from plugins.gate import CONDITION_PATTERN, MAX_CONDITION_CHARS, MAX_CONDITIONS

from ..compare import MAX_EXPERIMENTS, MAX_FILTERS, MAX_PATTERN_CHARS, MIN_EXPERIMENTS, \
    exp_compare

# The condition grammar without its group names, which JSON Schema's regex dialect lacks.
CONDITION_SCHEMA_PATTERN = re.sub(r"\?P<\w+>", "?:", CONDITION_PATTERN)
# Not blank and no NUL (a text the server refuses: `MAX_PATTERN_CHARS` aside, the only rule).
NON_BLANK = "^[^\\x00]*[^ \\t\\n\\r\\f\\v\\x00][^\\x00]*$"

COMPARE_PARAMETERS = [
    OpenApiParameter("ids", {"type": "array", "minItems": MIN_EXPERIMENTS,
                             "maxItems": MAX_EXPERIMENTS, "uniqueItems": True,
                             "items": {"type": "integer", "minimum": 1, "maximum": MAX_ID}},
                     explode=True, style="form", required=True,
                     description=f"The experiments to compare, {MIN_EXPERIMENTS} to "
                                 f"{MAX_EXPERIMENTS} distinct ids (repeat it, or a comma "
                                 "list); the first is the baseline unless `baseline` names "
                                 "another."),
    OpenApiParameter("baseline", {"type": "integer", "minimum": 1, "maximum": MAX_ID},
                     description="The experiment changes are measured against; one of `ids`. "
                                 "The document lists it first."),
    OpenApiParameter("plugin", {"type": "array", "maxItems": MAX_FILTERS,
                                "items": {"type": "string", "pattern": NON_BLANK,
                                          "maxLength": MAX_PATTERN_CHARS}},
                     explode=True, style="form",
                     description="Only these plugin sections (`bench-summary`, "
                                 "`command/<analysis name>`); repeat it."),
    OpenApiParameter("metric", {"type": "array", "maxItems": MAX_FILTERS,
                                "items": {"type": "string", "pattern": NON_BLANK,
                                          "maxLength": MAX_PATTERN_CHARS}},
                     explode=True, style="form",
                     description="Only the metric key paths matching one of these patterns "
                                 "(`*` any run of characters, `?` one); repeat it."),
    OpenApiParameter("fail_on", {"type": "array", "maxItems": MAX_CONDITIONS,
                                 "items": {"type": "string",
                                           "pattern": CONDITION_SCHEMA_PATTERN,
                                           "maxLength": MAX_CONDITION_CHARS}},
                     explode=True, style="form",
                     description="Gate conditions, `PLUGIN:METRIC OP THRESHOLD[%]` (OP <, <=, "
                                 ">, >=; `%` a relative change, else absolute), e.g. "
                                 "`bench-summary:results.gflops.mean < -5%`; the answer's "
                                 "`gate` says which held for which experiment."),
]


def _one_id(values: list[str]) -> int | None:
    """The one id a single-valued parameter holds: ASCII digits as given, no list, no spaces."""
    if not values:
        return None
    if len(values) != 1:
        raise FormError("give one experiment id.")
    try:
        return parse_decimal(values[0], minimum=1, maximum=MAX_ID)
    except BadNumber as exc:
        raise FormError(f"{exc}; got {values[0][:40]!r}.") from None


class ExpCompareView(APIView):
    """Compare experiments: config differences, jobs, metrics side by side, the gate."""

    @extend_schema(summary="CompareExps", parameters=COMPARE_PARAMETERS, responses={
        200: OpenApiResponse(response={"type": "object"}, description=(
            "`baseline` (id), `experiments` (id, name, status, labels, created_at, "
            "started_at, finished_at, duration_seconds, jobs: role, status, "
            "duration_seconds), `config_format`, `differences` and `config_text_diffs` (as "
            "DiffExps), `plugins` (per plugin: `analyses`, the one used per experiment or "
            "missing, and `metrics`: path, unit, better, values one per experiment with "
            "state number|nan|missing, value, change, change_percent), `filters` and `gate` "
            "(null without fail_on; else failed and per condition its failures). "
            "docs/compare.md has the schema.")),
        400: OpenApiResponse(description="Fewer than 2 or more than 20 ids, a repeated id, "
                                         "a baseline not among them, a bad filter or "
                                         "condition; the field is named."),
        404: OpenApiResponse(description="An id names no experiment.")})
    def get(self, request):
        # Every bad id parameter is named in one answer, not the first one only.
        parsed, errors = {}, {}
        for name, parse in (("ids", IdSequenceField().clean), ("baseline", _one_id)):
            try:
                parsed[name] = parse(request.query_params.getlist(name))
            except FormError as exc:
                errors[name] = list(exc.messages)
        if errors:
            raise ValidationFailed(errors)
        ids = parsed["ids"]
        params = request.query_params
        return Response(exp_compare(exp_ids=ids, baseline=parsed["baseline"],
                                    plugins=params.getlist("plugin"),
                                    metrics=params.getlist("metric"),
                                    fail_on=params.getlist("fail_on")))
