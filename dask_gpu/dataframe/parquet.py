"""Parquet read by partitions planned from the files' footers: each partition is one reader call over whole row
groups, about ``gpu.partition-size`` of the data the query keeps, whatever the files' layout.

The plan, made on the client from footers kept by :mod:`.footers`:

- the columns the query uses (dask pushes its column projections into the read);
- the row groups whose statistics may pass the query's filters (comparisons and ``isin`` of a column with values,
  pushed into the read as filters; the filter itself stays above the read, so that its answer is dask's);
- what the filters keep, tried on a sample of those row groups;
- partitions of about the target bytes of what is kept, and of at most :data:`READ_FACTOR` times that read:
  a small table, or a large one filtered to little, is one partition, which dask then joins by broadcasting it,
  reduces without a shuffle, and sorts where it is. More than one partition are a multiple of the GPU workers;
- a read of more than the target is spread over the GPU workers, a partition or more each, however little it
  keeps: one GPU reading it all would leave the others waiting.

A read can also be made whole (:func:`whole`): each of its partitions all of it, as :mod:`.planner` reads a small
side of a join where the tasks of the other side are.

Files with an index stored as columns, hive-partitioned directories and other readers' options are read by
dask-cudf's reader instead (:func:`readable` says which).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import threading

from dask_gpu import internals
from dask_gpu.dataframe import footers

READ_FACTOR = 4  # the most a partition reads, as a multiple of the target: the rest is filtered out
CLEAN_SLACK = 1 / 5  # how far from its goal a cut may move to fall between row groups that share no key
READ_AGAIN = 1 / 16  # the share of a partition's target a small side of a join reads, past which it is read once
EXTENSIONS = (".parq", ".parquet", ".pq")
ENGINES = ("cudf", "pandas")


def files_of(path, storage_options=None) -> tuple:
    """(filesystem, ((path, size, mtime), ...)): the parquet files of a file, a directory, a glob or a list of
    them; None where a directory holds hive partitions (``key=value`` folders)."""
    from fsspec.core import get_fs_token_paths

    fs, _, paths = get_fs_token_paths(path, storage_options=storage_options)
    found = []
    for p in paths:
        if fs.isdir(p):
            inside = fs.find(p, detail=True)
            if any("=" in name[len(p):].rsplit("/", 1)[0] for name in inside):
                return fs, None
            found += sorted((name, info) for name, info in inside.items() if name.endswith(EXTENSIONS)
                            and not name.rsplit("/", 1)[-1].startswith(("_", ".")))
        else:
            found.append((p, fs.info(p)))
    return fs, tuple((name, info.get("size"), info.get("mtime", info.get("modified"))) for name, info in found)


def readable(fs, files) -> bool:
    """Whether this reader takes ``files``: some, of one schema, with nothing pandas restores from its metadata
    (an index, a named one included, or categories): its frames have a default index and the files' types."""
    if not files:
        return False
    first = footers.footer(fs, files[0])
    if not all(footers.footer(fs, file).schema.equals(first.schema) for file in files[1:]):
        return False
    pandas = first.pandas_metadata or {}
    index = pandas.get("index_columns", [])
    return all(isinstance(i, dict) and i.get("kind") == "range" and i.get("name") is None for i in index) and not any(
        c.get("pandas_type") == "categorical" for c in pandas.get("columns", []))


def read_parquet(path, columns=None, *, engine: str, partition_bytes: int, gpus: int = 1, storage_options=None):
    """A dataframe of the parquet files under ``path``; None where :func:`readable` says no."""
    from dask.dataframe.dask_expr import new_collection

    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r}: choose from {', '.join(ENGINES)}")
    fs, files = files_of(path, storage_options)
    if files is None or not readable(fs, files):
        return None
    series = isinstance(columns, str)
    wanted = [columns] if series else (list(columns) if columns is not None else None)
    df = new_collection(ReadParquet(files, wanted, None, engine, int(partition_bytes), int(gpus), storage_options))
    return df[columns] if series else df


def candidates(groups, filters) -> list:
    """The row groups (in order) with rows that may pass ``filters``; the first of all where none may."""
    return [g for g in groups if g.rows and footers.might_match(g, filters)] or list(groups[:1])


