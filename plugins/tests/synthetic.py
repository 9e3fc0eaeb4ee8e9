"""A large synthetic trace, streamed to a gzip file from a generator (never held in memory)."""
from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

CHILDREN = 4  # each step slice holds this many op slices


def synthetic_events(n_events: int, threads: int = 8) -> Iterator[str]:
    """``n_events`` X events as JSON texts: per thread, step slices of 100 us each holding
    CHILDREN op slices of 20 us (so per thread self time of a step is 20 us)."""
    per_step = CHILDREN + 1
    for i in range(0, n_events, per_step):
        step = i // per_step
        tid = step % threads
        start = (step // threads) * 100
        yield (f'{{"ph":"X","pid":1,"tid":{tid},"ts":{start},"dur":100,'
               f'"name":"train_step","args":{{"step_num":{step}}}}}')
        for c in range(min(CHILDREN, n_events - i - 1)):
            yield (f'{{"ph":"X","pid":1,"tid":{tid},"ts":{start + c * 20},"dur":20,'
                   f'"name":"op{c}","args":{{"hlo_op":"fusion.{c}","long_name":"fusion.{c} = '
                   f'f32[1024,1024] fusion(p0, p1), kind=kLoop"}}}}')


def write_synthetic_trace(path: Path, n_events: int, threads: int = 8) -> int:
    """Write ``{"traceEvents": [...]}`` gzipped to ``path``; returns the uncompressed size."""
    size = 0
    with gzip.open(path, "wt", compresslevel=1, encoding="utf-8") as f:
        batch: list[str] = []
        f.write('{"traceEvents":[')
        first = True
        for text in synthetic_events(n_events, threads):
            batch.append(text if first else "," + text)
            first = False
            if len(batch) >= 10000:
                chunk = "".join(batch)
                size += len(chunk)
                f.write(chunk)
                batch.clear()
        chunk = "".join(batch) + "]}"
        size += len(chunk) + len('{"traceEvents":[')
        f.write(chunk)
    return size
