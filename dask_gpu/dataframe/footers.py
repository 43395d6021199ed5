"""What parquet footers tell a planner, read once per file: row groups, their rows, the bytes each column takes in
memory once read, and the statistics that let a filter skip a row group.

A footer is kept by the file's path, size and modification time, so that a query run again plans from memory and
a file written anew is read anew. Filters are in pyarrow's disjunctive normal form, as tuples: a tuple of
conjunctions, each a tuple of ``(column, op, value)`` with ``op`` one of ``== != < <= > >= in``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import operator

LIMIT = 65_536  # footers kept; past it, they are read again
SAMPLE_ROWS = 65_536  # rows of each sampled row group that a filter is tried on
SAMPLES = 3  # row groups sampled, spread over those that may match
SAMPLES_KEPT = 64  # sampled rows kept, each of a few row groups and columns; past it, they are read again
FEW_DISTINCT = 1 / 1000  # distinct rows in a sample, as a share of its rows, under which it has seen them all

_footers: dict = {}  # (path, size, modification time) -> Footer
_samples: dict = {}  # (row groups' keys, columns) -> a table of those row groups' first rows of the columns

# what a column of each physical type takes in memory a row; other types (strings, decimals) are measured
_WIDTH = {"BOOLEAN": 1, "INT32": 4, "FLOAT": 4, "INT64": 8, "INT96": 8, "DOUBLE": 8}
_VARIABLE_ROW = 8  # the least a row of a variable-width column takes in memory: an offset and a few bytes

_COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
            ">=": operator.ge}


@dataclasses.dataclass(frozen=True)
class RowGroup:
    """One row group of one file: its rows, each column's bytes in memory, and its file's footer, whose statistics
    give a column's (min, max) where a filter asks (pyarrow makes Python objects of each column's statistics:
    read for the columns filtered on only)."""

    path: str
    index: int
    rows: int
    sizes: dict
    metadata: object = None  # pyarrow's FileMetaData of the file
    positions: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)  # column -> its position
    _bounds: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)  # column -> (min, max) or None
    _nulls: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)  # column -> null count or None

    def nbytes(self, columns) -> int:
        return sum(self.sizes.get(name, 0) for name in columns)

    def bounds(self, column):
        """``column``'s (min, max) in this row group, None where the footer has no exact ones; read once."""
        if column not in self._bounds:
            position = self.positions.get(column)
            self._bounds[column] = None if position is None else _exact_bounds(
                self.metadata.row_group(self.index).column(position).statistics)
        return self._bounds[column]

    def nulls(self, column) -> int | None:
        """``column``'s nulls in this row group, None where the footer does not count them; read once."""
        if column not in self._nulls:
            position = self.positions.get(column)
            stats = None if position is None else self.metadata.row_group(self.index).column(position).statistics
            self._nulls[column] = stats.null_count if stats is not None and stats.has_null_count else None
        return self._nulls[column]


@dataclasses.dataclass(frozen=True)
class Footer:
    path: str
    schema: object  # pyarrow.Schema
    pandas_metadata: dict | None
    row_groups: tuple


def kept(cache: dict, key, compute, limit: int | None = None):
    """``cache[key]``, made by ``compute()`` the first time; past ``limit`` keys (:data:`LIMIT` unless given), the
    cache starts again."""
    if key not in cache:
        found = compute()  # first: it may keep something of its own in the cache
        if len(cache) >= (LIMIT if limit is None else limit):
            cache.clear()
        cache[key] = found
    return cache[key]


def footer(fs, file: tuple) -> Footer:
    """The footer of ``file``, a (path, size, modification time) of ``fs``: read once for each version of it."""
    return kept(_footers, file, lambda: _read_footer(fs, file[0]))


def _read_footer(fs, path: str) -> Footer:
    import pyarrow.parquet as pq

    with fs.open(path, "rb") as f:
        metadata = pq.ParquetFile(f).metadata
    schema = metadata.schema.to_arrow_schema()
    columns = [metadata.schema.column(j).path for j in range(metadata.num_columns)]
    positions = {name: j for j, name in enumerate(columns) if "." not in name}  # nested columns have no bounds
    groups = tuple(_row_group(path, i, metadata, columns, positions) for i in range(metadata.num_row_groups))
    return Footer(path, schema, schema.pandas_metadata, groups)


