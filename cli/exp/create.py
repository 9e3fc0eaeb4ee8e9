"""`falcon exp create`."""
from __future__ import annotations

import rich_click as click

from ..listing import emit_object, object_output_option
from ..options import pass_env, server_option
from ..visible import visible
from .group import DEFAULT_INTERVAL, exp_group
from .inputs import create_exp, labels_option, read_config_file, read_tasks_file
from .lifecycle import wait_for


@exp_group.command("create")
@click.option("--name", required=True, help="Experiment name, e.g. model-profiling-001.")
@click.option("--cluster", "cluster_name", required=True, help="Cluster to run on.")
@click.option("--type", "exp_type", required=True, help="Experiment type, e.g. profiling.")
@click.option("--role-to-task-spec", "tasks_file", required=True, metavar="FILE",
              help="YAML file mapping each role to its task spec (command, replica, image, "
                   "device_count, device_type, device_topo, envs).")
@click.option("--config", "config_file", metavar="FILE",
              help="Config file sent as text, unparsed; stored verbatim and given to every "
                   "task as CUSTOM_CONFIG_KEY.")
@click.option("--priority", type=int, default=-1, show_default=True, help="Scheduling priority.")
@labels_option
@click.option("--wait", is_flag=True, help="Wait until the experiment ends (see `exp wait`).")
@object_output_option
@server_option
@pass_env
def create(env, name: str, cluster_name: str, exp_type: str, tasks_file: str,
           config_file: str | None, priority: int, labels: tuple[tuple[str, str], ...],
           wait: bool, output: str, server: str) -> None:
    """Create an experiment (CreateExp): one job per role, and its artifact.

    Safe to retry: the request carries an Idempotency-Key, and is sent again when the server
    cannot be reached, without ever making a second experiment.

    \b
    Examples:
      falcon exp create --name matmul-001 --cluster local --type benchmark --role-to-task-spec tasks.yaml --config config.yaml
      falcon exp create --name run-3 --cluster local --type benchmark --role-to-task-spec tasks.yaml -o name
      falcon exp create --name run-2 --cluster tpu-a --type profiling --role-to-task-spec tasks.yaml --label team=infra --wait
    """
    from .. import output as out
    from ..client import open_client

    # Read and check both files before anything is sent.
    body = {"name": name, "cluster_name": cluster_name, "exp_type": exp_type,
            "role_to_task_spec": read_tasks_file(tasks_file),
            "config": read_config_file(config_file) if config_file else "",
            "priority": priority, "labels": dict(labels)}
    with open_client(env, server) as client:
        exp = create_exp(env, client, body)
        if not wait:
            emit_object(env, exp, output, kind="exp", id_key="id", table=out.exp_detail)
            return
        if output == "table":
            env.print_out(visible(f"created experiment {exp['id']} ({exp['name']})"))
        wait_for(env, client, exp["id"], interval=DEFAULT_INTERVAL, timeout=None, output=output)

