"""Tables as kubectl prints them: fixed columns, one line per row, nothing wrapped.

Each column is as wide as its widest cell. When the table is wider than the terminal (only on
a terminal: into a pipe or a file nothing is elided, as kubectl's), the
columns that may be elided (a job summary, labels, a description) shrink, down to
`MIN_ELIDED` cells each, and their long cells end in `...`; key columns (ID, NAME, an email,
an experiment id) are never cut, so every id can be copied. A table still too wide runs past
the edge (the terminal wraps the line; a pipe gets it whole), as kubectl's does; it is never
broken into pieces over several lines.

Cells are `Cell`s, not rich `Text`s: a table written where no colour shows (a pipe, a file; see
`cli.env.Environment.table_console`) is plain text, and `falcon exp list | grep` does not import
rich.text and rich.console for it (docs/decisions.md#dec-cli-startup). Only `rich.cells` (the
terminal width of a character) is imported here.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len, set_cell_size

GAP = 3  # spaces between two columns (kubectl's tabwriter pads with 3)
MIN_ELIDED = 10  # an elided column keeps at least this many cells
MARKER = "..."  # ASCII, so every encoding can print it


class Cell:
    """One line of table text made of styled parts: what a table needs of rich's `Text`.

    As a `Text`'s, `style` is the cell's base style: it applies to every part, the ones
    appended later too (a status and its reason share the status's colour).

    Args:
        text: the first part (none when empty).
        style: the base rich style, e.g. `green` (shown only on a console with colours).
    """

    __slots__ = ("parts", "style")

    def __init__(self, text: str = "", style: str = ""):
        self.style = style
        self.parts: list[tuple[str, str]] = [(text, "")] if text else []

    @property
    def plain(self) -> str:
        """The text without its styles."""
        return "".join(text for text, _ in self.parts)

    @property
    def cell_len(self) -> int:
        """How many terminal cells the text takes (a CJK character or an emoji takes 2)."""
        return cell_len(self.plain)

    def append(self, text: str, style: str = "") -> Cell:
        """Add `text` in `style` (on top of the base style) at the end; return self."""
        if not text:
            return self
        if self.parts and self.parts[-1][1] == style:  # one run per style, as rich draws it
            self.parts[-1] = (self.parts[-1][0] + text, style)
        else:
            self.parts.append((text, style))
        return self

    def append_text(self, other: Cell) -> Cell:
        """Add `other` at the end, its base style kept on its parts; return self."""
        for text, style in other.parts:
            self.append(text, f"{other.style} {style}".strip())
        return self

    def copy(self) -> Cell:
        """Return a copy that can be changed without changing this one."""
        copied = Cell(style=self.style)
        copied.parts = list(self.parts)
        return copied

    def truncate(self, width: int) -> None:
        """Keep the first `width` cells, as rich's `Text.truncate` (a wide character cut in
        half becomes a space)."""
        plain = self.plain
        if cell_len(plain) <= width:
            return
        kept = set_cell_size(plain, width)
        parts, start = [], 0
        for text, style in self.parts:
            piece = kept[start:start + len(text)]
            if piece:
                parts.append((piece, style))
            start += len(text)
        self.parts = parts

    def to_rich(self):
        """Return the cell as a rich `Text` (imports rich.text)."""
        from rich.text import Text

        return Text.assemble(*self.parts, style=self.style)

    def __rich__(self):
        return self.to_rich()

    def __repr__(self) -> str:
        return f"Cell({self.plain!r})"


class PlainConsole:
    """Where a table goes when no colour would show: plain lines to a text stream.

    What `print_table` and `print_line` use of a rich `Console` (`width`, `print`, `file`),
    without rich. A closed pipe raises `BrokenPipeError` from the stream, as the rich console of
    `cli.env` does.
    """

    def __init__(self, file: Any, width: int):
        self.file = file
        self.width = width

    def print(self, text: str = "", **_options: Any) -> None:
        """Write `text` (a `Cell` or a plain string, never read as markup) and a newline."""
        self.file.write(f"{text.plain if isinstance(text, Cell) else text}\n")
        self.file.flush()


@dataclass(frozen=True)
class Column:
    """A column: its header and whether long cells may be elided to fit the terminal."""

    header: str
    elide: bool = False


def _cut(cell: Any, width: int) -> Any:
    """Return `cell` (a `Cell`, or a rich `Text` of a `get` field) cut to `width` cells, its
    end replaced by `MARKER` when it is longer."""
    if cell.cell_len <= width:
        return cell
    if width <= len(MARKER):
        return type(cell)(MARKER[:width])
    cut = cell.copy()
    cut.truncate(width - len(MARKER))
    cut.append(MARKER, style="dim")
    return cut


def widths_of(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int,
              *, headers: bool = True) -> list[int]:
    """Return the width of each column for rows drawn on `width` cells.

    Args:
        columns: the columns.
        rows: the cells, one `Cell` each (one line: newlines are escaped before).
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