def _row_group(path: str, index: int, metadata, columns: list, positions: dict) -> RowGroup:
    group, sizes = metadata.row_group(index), {}
    for j, column in enumerate(columns):
        chunk = group.column(j)
        name = column.split(".")[0]
        width = _WIDTH.get(chunk.physical_type)
        size = group.num_rows * width if width else max(chunk.total_uncompressed_size, group.num_rows * _VARIABLE_ROW)
        sizes[name] = sizes.get(name, 0) + size
    return RowGroup(path, index, group.num_rows, sizes, metadata, positions)


def _exact_bounds(stats):
    """(min, max) of a column chunk's statistics, where they are there and the column's own (a writer may truncate
    long strings' bounds); None otherwise."""
    if stats is None or not stats.has_min_max or getattr(stats, "is_min_value_exact", True) is False or getattr(
            stats, "is_max_value_exact", True) is False:
        return None
    return stats.min, stats.max


def might_match(group: RowGroup, filters) -> bool:
    """Whether some row of ``group`` may pass ``filters``, by its columns' bounds (True where they cannot tell)."""
    return not filters or any(all(_may_hold(group, term) for term in conjunction) for conjunction in filters)


def _may_hold(group: RowGroup, term) -> bool:
    column, op, value = term
    bounds = group.bounds(column)
    if bounds is None:
        return True
    low, high = bounds
    try:
        if op == "in":
            return any(low <= v <= high for v in value)
        if op == "==":
            return low <= value <= high
        if op == "!=":
            return not (low == high == value)
        if op in ("<", "<="):
            return _COMPARE[op](low, value)
        if op in (">", ">="):
            return _COMPARE[op](high, value)
    except TypeError:  # bounds and value of types that do not compare
        return True
    return True


def selectivity(fs, groups, filters) -> float:
    """The share of ``groups``' rows that ``filters`` keep, tried on the first rows of a few of them (read once for
    each row groups and columns, :func:`_sample`); 1.0 where there is no filter or it cannot be tried. A read asks
    once for each of its files and filters, and keeps the answer."""
    if not filters or not groups:
        return 1.0
    import pyarrow.parquet as pq

    columns = tuple(sorted({term[0] for conjunction in filters for term in conjunction}))
    try:
        expression = pq.filters_to_expression([list(c) for c in filters])
        rows = _sample(fs, _picked(groups), columns)
        kept_rows = rows.filter(expression).num_rows
    except (TypeError, ValueError, NotImplementedError):  # a filter pyarrow cannot try (its errors derive from these)
        return 1.0
    return (kept_rows + 1) / (rows.num_rows + 1) if rows.num_rows else 1.0


def distinct(fs, groups, columns) -> float:
    """About how many distinct rows of ``columns`` ``groups`` hold, told from the first rows of a few of them (as
    :func:`selectivity` samples them): the sample's count where the sample is all of the rows, or where it holds few
    (at most :data:`FEW_DISTINCT` of its rows: the values of a flag or a category, all of them seen); else the
    sample's share of distinct rows of all of them."""
    rows = _sample(fs, _picked(groups), tuple(sorted(columns)))
    seen = rows.group_by(list(columns)).aggregate([]).num_rows if rows.num_rows else 0
    total = sum(g.rows for g in groups)
    if rows.num_rows >= total or seen <= rows.num_rows * FEW_DISTINCT:
        return seen
    return total * seen / rows.num_rows


def _picked(groups) -> list:
    """The row groups a sample reads: :data:`SAMPLES`, spread over ``groups``."""
    count = min(SAMPLES, len(groups))
    return [groups[i * (len(groups) - 1) // max(count - 1, 1)] for i in range(count)]


def _sample(fs, picked, columns: tuple):
    """A table of the first rows of ``columns`` in each of the ``picked`` row groups, read at once and kept: other
    filters on the same columns (dates, mostly), of this query or the next, are tried on the rows read for the
    first."""
    import pyarrow as pa

    def read():
        with concurrent.futures.ThreadPoolExecutor(len(picked)) as pool:  # reading and decoding free the GIL
            return pa.concat_tables(pool.map(lambda group: _first_rows(fs, group, columns), picked))

    return kept(_samples, (tuple((g.path, g.index) for g in picked), columns), read, limit=SAMPLES_KEPT)


def _first_rows(fs, group, columns: tuple):
    """A table of ``group``'s first rows of ``columns``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with fs.open(group.path, "rb") as f:  # the footer read already
        file = pq.ParquetFile(f, metadata=group.metadata)
        batch = next(file.iter_batches(SAMPLE_ROWS, row_groups=[group.index], columns=list(columns)), None)
        return file.schema_arrow.empty_table().select(list(columns)) if batch is None else pa.Table.from_batches(
            [batch])
