"""The `falcon analysis` click group, its constants and the rewording of the server's errors."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import rich_click as click

from core.domain.statuses import AnalysisStatus, AnalysisType

from ..errors import CLIError
from ..exit_codes import ExitCode
from ..options import FalconSubGroup

ANALYSES = "/api/v1/analyses"
PLUGINS = "/api/v1/plugins"
STATUSES = tuple(status.value for status in AnalysisStatus)
TYPES = tuple(kind.value for kind in AnalysisType)
DEFAULT_INTERVAL = 2.0  # seconds between polls of `--wait` and `logs --follow`
CONTROLLER_UNAVAILABLE = ("the analyzer controller is unavailable; records stay readable "
                          "(falcon analysis list/get)")
RESOURCE_OPTIONS = ("cpu_request", "cpu_limit", "memory_request", "memory_limit")


@contextlib.contextmanager
def api_errors(*, analysis_id: str | None = None, plugin: str | None = None) -> Iterator[None]:
    """Reword the server's errors of an analysis or plugins request.

    A 503 becomes `CONTROLLER_UNAVAILABLE` with exit code UNAVAILABLE; a 404 about the analysis
    `analysis_id` (or the plugin `plugin`) becomes `no analysis ID` (`no plugin NAME`) with
    NOT_FOUND. Anything else (400 field errors, 401, 409, ...) passes through as the client made
    it (`cli.client.error_from_response`).

    Args:
        analysis_id: the analysis the request is about, or None.
        plugin: the plugin the request is about, or None.

    Raises:
        CLIError: the reworded error.
    """
    try:
        yield
    except CLIError as exc:
        if exc.status == 503:
            raise CLIError(CONTROLLER_UNAVAILABLE, ExitCode.UNAVAILABLE, status=503) from None
        if exc.status == 404 and analysis_id is not None:
            raise CLIError(f"no analysis {analysis_id} (see `falcon analysis list`)",
                           ExitCode.NOT_FOUND, status=404) from None
        if exc.status == 404 and plugin is not None:
            raise CLIError(f"no plugin {plugin!r} (see `falcon plugins list`)",
                           ExitCode.NOT_FOUND, status=404) from None
        raise


# --- falcon analysis ---------------------------------------------------------------------------

@click.group("analysis", cls=FalconSubGroup)
def analysis_group() -> None:
    """Run plugins or commands over an experiment's artifact, and read their results.

    An analysis runs one plugin (`falcon plugins list`) or your own command (with an optional
    script) over a finished experiment's artifact, and writes its results and its log.

    \b
    Examples:
      falcon analysis create --exp 12 --plugin bench-summary --wait
      falcon analysis list --exp 12
      falcon analysis results an-127d556979606b76 -o json
    """



def analysis_ids_of(analysis_ids: tuple[str, ...]) -> list[str]:
    """The ids given, each once; a usage error when there are none."""
    if not analysis_ids:
        raise CLIError("give one or more analysis ids (e.g. an-127d556979606b76 or "
                       "analysis/an-127d556979606b76; see `falcon analysis list`)", ExitCode.USAGE)
    return list(dict.fromkeys(analysis_ids))


# Analyses carry no labels (docs/decisions.md#dec-analysis-no-labels); what each command's
# `-l` would have meant, reached through the labelled experiments (`--exp` takes `exp/N`).
LABELLED_PIPELINES = {
    "list": "falcon exp list -l {sel} -o name | xargs -n1 falcon analysis list --exp",
    "cancel": ("falcon exp list -l {sel} -o name | xargs -n1 falcon analysis list -o name "
               "--exp | xargs falcon analysis cancel"),
    "delete": ("falcon exp list -l {sel} -o name | xargs -n1 falcon analysis list -o name "
               "--exp | xargs falcon analysis delete --yes"),
}


def no_label_option(command: str):
    """Add a hidden `-l/--label` to `analysis COMMAND` that refuses any value: a usage error
    (exit 2) saying analyses have no labels and printing the pipeline that reaches the
    analyses of the experiments so labelled (`LABELLED_PIPELINES`).

    Refused rather than left unknown: click's "No such option: -l" does not say that the labels
    are the experiments', nor how to get there from them; refused rather than read as a filter
    on the experiments' labels, which would be a second selector for the same thing.
    """

    def refuse(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> None:
        if value and not ctx.resilient_parsing:
            import shlex

            selector = shlex.quote(",".join(value))
            raise CLIError(f"analyses have no labels (labels are on experiments), so -l/--label "
                           f"cannot choose them; the analyses of the experiments labelled "
                           f"{selector}: "
                           + LABELLED_PIPELINES[command].format(sel=selector), ExitCode.USAGE)

    return click.option("--label", "-l", "label", multiple=True, hidden=True,
                        expose_value=False, callback=refuse, metavar="KEY[=VALUE]")
