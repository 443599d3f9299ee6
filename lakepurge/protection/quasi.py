"""How identifying the columns left in clear are (``lakepurge pseudonymise --check``): pseudonymised data is still
personal data while a person can be singled out by what is left readable. Zip code, birth date and gender single
out 87% of the US population (Sweeney, 2000), though none of them does alone.

For each set of clear columns (every set of up to ``max_columns`` of them), on the rows read:

- the share of rows **unique** on the set (a group of one: that row is singled out by those values);
- **k**, the smallest group's size: the rows are k-anonymous on the set.

A set is flagged when its unique share exceeds ``max_unique_share`` or its k is below ``min_k``. Supersets of a
flagged set are flagged too (adding a column never makes a group larger), so only the minimal flagged sets are
reported and their supersets are not computed. Nulls form a group of their own, as any value does.

On a large dataset the rows are a uniform sample (:class:`Reservoir` per Spark task, merged by weight): uniqueness in
a sample overstates uniqueness in the whole (a row unique in the whole is unique in every sample holding it), so a
sampled check errs on the side of flagging.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from itertools import combinations
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

DEFAULT_MAX_COLUMNS = 3
DEFAULT_MAX_UNIQUE_SHARE = 0.01
DEFAULT_MIN_K = 1  # k-anonymity is reported; required only when asked (--min-k 5)
DEFAULT_SAMPLE_ROWS = 1_000_000  # rows analysed at most: a uniform sample beyond


@dataclass(frozen=True)
class ColumnSet:
    columns: tuple[str, ...]
    rows: int
    groups: int
    unique_share: float  # rows alone in their group / rows
    k: int  # the smallest group's size
    flagged: bool

    def describe(self) -> str:
        return (
            f"{' + '.join(self.columns)}: {self.unique_share:.1%} of rows unique, k = {self.k}"
            f" ({self.groups} group(s) of {self.rows} row(s))"
        )


@dataclass(frozen=True)
class QuasiReport:
    rows: int  # rows analysed
    rows_read: int  # rows in the dataset (more than rows when sampled)
    columns: tuple[str, ...]
    max_columns: int
    max_unique_share: float
    min_k: int
    sets: tuple[ColumnSet, ...]  # every set computed, the flagged ones minimal

    @property
    def flagged(self) -> tuple[ColumnSet, ...]:
        return tuple(s for s in self.sets if s.flagged)

    @property
    def sampled(self) -> bool:
        return self.rows < self.rows_read

    def summary(self) -> dict[str, Any]:
        return {
            "rows_analysed": self.rows,
            "rows_read": self.rows_read,
            "sampled": self.sampled,
            "columns": list(self.columns),
            "max_columns": self.max_columns,
            "max_unique_share": self.max_unique_share,
            "min_k": self.min_k,
            "flagged": [_set_summary(s) for s in self.flagged],
            "sets": [_set_summary(s) for s in self.sets],
        }

    def lines(self) -> list[str]:
        where = f"a uniform sample of {self.rows} of {self.rows_read} rows" if self.sampled else f"{self.rows} rows"
        lines = [
            f"quasi-identifiers: {len(self.columns)} clear column(s) ({', '.join(self.columns) or 'none'}), sets of up"
            f" to {self.max_columns}, on {where}; flagged when more than {self.max_unique_share:.1%} of rows are"
            f" unique" + (f" or k < {self.min_k}" if self.min_k > 1 else "")
        ]
        if not self.flagged:
            lines.append("  no column set singles rows out beyond those limits")
        for flagged in self.flagged:
            lines.append(f"  WARNING {flagged.describe()}")
        return lines


def _set_summary(s: ColumnSet) -> dict[str, Any]:
    return {
        "columns": list(s.columns),
        "unique_share": round(s.unique_share, 6),
        "k": s.k,
        "groups": s.groups,
        "flagged": s.flagged,
    }


def analyse(
    table: pa.Table,
    rows_read: int | None = None,
    max_columns: int = DEFAULT_MAX_COLUMNS,
    max_unique_share: float = DEFAULT_MAX_UNIQUE_SHARE,
    min_k: int = DEFAULT_MIN_K,
) -> QuasiReport:
    """The column sets of a table's columns, each measured, the minimal flagged ones marked."""
    import pyarrow as pa

    columns = tuple(table.column_names)
    sets: list[ColumnSet] = []
    flagged: list[frozenset[str]] = []
    rows = table.num_rows
    for size in range(1, min(max_columns, len(columns)) + 1):
        for chosen in combinations(columns, size):
            if any(f <= set(chosen) for f in flagged):
                continue  # a superset of a flagged set: flagged already
            if rows == 0:
                sets.append(ColumnSet(chosen, 0, 0, 0.0, 0, False))
                continue
            counts = table.select(list(chosen)).group_by(list(chosen), use_threads=True).aggregate([([], "count_all")])
            sizes = counts.column("count_all")
            alone = pa.compute.sum(pa.compute.equal(sizes, 1).cast(pa.int64())).as_py() or 0
            smallest = pa.compute.min(sizes).as_py()
            share = alone / rows
            hit = share > max_unique_share or smallest < min_k
            if hit:
                flagged.append(frozenset(chosen))
            sets.append(ColumnSet(chosen, rows, counts.num_rows, share, smallest, hit))
    return QuasiReport(
        rows, rows_read if rows_read is not None else rows, columns, max_columns, max_unique_share, min_k, tuple(sets)
    )


@dataclass
class Reservoir:
    """A uniform sample of at most ``size`` of the rows one task saw (Algorithm R), and how many it saw."""

    size: int
    seen: int = 0
    rows: list[tuple[Any, ...]] = field(default_factory=list)

    def add(self, row: tuple[Any, ...], chance: random.Random) -> None:
        self.seen += 1
        if len(self.rows) < self.size:
            self.rows.append(row)
            return
        slot = chance.randrange(self.seen)
        if slot < self.size:
            self.rows[slot] = row


def merge(reservoirs: list[Reservoir], size: int, chance: random.Random) -> tuple[list[tuple[Any, ...]], int]:
    """One uniform sample of at most ``size`` rows from the tasks' samples: each task's share in proportion to the
    rows it saw. Returns (rows, rows seen in all)."""
    seen = sum(r.seen for r in reservoirs)
    if seen <= size:
        return [row for r in reservoirs for row in r.rows], seen
    sample: list[tuple[Any, ...]] = []
    for reservoir in reservoirs:
        share = min(len(reservoir.rows), round(size * reservoir.seen / seen))
        sample += chance.sample(reservoir.rows, share)
    return sample, seen