def plan(wanted, columns, filters, target: int, gpus: int, share: float) -> tuple:
    """The partitions of reading ``columns`` of ``wanted`` (row groups, in order, as :func:`candidates` picks them)
    under ``filters``, which keep ``share`` of the rows: each a tuple of ``(path, row group indices)``, contiguous
    runs of the row groups."""
    read = _read_columns(columns, filters)
    weights = [max(g.nbytes(columns) * share, g.nbytes(read) / READ_FACTOR) for g in wanted]
    count = max(1, round(sum(weights) / target))  # the nearest: partitions of 0.75 to 1.5 times the target
    if gpus > 1 and sum(g.nbytes(read) for g in wanted) > target:
        count = max(count, gpus)
    if count > 1:
        count = math.ceil(count / gpus) * gpus
    count = max(1, min(count, len(wanted)))
    key = sort_key(wanted, columns) if count > 1 else None
    clean = [c for c in range(1, len(wanted)) if wanted[c].bounds(key)[0] > wanted[c - 1].bounds(key)[1]] if key else []
    return tuple(_pieces(run) for run in _runs(wanted, weights, count, clean))


def sort_key(groups, columns) -> str | None:
    """The first of ``columns`` that ``groups`` (in order) hold sorted: each with exact bounds and no nulls (a null
    key would be in several runs), none starting below where the one before ended, and some above it. Runs of them
    cut between groups that share no value of it hold disjoint ranges of it (a key's rows in one run), as TPC-H's
    ``dbgen`` writes its tables in key order."""
    for column in columns:
        ended, rising = None, False
        for group in groups:
            bounds = group.bounds(column)
            if bounds is None or group.nulls(column) != 0 or (ended is not None and bounds[0] < ended):
                break
            rising = rising or (ended is not None and bounds[0] > ended)
            ended = bounds[1]
        else:
            if rising:
                return column
    return None


def _read_columns(columns, filters) -> set:
    """The columns a read decodes: those it keeps and those its filters test."""
    return set(columns) | {term[0] for conjunction in filters or () for term in conjunction}


def _runs(items, weights, count: int, clean=()) -> list:
    """``items`` cut into ``count`` contiguous runs of about equal weight, none empty: each cut where the weight
    before it comes nearest its share of the whole, at one of the ``clean`` positions (sorted) where one is within
    :data:`CLEAN_SLACK` of a run's weight of it."""
    ends = list(itertools.accumulate(weights))
    total, cuts = ends[-1] if ends else 0, [0]
    for k in range(1, count):
        first, last = cuts[-1] + 1, len(items) - (count - k)  # each run keeps an item, and leaves one for each after
        goal = total * k / count
        after = min(max(bisect.bisect_left(ends, goal) + 1, first), last)  # the first cut at or past the goal
        i = bisect.bisect_left(clean, after)
        options = [c for c in clean[max(i - 1, 0):i + 1]
                   if first <= c <= last and abs(ends[c - 1] - goal) <= CLEAN_SLACK * total / count]
        cuts.append(min(options or (max(after - 1, first), after), key=lambda cut: abs(ends[cut - 1] - goal)))
    cuts.append(len(items))
    return [items[a:b] for a, b in zip(cuts, cuts[1:])]


def _pieces(run) -> tuple:
    pieces = []
    for group in run:
        if pieces and pieces[-1][0] == group.path:
            pieces[-1][1].append(group.index)
        else:
            pieces.append((group.path, [group.index]))
    return tuple((path, tuple(indices)) for path, indices in pieces)


def kept_whole(expr) -> bool:
    """Whether ``expr`` is made of reads of this module and what acts on each of their partitions (joins
    included), and keeps at most their target: read whole (:func:`whole`), it is one partition of about a
    partition's size."""
    reads = _reads(expr)
    return bool(reads) and kept_bytes(expr) <= min(read.partition_bytes for read in reads)


def kept_bytes(expr) -> float:
    """About the bytes that the reads of ``expr`` keep (0 where it is not made of reads)."""
    return sum(read.kept_bytes for read in _reads(expr))


def copies(expr, tasks: int) -> int:
    """In how many copies to read ``expr``, one partition made of reads, where ``tasks`` tasks use it: one for each
    GPU worker that runs some of them, where more tasks than GPU workers would read it again, and it reads at
    least :data:`READ_AGAIN` of a partition's target; else 0 (each task reads it, as dask fuses it into each)."""
    reads = _reads(expr)
    if not reads or expr.npartitions != 1:
        return 0
    gpus = max(read.gpus for read in reads)
    big = sum(read.read_bytes for read in reads) >= min(read.partition_bytes for read in reads) * READ_AGAIN
    return min(gpus, tasks) if big and tasks > gpus else 0


def whole(expr, copies: int = 1):
    """``expr`` with each of its reads made whole: ``copies`` partitions, each all of the read."""
    for read in _reads(expr):
        expr = expr.substitute(read, read.substitute_parameters({"whole": copies}))
    return expr