def line(cells: Sequence[Cell], widths: Sequence[int], columns: Sequence[Column], *,
         cut: bool = True) -> Cell:
    """Return one row as one line: each cell padded to its column's width, a longer one cut
    only in an elidable column and only when `cut` (a key cell, or any cell into a pipe, runs
    on, moving the cells after it)."""
    out = Cell()
    last = len(cells) - 1
    for index, (cell, width, column) in enumerate(zip(cells, widths, columns)):
        if column.elide and cut:
            cell = _cut(cell, width)
        out.append_text(cell)
        if index < last:
            out.append(" " * (max(width - cell.cell_len, 0) + GAP))
    return out


def print_table(console: Any, columns: Sequence[Column], rows: Sequence[Sequence[Cell]], *,
                headers: bool = True, fit: bool = True) -> list[int]:
    """Print `rows` under `columns` on `console`, one line per row; return the widths used
    (`--watch` prints later rows with them). `fit=False` (`-o wide`, or a pipe) elides
    nothing: every column is as wide as its widest cell."""
    width = max(console.width, 1) if fit else 10**9
    widths = widths_of(columns, rows, width, headers=headers)
    if headers:
        print_line(console, line([Cell(column.header, "bold") for column in columns],
                                 widths, columns))
    for row in rows:
        print_line(console, line(row, widths, columns))
    return widths


def print_line(console: Any, text: Cell) -> None:
    """Print one line as it is: never wrapped, never cropped at the terminal's edge.

    Args:
        console: a `PlainConsole`, or a rich `Console` (which draws the styles).
        text: the line.
    """
    if isinstance(console, PlainConsole):
        console.print(text)
    else:
        console.print(text.to_rich(), soft_wrap=True, overflow="ignore", crop=False)


def _as_cell(cell: Any) -> Cell:
    """A rich `Text` given where a `Cell` is drawn: its text in its base style."""
    if isinstance(cell, Cell):
        return cell
    return Cell(cell.plain, str(cell.style or ""))


def _one_line(text: Any) -> Any:
    """Return a rich `Text` (or a `Cell`, made one) that is never wrapped by the console."""
    out = text.to_rich() if isinstance(text, Cell) else text.copy()
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
        rows: `(key, value)` pairs, values rich `Text`s (or `Cell`s); keys are shown bold and
            never cut.
        whole: the keys whose values are never elided either (ids, names, paths: they run
            past the edge so they can be copied, as a list's key columns).
    """

    def __init__(self, rows: Sequence[tuple[str, Any]], whole: Sequence[str] = ()):
        self.rows = [(key, value.to_rich() if isinstance(value, Cell) else value)
                     for key, value in rows]
        self.whole = set(whole)

    def __rich_console__(self, console: Any, options: Any):
        from rich.text import Text

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
    newlines must be escaped (`plain_cell`, not `plain(..., multiline=True)`).

    Args:
        title: a bold line above the table.
        columns: the columns.
        rows: the cells (`Cell`s; a rich `Text` is drawn in its base style).
        caption: a line under the table (e.g. "no status change yet").
    """

    def __init__(self, title: str, columns: Sequence[Column], rows: Sequence[Sequence[Any]],
                 caption: str | None = None):
        self.title, self.columns, self.caption = title, columns, caption
        self.rows = [[_as_cell(cell) for cell in row] for row in rows]

    def __rich_console__(self, console: Any, options: Any):
        widths = widths_of(self.columns, self.rows, max(options.max_width, 1))
        yield _one_line(Cell(self.title, "bold"))
        yield _one_line(line([Cell(column.header, "bold") for column in self.columns],
                             widths, self.columns))
        for row in self.rows:
            yield _one_line(line(row, widths, self.columns))
        if self.caption:
            yield _one_line(Cell(self.caption, "dim"))
