"""Benchmark: ListExpsAwaitingAnalysis over 1,000 to 100,000 Succeeded experiments.

Seeds a fresh database (SQLite in a temporary folder, or a uniquely named MariaDB database with
`--mariadb`, dropped at the end) with N Succeeded experiments, each with a Succeeded artifact of
type `benchmark` or `profiling`, marked for offline discovery as the transitions to Succeeded
mark them; half of them already have their offline analysis records. Then calls what
ListExpsAwaitingAnalysis runs (`analysis.services.analysis_offline_discovery`) with the built-in
catalog's plugins 5 times, and prints, per N, the number of SQL queries (the figure that must not grow with N),
the artifacts a poll examines, and the seconds per call (median of 5).

    .venv/bin/python bench/analysis_awaiting.py [--sizes 1000 10000 100000] [--mariadb]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MARIADB_URL = "mysql://root@127.0.0.1:3306/{name}"
BATCH = 5000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--mariadb", action="store_true",
                        help="use a new database on the MariaDB at 127.0.0.1:3306")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="falcon-bench-"))
    db_name = f"falcon_bench_{uuid.uuid4().hex[:10]}"
    if args.mariadb:
        os.environ["DATABASE_URL"] = MARIADB_URL.format(name=db_name)
    else:
        os.environ["DATABASE_URL"] = f"sqlite:///{tmp / 'bench.sqlite3'}"
    os.environ["FALCON_VAR_DIR"] = str(tmp)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "falcon_site.settings")
    os.environ["FALCON_LOG_LEVEL"] = "ERROR"
    if args.mariadb:
        import MySQLdb

        conn = MySQLdb.connect(host="127.0.0.1", user="root", port=3306)
        conn.cursor().execute(f"CREATE DATABASE {db_name} CHARACTER SET utf8mb4")
        conn.close()
    try:
        run(sorted(args.sizes))
    finally:
        if args.mariadb:
            import MySQLdb

            conn = MySQLdb.connect(host="127.0.0.1", user="root", port=3306)
            conn.cursor().execute(f"DROP DATABASE IF EXISTS {db_name}")
            conn.close()


def run(sizes: list[int]) -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from accounts.models import User
    from analysis.models import AnalysisRecord
    from analysis.selectors import catalog_fingerprint, offline_candidates
    from analysis.services import analysis_offline_discovery
    from artifacts.models import Artifact
    from core.domain.statuses import AnalysisStatus, AnalysisType, ArtifactStatus, ExpStatus
    from experiments.models import Experiment
    from plugins.catalog import load_catalog

    call_command("migrate", verbosity=0)
    user = User.objects.create_user("bench@falcon.local")
    plugins = [(p.name, p.artifact_types) for p in load_catalog().values()]
    print(f"database: {connection.vendor}; plugins: {', '.join(n for n, _ in plugins)}")
    fingerprint = catalog_fingerprint(plugins)
    print(f"{'experiments':>12} {'examined':>9} {'queries':>8} "
          f"{'triples':>8} {'median s':>9}")
    seeded = 0
    for n in sizes:
        now = timezone.now()
        while seeded < n:
            count = min(BATCH, n - seeded)
            exps = Experiment.objects.bulk_create([
                Experiment(name=f"bench-{seeded + i}", creator=user, cluster_name="local",
                           exp_type="benchmark" if (seeded + i) % 2 else "profiling",
                           role_to_task_spec={"main": {"command": "true"}},
                           status=ExpStatus.SUCCEEDED, finished_at=now)
                for i in range(count)])
            if connection.vendor != "sqlite" or exps[0].pk is None:
                exps = list(Experiment.objects.order_by("-id")[:count])[::-1]
            # The mark as the analyzer's polls leave it: the analysed half settled for this
            # catalog, the other half "" (owed, examined at every poll, OFFLINE_SCAN at most).
            arts = Artifact.objects.bulk_create([
                Artifact(experiment=e, path=f"file:///tmp/bench/{e.pk}", artifact_type=e.exp_type,
                         status=ArtifactStatus.SUCCEEDED, finished_at=now,
                         offline_settled=fingerprint if i < count // 2 else "")
                for i, e in enumerate(exps)])
            if connection.vendor != "sqlite" or arts[0].pk is None:
                arts = list(Artifact.objects.order_by("-id")[:count])[::-1]
            # Half of the experiments were analysed already by every plugin of their type.
            AnalysisRecord.objects.bulk_create([
                AnalysisRecord(name=f"{name} of {a.experiment_id}", experiment_id=a.experiment_id,
                               artifact=a, creator=user, analysis_type=AnalysisType.OFFLINE,
                               plugin_name=name, status=AnalysisStatus.SUCCEEDED,
                               dedupe_key=f"{a.pk}/{name}")
                for a in arts[: count // 2] for name, types in plugins
                if a.artifact_type in types])
            seeded += count
        examined = len(offline_candidates(fingerprint=fingerprint))
        times = []
        for _ in range(5):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                triples = analysis_offline_discovery(limit=100, plugins=plugins)
                times.append(time.perf_counter() - started)
        print(f"{n:>12,} {examined:>9} {len(queries.captured_queries):>8} "
              f"{len(triples):>8} {statistics.median(times):>9.4f}")


if __name__ == "__main__":
    main()