def _reads(expr) -> list:
    """The reads of ``expr``, where it is made of them and of what acts on each partition; else none."""
    reads = {}
    for node in expr.walk():
        if isinstance(node, ReadParquet) and not internals.partitions_filtered(node):
            reads[node._name] = node
        elif not node.dependencies() or not isinstance(node, (internals.Blockwise, internals.Merge)):
            return []
    return list(reads.values())


def read_pieces(pieces, columns, engine: str, storage_options=None, keep=None):
    """One partition: ``columns`` of the row groups of ``pieces`` in one reader call (``keep`` of them)."""
    frame = _read(pieces, columns, engine, storage_options)
    return frame if keep is None else frame[keep]


def _read(pieces, columns, engine: str, storage_options):
    paths, groups = [p for p, _ in pieces], [list(g) for _, g in pieces]
    if engine == "cudf":
        if storage_options is None and not any("://" in path for path in paths):
            return _read_on_own_stream(paths, columns, groups)
        import cudf

        return cudf.read_parquet(paths, columns=columns, row_groups=groups, use_pandas_metadata=False,
                                 storage_options=storage_options)
    import pyarrow as pa
    import pyarrow.parquet as pq
    from fsspec.core import url_to_fs

    fs = url_to_fs(paths[0], **(storage_options or {}))[0]
    tables = []
    for path, chosen in zip(paths, groups, strict=True):
        with fs.open(path, "rb") as f:
            tables.append(pq.ParquetFile(f).read_row_groups(chosen, columns=columns, use_pandas_metadata=False))
    return pa.concat_tables(tables).replace_schema_metadata(None).to_pandas()  # as _empty(): see readable()


def _read_on_own_stream(paths, columns, groups):
    """Local files read as ``cudf.read_parquet`` reads them, but on this thread's CUDA stream (:func:`_stream`), not
    the default stream: a read in one of a worker's threads then runs beside the kernels that its other thread's
    tasks queue on the default stream."""
    import cudf
    import pylibcudf as plc

    options = plc.io.parquet.ParquetReaderOptions.builder(plc.io.SourceInfo(paths)).use_pandas_metadata(False).build()
    if columns is not None:
        options.set_column_names(list(columns))
    options.set_row_groups(groups)
    stream = _stream()
    table = plc.io.parquet.read_parquet(options, stream=stream)
    stream.synchronize()  # what uses the frame runs on the default stream, which does not wait for this one
    return cudf.DataFrame.from_pylibcudf(table)


def _stream():
    """This thread's stream for reads, made at its first: one that does not wait for the default stream."""
    stream = getattr(_streams, "stream", None)
    if stream is None:
        from rmm.pylibrmm.stream import CudaStreamFlags, Stream

        stream = _streams.stream = Stream(flags=CudaStreamFlags.NON_BLOCKING)
    return stream


_streams = threading.local()


def _empty(read, columns, engine: str):
    """An empty frame of ``columns`` (all, where None) of the schema of ``read``'s files, in ``engine``'s type: made
    once for each version of the first file, a projection as a selection of all the columns (a cuDF frame made
    from Arrow is cuDF's Python and kernels for each column; a selection is neither), and shared, as dask shares
    the metas it makes."""
    key = (read.operand("files")[0], tuple(columns) if columns is not None else None, engine)
    return footers.kept(_metas, key, lambda: _made_empty(read, columns, engine))


def _made_empty(read, columns, engine: str):
    if columns is not None:
        return _empty(read, None, engine)[list(columns)]
    table = read._footers[0].schema.remove_metadata().empty_table()  # pandas' metadata: see readable()
    if engine == "cudf":
        import cudf

        return cudf.DataFrame.from_arrow(table)
    return table.to_pandas()


_metas: dict = {}  # (the first file of a read, columns, engine) -> an empty frame of them
_plans: dict = {}  # (files, columns, filters, target bytes, GPU workers, whole) -> a read's partitions
_kept_rows: dict = {}  # (files, filters) -> the row groups that may pass the filters, and the share of rows that do


