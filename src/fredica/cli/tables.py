"""List tables that fit the terminal (`pipeline list`, `task list`, `node list`).

A table is a list of `Column`s. At the terminal's width (rich reads `COLUMNS`, else the
terminal, like `shutil.get_terminal_size`) the table keeps every column it can at full width;
when it does not fit, IDs are shortened to their first 8 characters (every command takes a
unique prefix), then the least important columns are left out, one at a time, until it fits.
The flexible column (a title) takes what is left, at least `FLEX_MIN` characters (a longer
value ends in an ellipsis); headers and the other cells are never cut. `--wide` shows every
column at full width whatever the terminal; `--json` prints the rows for scripts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

Row = dict[str, Any]
SHORT_ID = 8
FLEX_MIN = 30
"""The flexible column keeps at least this many characters (file names up to 30 stay whole)."""
GAP = 3
"""Characters between two columns (a space of padding each side and the separator)."""


@dataclass(frozen=True, slots=True)
class Column:
    """One column: its header, its cell (`short`: the cell once IDs are shortened),
    `priority` (0: always shown; higher numbers are left out first), `flex` (takes the width
    that is left), `wide_only` (shown only with `--wide`) and the cell's style."""

    header: str
    cell: Callable[[Row], str]
    priority: int = 0
    short: Callable[[Row], str] | None = None
    flex: bool = False
    wide_only: bool = False
    style: Callable[[Row], str] | None = None


def short_id(value: str | None) -> str:
    return (value or "—")[:SHORT_ID]


def age(seconds: float) -> str:
    """`12s`, `5m`, `3h`, `2d`."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def ago(seconds: float) -> str:
    """`12s ago`, `5m ago`, `3h ago`, `2d ago`."""
    return f"{age(seconds)} ago"


def created(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


@dataclass(frozen=True, slots=True)
class Layout:
    """The columns a table shows, each with its cells and its width."""

    columns: tuple[Column, ...]
    cells: tuple[tuple[str, ...], ...]  # per column, per row
    widths: tuple[int, ...]

    @property
    def width(self) -> int:
        return sum(self.widths) + GAP * max(0, len(self.widths) - 1)


def _natural(column: Column, values: Sequence[str]) -> int:
    return max([len(column.header), *(len(v) for v in values)])


def layout(columns: Sequence[Column], rows: Sequence[Row], width: int, wide: bool) -> Layout:
    """Which columns fit `width` characters, and how wide each is (see the module's text)."""
    shown = [c for c in columns if wide or not c.wide_only]

    def build(cols: Sequence[Column], shorten: bool, fit: bool) -> Layout:
        cells = tuple(
            tuple((c.short if shorten and c.short else c.cell)(r) for r in rows) for c in cols
        )
        widths = [_natural(c, v) for c, v in zip(cols, cells, strict=True)]
        if fit:
            fixed = sum(w for c, w in zip(cols, widths, strict=True) if not c.flex)
            room = width - fixed - GAP * max(0, len(cols) - 1)
            for i, c in enumerate(cols):
                if c.flex:
                    floor = min(widths[i], max(FLEX_MIN, len(c.header)))
                    widths[i] = max(floor, min(widths[i], room))
        return Layout(tuple(cols), cells, tuple(widths))

    if wide:
        return build(shown, shorten=False, fit=False)
    full = build(shown, shorten=False, fit=True)
    if full.width <= width:
        return full
    cols = list(shown)
    current = build(cols, shorten=True, fit=True)
    while current.width > width:
        droppable = [c for c in cols if c.priority > 0]
        if not droppable:
            break  # the essential columns alone are wider than the terminal
        cols.remove(max(droppable, key=lambda c: (c.priority, cols.index(c))))
        current = build(cols, shorten=True, fit=True)
    return current


def render(columns: Sequence[Column], rows: Sequence[Row], width: int, wide: bool) -> Table:
    """The table of `rows` laid out for `width` (`layout`)."""
    plan = layout(columns, rows, width, wide)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1))
    for column, size in zip(plan.columns, plan.widths, strict=True):
        table.add_column(
            column.header,
            width=size,
            min_width=size,
            no_wrap=True,
            overflow="ellipsis" if column.flex else "fold",
        )
    for i, row in enumerate(rows):
        table.add_row(
            *(
                Text(cells[i], style=column.style(row) if column.style else "")
                for column, cells in zip(plan.columns, plan.cells, strict=True)
            )
        )
    return table


def show(
    console: Console,
    columns: Sequence[Column],
    rows: Sequence[Row],
    *,
    wide: bool = False,
    as_json: dict[str, Any] | None = None,
) -> None:
    """Print `rows`: as JSON (`as_json`, the whole answer for scripts), else as a table
    fitted to the console's width (every column at full width with `wide`)."""
    if as_json is not None:
        console.out(json.dumps(as_json, indent=2, ensure_ascii=False), highlight=False)
        return
    width = console.size.width
    table = render(columns, rows, width, wide)
    if wide:
        plan_width = layout(columns, rows, width, True).width
        # a console of the table's own width: rich keeps a print within its console's width
        Console(
            file=console.file,
            width=max(width, plan_width),
            force_terminal=console.is_terminal,
            color_system=console.color_system,  # type: ignore[arg-type]
            no_color=console.no_color,
        ).print(table)
    else:
        console.print(table)
