"""Tables as kubectl prints them: fixed columns, one line per row, nothing wrapped.

Each column is as wide as its widest cell. When the table is wider than the terminal, the
columns that may be elided (a job summary, labels, a description) shrink, down to
`MIN_ELIDED` cells each, and their long cells end in `...`; key columns (ID, NAME, an email,
an experiment id) are never cut, so every id can be copied. A table still too wide runs past
the edge (the terminal wraps the line; a pipe gets it whole), as kubectl's does; it is never
broken into pieces over several lines.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text

GAP = 3  # spaces between two columns (kubectl's tabwriter pads with 3)
MIN_ELIDED = 10  # an elided column keeps at least this many cells
MARKER = "..."  # ASCII, so every encoding can print it


@dataclass(frozen=True)
class Column:
    """A column: its header and whether long cells may be elided to fit the terminal."""

    header: str
    elide: bool = False


def _cut(cell: Text, width: int) -> Text:
    if cell.cell_len <= width:
        return cell
    if width <= len(MARKER):
        return Text(MARKER[:width])
    cut = cell.copy()
    cut.truncate(width - len(MARKER))
    cut.append(MARKER, style="dim")
    return cut


def widths_of(columns: Sequence[Column], rows: Sequence[Sequence[Text]], width: int,
              *, headers: bool = True) -> list[int]:
    """Return the width of each column for rows drawn on `width` cells.

    Args:
        columns: the columns.
        rows: the cells, one `Text` each (one line: newlines are escaped before).
        width: the terminal's width in cells (at least 1).
        headers: whether the header line counts.
    """
    widths = [len(column.header) if headers else 0 for column in columns]
    for row in rows:
        widths = [max(w, cell.cell_len) for w, cell in zip(widths, row)]
    excess = sum(widths) + GAP * (len(widths) - 1) - width
    # Shrink the widest elidable column first, down to MIN_ELIDED; stop when it fits.
    while excess > 0:
        shrinkable = [i for i, column in enumerate(columns)
                      if column.elide and widths[i] > max(MIN_ELIDED, len(column.header))]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: widths[i])
        floor = max(MIN_ELIDED, len(columns[widest].header))
        step = min(excess, widths[widest] - floor)
        widths[widest] -= step
        excess -= step
    return widths


def line(cells: Sequence[Text], widths: Sequence[int], columns: Sequence[Column]) -> Text:
    """Return one row as one line: each cell padded to its column's width, a longer one cut
    only in an elidable column (a key cell runs on, moving the cells after it)."""
    out = Text()
    last = len(cells) - 1
    for index, (cell, width, column) in enumerate(zip(cells, widths, columns)):
        if column.elide:
            cell = _cut(cell, width)
        out.append_text(cell)
        if index < last:
            out.append(" " * (max(width - cell.cell_len, 0) + GAP))
    return out


def print_table(console: Any, columns: Sequence[Column], rows: Sequence[Sequence[Text]], *,
                headers: bool = True, fit: bool = True) -> list[int]:
    """Print `rows` under `columns` on `console`, one line per row; return the widths used
    (`--watch` prints later rows with them). `fit=False` (`-o wide`) elides nothing."""
    width = max(console.width, 1) if fit else 10**9
    widths = widths_of(columns, rows, width, headers=headers)
    if headers:
        print_line(console, line([Text(column.header, style="bold") for column in columns],
                                 widths, columns))
    for row in rows:
        print_line(console, line(row, widths, columns))
    return widths


def print_line(console: Any, text: Text) -> None:
    """Print one line as it is: never wrapped, never cropped at the terminal's edge."""
    console.print(text, soft_wrap=True, overflow="ignore", crop=False)


def _one_line(text: Text) -> Text:
    out = text.copy()
    out.no_wrap, out.overflow, out.end = True, "ignore", "\n"
    return out


class FieldLines:
    """A `key  value` table (`exp get`, `describe`, `analysis get`) drawn as lines that never
    wrap: each value takes the rest of the line after the widest key, and a value longer than
    that ends in `...` (at least `MIN_ELIDED` cells are kept; below that the line runs past the
    edge). A value with newlines (a message, a command) keeps them, each further line under
    the value column.

    Print it with `crop=False` so a line that runs past the edge is not cut by the console.

    Args:
        rows: `(key, value)` pairs; keys are shown bold and never cut.
        whole: the keys whose values are never elided either (ids, names, paths: they run
            past the edge so they can be copied, as a list's key columns).
    """

    def __init__(self, rows: Sequence[tuple[str, Text]], whole: Sequence[str] = ()):
        self.rows, self.whole = list(rows), set(whole)

    def __rich_console__(self, console: Any, options: Any):
        key_width = max((len(key) for key, _ in self.rows), default=0)
        room = max(options.max_width - key_width - GAP, MIN_ELIDED)
        for key, value in self.rows:
            for index, part in enumerate(value.split("\n", include_separator=False)):
                out = Text(key if index == 0 else "", style="bold" if index == 0 else "")
                out.append(" " * (key_width - out.cell_len + GAP))
                out.append_text(part if key in self.whole else _cut(part, room))
                yield _one_line(out)


class RowLines:
    """A titled table of rows (an experiment's jobs, artifact and events) drawn as `print_table`
    draws a list: one line per row, elidable columns shrunk to the width, key columns never
    cut (a row still too wide runs past the edge: print it with `crop=False`). A cell's
    newlines must be escaped (`plain` without `multiline`).

    Args:
        title: a bold line above the table.
        columns: the columns.
        rows: the cells.
        caption: a line under the table (e.g. "no status change yet").
    """

    def __init__(self, title: str, columns: Sequence[Column], rows: Sequence[Sequence[Text]],
                 caption: str | None = None):
        self.title, self.columns, self.rows, self.caption = title, columns, rows, caption

    def __rich_console__(self, console: Any, options: Any):
        widths = widths_of(self.columns, self.rows, max(options.max_width, 1))
        yield _one_line(Text(self.title, style="bold"))
        yield _one_line(line([Text(column.header, style="bold") for column in self.columns],
                             widths, self.columns))
        for row in self.rows:
            yield _one_line(line(row, widths, self.columns))
        if self.caption:
            yield _one_line(Text(self.caption, style="dim"))