class ReadParquet(internals.PartitionsFiltered, internals.BlockwiseIO):
    """Parquet files read in the partitions :func:`plan` makes (operands: the files with their sizes and times,
    the columns, the filters in normal form, the engine, the target bytes, the GPU workers, the storage options,
    and ``whole``: 0, or as many partitions each reading all of it)."""

    _parameters = ["files", "columns", "filters", "engine", "partition_bytes", "gpus", "storage_options", "whole",
                   "_partitions"]
    _defaults = {"columns": None, "filters": None, "engine": "cudf", "partition_bytes": 2**31, "gpus": 1,
                 "storage_options": None, "whole": 0, "_partitions": None}
    _absorb_projections = True

    def __reduce__(self):
        """As dask pickles an expression, with its cached properties but the filesystem and the footers: the
        footers of a large table are far larger than its plan, and whoever takes the plan needs none."""
        reconstruct, (*arguments, cached) = super().__reduce__()
        return reconstruct, (*arguments, {k: v for k, v in cached.items() if k not in ("_fs", "_footers")})

    @functools.cached_property
    def _fs(self):
        from fsspec.core import url_to_fs

        return url_to_fs(self.operand("files")[0][0], **(self.storage_options or {}))[0]

    @functools.cached_property
    def _footers(self) -> list:
        return [footers.footer(self._fs, file) for file in self.operand("files")]

    @functools.cached_property
    def _meta(self):
        return _empty(self, self.operand("columns"), self.engine)

    @property
    def columns(self) -> list:
        given = self.operand("columns")
        return list(given) if given is not None else list(self._footers[0].schema.names)

    @functools.cached_property
    def _plan(self) -> tuple:
        """The partitions, made once for each files, columns, filters and sizing: the optimizer makes a read anew
        for each projection and filter it pushes in, and asks each for its partitions."""
        key = self.operand("files"), tuple(self.columns), self.filters, self.partition_bytes, self.gpus, self.whole
        return footers.kept(_plans, key, self._planned)

    def _planned(self) -> tuple:
        groups, share = self._kept_rows
        if self.whole:
            return (_pieces(groups),) * self.whole
        return plan(groups, self.columns, self.filters, self.partition_bytes, self.gpus, share)

    @property
    def _kept_rows(self) -> tuple:
        """The row groups that may hold rows passing the filters, and the share of their rows that pass: made once
        for each files and filters, whatever the columns read."""
        return footers.kept(_kept_rows, (self.operand("files"), self.filters), self._rows_kept)

    def _rows_kept(self) -> tuple:
        groups = candidates([g for f in self._footers for g in f.row_groups], self.filters)
        return groups, footers.selectivity(self._fs, groups, self.filters)

    @functools.cached_property
    def key_ranges(self) -> tuple | None:
        """``(column, ((low, high), ...))``: the column of the files' order (:func:`sort_key`) and each partition's
        range of it, where there are several partitions and these ranges are disjoint and ascending; else None."""
        plan = self._plan
        if len(plan) < 2 or self.whole or internals.partitions_filtered(self):
            return None
        groups = {(g.path, g.index): g for footer in self._footers for g in footer.row_groups}
        runs = [[groups[(path, i)] for path, indices in pieces for i in indices] for pieces in plan]
        key = sort_key([g for run in runs for g in run], self.columns)
        if key is None:
            return None
        ranges = tuple((run[0].bounds(key)[0], run[-1].bounds(key)[1]) for run in runs)
        if any(high >= low for (_, high), (low, _) in zip(ranges, ranges[1:])):
            return None
        return key, ranges

    @property
    def unique_partition_mapping_columns_from_shuffle(self) -> set:
        """The column of :attr:`key_ranges`: each of its values in one partition, as a shuffle on it would leave
        them (in other partitions than its hash would: :mod:`.partitioning` keeps joins from pairing them so)."""
        return {self.key_ranges[0]} if self.key_ranges else set()

    @property
    def read_bytes(self) -> int:
        """The bytes this read decodes: its columns and its filters' of the row groups that may pass them."""
        read = _read_columns(self.columns, self.filters)
        return sum(g.nbytes(read) for g in self._kept_rows[0])

    @property
    def kept_bytes(self) -> float:
        """About the bytes of what this read keeps: its columns of the row groups that may pass its filters, times
        the share of their rows that do."""
        groups, share = self._kept_rows
        return sum(g.nbytes(self.columns) for g in groups) * share

    def _divisions(self):
        return (None,) * (len(self._plan) + 1)

    def _filtered_task(self, name, index: int):
        from dask.task_spec import Task

        columns = self.operand("columns")
        if columns == []:  # no column, but the rows: read the narrowest, then none of it
            return Task(name, read_pieces, self._plan[index], [self._narrowest], self.engine, self.storage_options,
                        [], _data_producer=True)
        return Task(name, read_pieces, self._plan[index], columns, self.engine, self.storage_options,
                    _data_producer=True)

    @functools.cached_property
    def _narrowest(self) -> str:
        """The column that takes the least memory."""
        groups = self._footers[0].row_groups
        return min(self._footers[0].schema.names, key=lambda c: sum(g.sizes.get(c, 0) for g in groups))

    def _filter_passthrough_available(self, parent, dependents) -> bool:
        """Whether ``parent``, a filter, has terms to push into this read. dask pushes no column projection
        through a filter while it does: the filter must meet the read first."""
        return internals.is_filter_pushdown_available(self, parent, dependents) and self._with_filters(
            parent) is not None

    def _simplify_up(self, parent, dependents):
        if self._name not in dependents:
            # made in this pass, after the map of what uses what: a projection now would read some columns in a
            # read of their own, planned in other partitions than the read of the others
            return None
        if isinstance(parent, internals.Index):
            return self._index_only(parent, dependents)
        if isinstance(parent, internals.Filter) and self._filter_passthrough_available(parent, dependents):
            return self._with_filters(parent)
        if isinstance(parent, internals.Len) and not self.filters and not internals.partitions_filtered(self):
            return internals.Literal(sum(g.rows for f in self._footers for g in f.row_groups))
        return super()._simplify_up(parent, dependents)

    def _index_only(self, parent, dependents):
        """The index of a read of the columns that this read's other users need, if any."""
        needed = set(internals.determine_column_projection(self, parent, dependents))
        columns = [c for c in self.columns if c in needed]
        if columns == self.columns:
            return None
        return internals.Index(self.substitute_parameters({"columns": columns}))

    def _with_filters(self, parent):
        """The filter's terms that the read can plan with, pushed into it; the filter stays above it (asked
        of each pair once: dask asks as it simplifies the filter, and as it would push projections through)."""
        return footers.kept(_pushed, (self._name, parent._name), lambda: self._pushed_into(parent))

    def _pushed_into(self, parent):
        found = conjunctions(parent.predicate, self)
        if not found:
            return None
        known = self.filters or ((),)
        combined = _simplest({frozenset(a) | frozenset(b) for a in known for b in found})
        if combined == self.filters:
            return None
        read = self.substitute_parameters({"filters": combined})
        return internals.Filter(read, parent.predicate.substitute(self, read))


