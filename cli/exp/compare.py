"""`falcon exp compare`: what changed in the config, and what it did to the numbers.

The document is the server's (`GET /api/v1/exps/compare`, `analysis.compare`, docs/compare.md);
this command checks the arguments, asks for it and draws it. With `--fail-on` it is a
regression gate: exit 13 (`GATE_FAILED`) when a condition holds for a compared experiment.
Only click is imported at module level.
"""
from __future__ import annotations

import rich_click as click

from ..errors import CLIError
from ..exit_codes import ExitCode
from ..options import ExpIdType, output_option, pass_env, server_option
from .group import check_exp_ids, exp_group

MAX_EXPERIMENTS = 20  # the server's analysis.compare.MAX_EXPERIMENTS (a test keeps them equal)


@exp_group.command("compare")
@click.argument("exp_ids", nargs=-1, required=True, type=ExpIdType(), metavar="BASE OTHER...")
@click.option("--baseline", type=ExpIdType(), default=None, metavar="ID",
              help="The experiment changes are measured against (one of those given); "
                   "default: the first.")
@click.option("--plugin", "plugins", multiple=True, metavar="NAME",
              help="Only this plugin's metrics (bench-summary, trace-summary, hlo-stats, "
                   "command/<analysis name>); repeatable.")
@click.option("--metric", "metrics", multiple=True, metavar="PATTERN",
              help="Only the metrics whose key path matches: '*' any characters, '?' one "
                   "(e.g. '*.mean'); repeatable.")
@click.option("--fail-on", "fail_on", multiple=True, metavar="COND",
              help="Exit 13 when COND holds for a compared experiment: "
                   "PLUGIN:METRIC OP THRESHOLD[%], OP one of < <= > >=, '%' a relative change, "
                   "else absolute (e.g. 'bench-summary:results.gflops.mean < -5%'); "
                   "repeatable.")
@output_option
@server_option
@pass_env
def compare(env, exp_ids: tuple[int, ...], baseline: int | None, plugins: tuple[str, ...],
            metrics: tuple[str, ...], fail_on: tuple[str, ...], output: str,
            server: str) -> None:
    """Compare 2 to 20 experiments: the config differences by key path (as `exp diff`), each
    job's outcome and duration, and every plugin's metrics side by side with their change
    against the baseline. Missing analyses and metrics show as missing, never as zero.

    Each experiment's newest succeeded analysis of a plugin is used. `-o json` prints the
    document of GET /api/v1/exps/compare (docs/compare.md).

    A --fail-on condition also fails when a compared experiment lacks the metric (or it is
    NaN) where the baseline has it, or when it matches no metric at all.

    Exit status: 0 compared (and the gate passed), 13 the gate failed (each failure is
    printed), 2 usage error (ids, --baseline, a condition that does not parse), 3 an id not
    found, 8 a filter the server refuses; other codes as every falcon command.

    \b
    Examples:
      falcon exp compare 12 15 16
      falcon exp compare 12 15 --plugin bench-summary --metric '*.mean'
      falcon exp compare 15 16 12 --baseline 12 -o json
      falcon exp compare 12 15 --fail-on 'bench-summary:results.gflops.mean < -5%'
      falcon exp compare 12 15 --fail-on 'bench-summary:*.p99 > 10%' --fail-on 'bench-summary:*.mean < -2'
    """
    from plugins.gate import condition_problem

    from .. import output as out
    from ..client import open_client
    from ..compare_output import exp_compare_table

    check_exp_ids(exp_ids, MAX_EXPERIMENTS)
    if baseline is not None and baseline not in exp_ids:
        raise CLIError(f"--baseline {baseline} is not among the experiments compared; give "
                       "one of them", ExitCode.USAGE)
    for option, values in (("--plugin", plugins), ("--metric", metrics), ("--fail-on", fail_on)):
        for value in values:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                # A byte that is not UTF-8 in argv reaches Python as a lone surrogate, which
                # no request can carry ("unexpected UnicodeEncodeError" before).
                raise CLIError(f"{option} {value.encode('utf-8', 'replace').decode()!r} is not "
                               "UTF-8 text; check the terminal's encoding (LANG)",
                               ExitCode.USAGE) from None
    for condition in fail_on:
        if problem := condition_problem(condition):
            raise CLIError(f"--fail-on: {problem}", ExitCode.USAGE)
    params = [("ids", ",".join(map(str, exp_ids)))]
    if baseline is not None:
        params.append(("baseline", str(baseline)))
    params += [("plugin", p) for p in plugins] + [("metric", m) for m in metrics]
    params += [("fail_on", c) for c in fail_on]
    with open_client(env, server) as client:
        doc = client.request("GET", "/api/v1/exps/compare", params=params)
    out.emit(env, doc, output, exp_compare_table)
    gate = doc.get("gate") or {}
    if gate.get("failed"):
        failures = sum(len(c.get("failures") or []) + (0 if c.get("matched") else 1)
                       for c in gate.get("conditions") or [] if c.get("failed"))
        raise CLIError(f"the gate failed: {failures} failure(s) of "
                       f"{sum(1 for c in gate.get('conditions') or [] if c.get('failed'))} "
                       "condition(s); see above", ExitCode.GATE_FAILED)
