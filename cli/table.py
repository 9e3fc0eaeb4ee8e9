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