_pushed: dict = {}  # (a read's name, a filter's name) -> the filter over the read with its terms, or None

_OPS = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
MAX_CONJUNCTIONS = 16


def conjunctions(predicate, read) -> tuple | None:
    """The terms of ``predicate`` on ``read``'s columns that a read can plan with, in normal form: what the
    predicate implies, not all of it (a term the read cannot use is left out of its conjunction)."""
    name = type(predicate).__name__
    if name == "And":
        left, right = conjunctions(predicate.left, read), conjunctions(predicate.right, read)
        if left is None or right is None:
            return left or right
        product = tuple(a + b for a in left for b in right)
        return product if len(product) <= MAX_CONJUNCTIONS else left
    if name == "Or":
        left, right = conjunctions(predicate.left, read), conjunctions(predicate.right, read)
        return left + right if left and right and len(left) + len(right) <= MAX_CONJUNCTIONS else None
    term = _term(predicate, read)
    return ((term,),) if term else None


def _simplest(conjunctions: set) -> tuple:
    """A disjunction of ``conjunctions`` (sets of terms) without those that another implies, in one order."""
    kept = [c for c in conjunctions if not any(other < c for other in conjunctions)]
    return tuple(sorted((tuple(sorted(c, key=repr)) for c in kept), key=repr))


def _term(predicate, read):
    name = type(predicate).__name__
    if name == "Isin":
        column = _column(predicate.frame, read)
        values = internals.isin_values(predicate)
        return (column, "in", tuple(values)) if column and values is not None and len(values) else None
    if name not in _OPS:
        return None
    left, right = predicate.left, predicate.right
    op = _OPS[name]
    if isinstance(right, internals.Expr):
        left, right, op = right, left, _FLIP[op]
    column = _column(left, read)
    if column is None or isinstance(right, internals.Expr) or not _scalar(right):
        return None
    return column, op, right


def _column(expr, read):
    """The column of ``read`` that ``expr`` selects, or None."""
    if isinstance(expr, internals.Projection) and expr.frame._name == read._name:
        column = expr.operand("columns")
        return column if isinstance(column, str) else None
    return None


def _scalar(value) -> bool:
    import datetime

    import numpy as np

    return isinstance(value, (str, bool, int, float, np.generic, datetime.date, datetime.datetime)) and not (
        isinstance(value, float) and math.isnan(value))
