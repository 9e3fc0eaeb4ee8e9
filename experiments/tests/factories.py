"""Factories that build experiments through the CreateExp service, as production does."""
from __future__ import annotations

from accounts.tests.factories import UserFactory
from experiments.services import exp_create


def task_spec(**overrides) -> dict:
    spec = {"command": "echo hello", "replica": 1}
    spec.update(overrides)
    return spec


def make_exp(*, creator=None, name: str = "exp", roles=("main",), config: str = "a: 1\n",
             cluster_name: str = "local", exp_type: str = "profiling", **spec):
    """Create an experiment with one job per role through `exp_create`."""
    return exp_create(creator=creator or UserFactory(), name=name, cluster_name=cluster_name,
                      exp_type=exp_type, role_to_task_spec={r: task_spec(**spec) for r in roles},
                      config=config)
