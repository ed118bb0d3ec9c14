"""One table from the same comparison run with several seeds: each number as the mean over the
seeds with its range, ``mean (min–max)`` (issue 45: no headline figure from one seed).

The inputs are the Markdown tables a comparison script writes once per seed (``roc_methods.py
--seed S --out DIR-S`` writes ``DIR-S/roc-DATASET.md``; ``negative_loss.py`` likewise): the same
header and the same rows in the same order, rows told apart by their non-numeric cells. A cell
that is a number in every table becomes ``mean (min–max)``; any other cell must read the same in
every table and is kept. Two rows whose ranges overlap are a tie at these seeds, which is how the
docs word them. ``--drop COLUMN`` leaves out a column that is not a result and differs by seed
(a run's wall-clock time, say).

    python benchmarks/seeds_table.py results/roc-s0/roc-synth-voices.md \\
        results/roc-s1/roc-synth-voices.md results/roc-s2/roc-synth-voices.md \\
        --out results/roc-synth-voices-seeds.md [--digits 3] [--drop wall-clock ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def read_table(path: Path) -> tuple[list[str], list[list[str]]]:
    """The header and the rows of the first Markdown table in ``path``."""
    lines = [line.strip() for line in path.read_text().splitlines() if line.strip().startswith("|")]
    if len(lines) < 2:
        raise ValueError(f"{path}: no Markdown table")
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return cells[0], cells[2:]


def mean_range(mean: float, low: float, high: float, digits: int = 3) -> str:
    """A figure over seeds as the docs write it: ``mean (min–max)``, or the figure alone where
    every seed gave the same (one seed, or a figure the seed does not move). The benchmarks that
    table seeds (privacy curve, deployment, DP-FTRL) write their cells with it."""
    if low == high:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ({low:.{digits}f}–{high:.{digits}f})"


def number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def combine(tables: list[tuple[list[str], list[list[str]]]], digits: int) -> list[list[str]]:
    """The rows of :func:`read_table`'s ``tables`` as ``mean (min–max)`` per numeric cell."""
    header, first = tables[0]
    for other_header, rows in tables[1:]:
        if other_header != header or len(rows) != len(first):
            raise ValueError("the tables differ in their header or number of rows")
    combined = []
    for index, row in enumerate(first):
        cells = []
        for column, cell in enumerate(row):
            values = [rows[index][column] for _, rows in tables]
            numbers = [number(value) for value in values]
            if all(value is not None for value in numbers):
                places = digits if any("." in value for value in values) else 0
                mean = sum(numbers) / len(numbers)
                cells.append(mean_range(mean, min(numbers), max(numbers), places))
            elif len(set(values)) == 1:
                cells.append(cell)
            else:
                raise ValueError(f"row {index + 1}, column {header[column]!r}: {values} differ")
        combined.append(cells)
    return combined


def drop(
    table: tuple[list[str], list[list[str]]], columns: list[str]
) -> tuple[list[str], list[list[str]]]:
    """``table`` without the named ``columns`` (each must be one of its header's)."""
    header, rows = table
    if unknown := [name for name in columns if name not in header]:
        raise ValueError(f"--drop {unknown[0]!r}: no such column (one of {', '.join(header)})")
    keep = [index for index, name in enumerate(header) if name not in columns]
    return [header[i] for i in keep], [[row[i] for i in keep] for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tables", type=Path, nargs="+", help="one table per seed")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--digits", type=int, default=3)
    parser.add_argument(
        "--drop", action="append", default=[], metavar="COLUMN",
        help="a column to leave out (repeat for several): one that differs by seed, not a result",
    )  # fmt: skip
    args = parser.parse_args()
    try:
        tables = [drop(read_table(path), args.drop) for path in args.tables]
        rows = combine(tables, args.digits)
    except (OSError, ValueError) as error:
        print(f"seeds_table: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    header = tables[0][0]
    lines = [
        f"# {len(tables)} seeds: mean (min–max)",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
