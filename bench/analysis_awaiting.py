"""Benchmark: ListExpsAwaitingAnalysis over 1,000 to 100,000 Succeeded experiments.

Seeds a fresh database (SQLite in a temporary folder, or a uniquely named MariaDB database with
`--mariadb`, dropped at the end) with N Succeeded experiments, each with a Succeeded artifact of
type `benchmark` or `profiling`, marked for offline discovery as the transitions to Succeeded
mark them; half of them already have their offline analysis records. Then calls what
ListExpsAwaitingAnalysis runs (`analysis.services.analysis_offline_discovery`) with the built-in
catalog's plugins 5 times, and prints, per N, the number of SQL queries (the figure that must not grow with N),
the artifacts a poll examines, and the seconds per call (median of 5).

    .venv/bin/python bench/analysis_awaiting.py [--sizes 1000 10000 100000] [--mariadb]
        [--reuse DIR] [--per-query]

`--reuse DIR` keeps the database in DIR and seeds it the first time, for trying a change again
quickly (1,000,000 experiments take minutes to seed): one subfolder DIR/n-N per size, each
size seeded and measured in a process of its own (the SQLite file there; with --mariadb a
database named in DIR/n-N/seeded.json, which is not dropped). Migrations are applied every
run. The polls write: they settle the examined artifacts that owe nothing. The seeded owed
half owes every plugin of its type, so a poll settles none of it and the database ends a run
as it began; each reused run checks this (the settled and owed counts `seeded.json` noted)
and puts the marks back as seeding left them if they differ. What a reused run does not
start from is a cold cache: the operating system's page cache keeps what earlier runs read
(a fresh run's seeding leaves it warm as well).

`--per-query` also prints each query's median milliseconds and the start of its SQL.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
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
    parser.add_argument("--reuse", metavar="DIR", default=None,
                        help="keep the database of each size in DIR/n-N (the SQLite file; "
                             "with --mariadb a database named in seeded.json, not dropped) "
                             "and seed it the first time only")
    parser.add_argument("--per-query", action="store_true",
                        help="print each query's median milliseconds and SQL")
    args = parser.parse_args()
    if args.reuse:
        reuse(args)
        return
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
        run(sorted(args.sizes), per_query=args.per_query)
    finally:
        if args.mariadb:
            import MySQLdb

            conn = MySQLdb.connect(host="127.0.0.1", user="root", port=3306)
            conn.cursor().execute(f"DROP DATABASE IF EXISTS {db_name}")
            conn.close()


def reuse(args) -> None:
    """Measure each size on its own kept database, DIR/n-N, seeding it the first time.

    More than one size: one child process per size (Django holds one database a process).
    """
    folder = Path(args.reuse).resolve()
    sizes = sorted(set(args.sizes))
    if len(sizes) > 1:
        for n in sizes:
            command = [sys.executable, __file__, "--sizes", str(n), "--reuse", str(folder)]
            command += ["--mariadb"] * args.mariadb + ["--per-query"] * args.per_query
            subprocess.run(command, check=True)
        return
    n = sizes[0]
    tmp = folder / f"n-{n}"
    tmp.mkdir(parents=True, exist_ok=True)
    marker = tmp / "seeded.json"
    seeded = json.loads(marker.read_text()) if marker.exists() else {}
    if seeded and bool(seeded.get("database")) != bool(args.mariadb):
        raise SystemExit(f"--reuse {tmp}: it was seeded on "
                         f"{'MariaDB' if seeded.get('database') else 'SQLite'}; give "
                         f"{'--mariadb' if seeded.get('database') else 'no --mariadb'}, or "
                         "another folder")
    db_name = seeded.get("database") or f"falcon_bench_reuse_{n}_{uuid.uuid4().hex[:8]}"
    if args.mariadb:
        os.environ["DATABASE_URL"] = MARIADB_URL.format(name=db_name)
        import MySQLdb

        conn = MySQLdb.connect(host="127.0.0.1", user="root", port=3306)
        if not seeded:  # a seeding that stopped halfway starts again from nothing
            conn.cursor().execute(f"DROP DATABASE IF EXISTS {db_name}")
        conn.cursor().execute(f"CREATE DATABASE IF NOT EXISTS {db_name} CHARACTER SET utf8mb4")
        conn.close()
    else:
        os.environ["DATABASE_URL"] = f"sqlite:///{tmp / 'bench.sqlite3'}"
        if not seeded:
            for leftover in tmp.glob("bench.sqlite3*"):
                leftover.unlink()
    os.environ["FALCON_VAR_DIR"] = str(tmp)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "falcon_site.settings")
    os.environ["FALCON_LOG_LEVEL"] = "ERROR"
    run([n], per_query=args.per_query, marker=marker,
        database=db_name if args.mariadb else None)


def restore_marks(marker: Path, fingerprint: str) -> None:
    """Check a reused database holds the marks seeding left; put them back if not.

    Seeding settles the analysed half (the artifacts with offline records) for `fingerprint`
    and leaves the rest "" (owed). A poll settles only what owes nothing, so normally this
    finds the counts `marker` noted; a run stopped by hand, or a change of the code that
    settles, may leave others.
    """
    from django.db.models import Exists, OuterRef

    from analysis.models import AnalysisRecord
    from artifacts.models import Artifact

    seeded = json.loads(marker.read_text())
    if seeded["fingerprint"] != fingerprint:
        raise SystemExit(f"{marker}: seeded for catalog {seeded['fingerprint']}, the catalog "
                         f"is now {fingerprint}; delete {marker.parent} to seed anew")
    counts = {"settled": Artifact.objects.filter(offline_settled=fingerprint).count(),
              "owed": Artifact.objects.filter(offline_settled="").count()}
    if counts == {key: seeded[key] for key in counts}:
        return
    print(f"# marks differ from the seeded ones ({counts}, seeded {seeded}): restoring",
          flush=True)
    analysed = Exists(AnalysisRecord.objects.filter(artifact_id=OuterRef("pk")))
    Artifact.objects.filter(analysed).update(offline_settled=fingerprint)
    Artifact.objects.exclude(analysed).update(offline_settled="")


def run(sizes: list[int], *, per_query: bool = False, marker: Path | None = None,
        database: str | None = None) -> None:
    """Seed up to each of `sizes` in turn and time the poll at each.

    With `marker` (a `--reuse` folder's seeded.json, one size): seed only if it does not
    exist, and write it once seeding is done.
    """
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
    user = (User.objects.filter(email="bench@falcon.local").first()  # a reused database
            or User.objects.create_user("bench@falcon.local"))
    plugins = [(p.name, p.artifact_types) for p in load_catalog().values()]
    print(f"database: {connection.vendor}; plugins: {', '.join(n for n, _ in plugins)}")
    fingerprint = catalog_fingerprint(plugins)
    seeded = 0
    if marker is not None and marker.exists():
        restore_marks(marker, fingerprint)
        seeded = sizes[0]
        print(f"# {sizes[0]:,} experiments seeded before, in {marker.parent}", flush=True)
    print(f"{'experiments':>12} {'examined':>9} {'queries':>8} "
          f"{'triples':>8} {'median s':>9}", flush=True)
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
        if marker is not None and not marker.exists():
            marker.write_text(json.dumps({
                "n": n, "fingerprint": fingerprint,
                "settled": Artifact.objects.filter(offline_settled=fingerprint).count(),
                "owed": Artifact.objects.filter(offline_settled="").count(),
                **({"database": database} if database else {})}))
        examined = len(offline_candidates(fingerprint=fingerprint))
        times = []
        sqls: list[str] = []
        for _ in range(5):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                triples = analysis_offline_discovery(limit=100, plugins=plugins)
                times.append(time.perf_counter() - started)
            sqls = [q["sql"] for q in queries.captured_queries]
        print(f"{n:>12,} {examined:>9} {len(queries.captured_queries):>8} "
              f"{len(triples):>8} {statistics.median(times):>9.4f}  "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)
        if per_query:
            # Timed again one by one, rows fetched: on SQLite `execute` returns at the first
            # row, so the captured times leave out most of the work.
            for index, sql in enumerate(sqls):
                spent = []
                for _ in range(5):
                    with connection.cursor() as cursor:
                        started = time.perf_counter()
                        cursor.execute(sql)
                        if cursor.description:
                            cursor.fetchall()
                        spent.append((time.perf_counter() - started) * 1000)
                print(f"    q{index + 1} {statistics.median(spent):8.2f} ms  {sql[:100]}")


if __name__ == "__main__":
    main()
