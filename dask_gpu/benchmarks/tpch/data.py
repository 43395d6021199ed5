"""TPC-H data and answers from DuckDB: its ``dbgen`` writes the tables, its reference queries give the answers.

The tables are written as parquet folders, one per table, with dates stored as timestamps and decimals as
doubles (what a data scientist's files hold). DuckDB's TPC-H extension comes from the
``duckdb-extension-tpch`` package of DuckDB's version, loaded from its file: no extension server is needed.

Scale factors above :data:`STEP_SCALE` are made in steps (dbgen's ``children`` and ``step``), each holding at most
that much in DuckDB's memory; the steps run in processes side by side, as many as the cores and the memory allow.
dbgen makes a step's rows on one core: scale factor 100 in one process took about half an hour on 16 cores, and ten
steps of 10 side by side about 4.5 minutes on 64. Smaller steps, a round of them a core each, take the time of
the scale factor over the cores (:func:`steps`).

The same rows can be written in other layouts (:data:`LAYOUTS`), as the files users have are: pyarrow's and
pandas' defaults, DuckDB's output of many threads at once, many small files, one file a table. :func:`relayout`
writes the suite's data again in one of them.

Query 11's fraction is the specification's 0.0001 / SF; DuckDB's own text keeps scale factor 1's.
"""

from __future__ import annotations

import glob
import hashlib
import json
import math
import multiprocessing
import os
import re
import shutil
from concurrent.futures import ProcessPoolExecutor

TABLES = ("lineitem", "orders", "customer", "part", "partsupp", "supplier", "nation", "region")
QUERIES = tuple(range(1, 23))
STEP_SCALE = 10  # the most scale factor one step holds
STEP_MEMORY = 16 * 2**30  # what a step of STEP_SCALE takes in DuckDB's memory, with room to spare
ROWS_PER_FILE = 8_000_000  # lineitem at scale factor 10 in 8 files: few tasks, and reads spread over the cores
FORMAT = 1  # change it when the files' form changes, so that old data is written again
LAYOUTS = {  # name -> how its files hold a table
    "suite": "files of 8,000,000 rows in dbgen's order, DuckDB's row groups (122,880 rows)",
    "pyarrow": "one file, row groups of 1,048,576 rows (pyarrow's and pandas' to_parquet defaults)",
    "duckdb-threads": "a file a DuckDB thread, rows interleaved, row groups of 1,000,000 rows (PER_THREAD_OUTPUT)",
    "small-files": "a file a row group of DuckDB's (122,880 rows)",
    "one-file": "one file, DuckDB's row groups",
}
DUCKDB_ROWS = 122_880  # rows a row group of DuckDB's default
PYARROW_ROWS = 1_048_576  # rows a row group of pyarrow's default
THREAD_ROWS = 1_000_000  # rows a row group of the per-thread layout
ANSWERS = "answers"  # the folder beside the tables that keeps DuckDB's answers
MISSING = ("the tpch suite needs DuckDB and its TPC-H extension of the same version: "
           "pip install duckdb duckdb-extension-tpch=={version}")


def connect(threads: int | None = None):
    """A DuckDB connection with the TPC-H extension loaded from the ``duckdb-extension-tpch`` package."""
    try:
        import duckdb
    except ImportError:
        raise ImportError(MISSING.format(version="<duckdb's version>")) from None
    try:
        import duckdb_extension_tpch
    except ImportError:
        raise ImportError(MISSING.format(version=duckdb.__version__)) from None
    where = os.path.join(os.path.dirname(duckdb_extension_tpch.__file__), "extensions")
    found = glob.glob(os.path.join(where, f"v{duckdb.__version__}", "*.duckdb_extension"))
    if not found:
        raise ImportError(MISSING.format(version=duckdb.__version__) + f" (none for v{duckdb.__version__} in {where})")
    con = duckdb.connect(config={"allow_unsigned_extensions": "true", **({"threads": threads} if threads else {})})
    con.execute("SET enable_progress_bar = false")  # a bar a statement fills a log that is not a terminal
    con.execute(f"LOAD '{found[0]}'")
    return con


def manifest(scale: float, layout: str = "suite") -> dict:
    return {"scale": scale, "format": FORMAT, "tables": list(TABLES), "layout": layout}


def stale(path: str, scale: float, layout: str = "suite") -> bool:
    """Whether ``path`` lacks the tables of ``scale`` in ``layout`` (its manifest says what is there)."""
    try:
        with open(os.path.join(path, "manifest.json")) as f:
            return json.load(f) != manifest(scale, layout)
    except (OSError, ValueError):
        return True


def check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"--layout {layout}: choose from {', '.join(LAYOUTS)}")
    return layout


def steps(scale: float) -> int:
    """dbgen's steps for ``scale``: one up to :data:`STEP_SCALE`; above it, a round of steps a core each, in as
    few rounds as the memory holds, each step of scale factor 1 to :data:`STEP_SCALE`. dbgen makes each step on one
    core, in about the time its share of the rows takes, so that the rounds take about the scale factor's time over
    the cores (scale factor 100 in 32 steps, 16 at once: 135 s on 16 cores)."""
    if scale <= STEP_SCALE:
        return 1
    cores = os.cpu_count() or 1
    rounds = max(1, math.ceil(_memory(scale) / _available_memory()))
    return max(math.ceil(scale / STEP_SCALE), min(cores * rounds, math.ceil(scale)))


def log_lines(scale: float) -> int:
    """How many lines :func:`generate` logs for ``scale``: a table each, or a step each where there are steps."""
    count = steps(scale)
    return len(TABLES) if count == 1 else count


def parallel_steps(count: int, scale: float) -> int:
    """How many of ``count`` steps of ``scale`` run at once: one a core, each with the memory its share of
    :data:`STEP_MEMORY` takes free."""
    return int(max(1, min(count, os.cpu_count() or 1, _available_memory() // _memory(scale / count))))


def _memory(scale: float) -> float:
    """What a step of ``scale`` takes in DuckDB's memory: its share of :data:`STEP_MEMORY`."""
    return STEP_MEMORY * scale / STEP_SCALE


def _available_memory() -> int:
    import psutil

    return psutil.virtual_memory().available


def generate(path: str, scale: float, log=None, layout: str = "suite") -> bool:
    """Writes the tables of scale factor ``scale`` under ``path``, in ``layout``, unless they are there; True where
    it wrote. Larger scale factors are generated in steps, side by side (:func:`parallel_steps`). An OSError that
    says where and why where writing fails (a full disk, say)."""
    check_layout(layout)
    if not stale(path, scale, layout):
        return False
    try:
        _generate(path, scale, log, layout)
    except Exception as e:
        if not _written_wrong(e):
            raise
        raise OSError(f"writing the TPC-H data under {path} failed ({str(e).strip().splitlines()[0]}); free space "
                      "there or give --data another directory") from None
    return True


def _written_wrong(error: Exception) -> bool:
    """Whether ``error`` is a failure to write files: the system's, or DuckDB's."""
    import duckdb

    return isinstance(error, (OSError, duckdb.IOException))


def _generate(path: str, scale: float, log=None, layout: str = "suite") -> None:
    marker = _emptied(path)
    connect()  # DuckDB and its extension are there: say so here, not in a step's process
    count = steps(scale)
    if count == 1:
        _step(path, scale, 0, 1, None, log, layout)
    else:
        at_once = parallel_steps(count, scale)
        threads = max(1, (os.cpu_count() or 1) // at_once)
        context = multiprocessing.get_context("spawn")  # DuckDB's threads do not survive a fork
        with ProcessPoolExecutor(at_once, mp_context=context) as pool:
            done = [pool.submit(_step, path, scale, step, count, threads, None, layout) for step in range(count)]
            for step, future in enumerate(done):
                future.result()
                if log:
                    log(f"wrote every table (step {step + 1} of {count}, {at_once} at once)")
    with open(marker, "w") as f:
        json.dump(manifest(scale, layout), f)


def _emptied(path: str) -> str:
    """``path`` made ready for new tables (no manifest first, so that data written part way is never reused, and
    no parquet files of the tables); its manifest's path."""
    os.makedirs(path, exist_ok=True)
    marker = os.path.join(path, "manifest.json")
    if os.path.exists(marker):
        os.remove(marker)
    shutil.rmtree(os.path.join(path, ANSWERS), ignore_errors=True)  # the answers of the tables before
    for table in TABLES:
        for old in glob.glob(os.path.join(path, table, "*.parquet")):
            os.remove(old)
        for unmoved in glob.glob(os.path.join(path, table, ".*")):  # a COPY's own folder, left part way
            shutil.rmtree(unmoved)
        os.makedirs(os.path.join(path, table), exist_ok=True)
    return marker


def relayout(source: str, path: str, layout: str, log=None) -> None:
    """The suite's tables under ``source`` written again under ``path`` in ``layout``: the same rows, read in the
    files' order."""
    check_layout(layout)  # before anything under ``path`` is removed
    if os.path.realpath(source) == os.path.realpath(path):
        raise ValueError(f"the tables under {source} cannot be written again in their own place: give another path")
    with open(os.path.join(source, "manifest.json")) as f:
        scale = json.load(f)["scale"]
    marker = _emptied(path)
    con = connect()
    for table in TABLES:
        _write(con, f"SELECT * FROM read_parquet('{files(source, table)}')", os.path.join(path, table), "000",
               layout)
        if log:
            log(f"wrote {table}")
    with open(marker, "w") as f:
        json.dump(manifest(scale, layout), f)


def _step(path: str, scale: float, step: int, count: int, threads: int | None, log=None,
          layout: str = "suite") -> None:
    """dbgen's step ``step`` of ``count`` (the whole when ``count`` is 1), each table written in ``layout`` as
    files that begin with the step's number."""
    con = connect(threads)
    con.execute(f"CALL dbgen(sf={scale}" + (f", children={count}, step={step})" if count > 1 else ")"))
    for table in TABLES:
        columns = con.execute(f"DESCRIBE {table}").fetchall()
        select = f"SELECT {', '.join(_stored(name, kind) for name, kind, *_ in columns)} FROM {table}"
        _write(con, select, os.path.join(path, table), f"{step:03d}", layout)
        if log:
            log(f"wrote {table}")
    con.close()


def _write(con, select: str, folder: str, prefix: str, layout: str) -> None:
    """The rows of ``select`` as parquet files in ``folder``, in ``layout``, each file's name beginning with
    ``prefix``."""
    if layout == "suite":
        _slices(con, select, folder, prefix)
    elif layout == "pyarrow":
        import pyarrow.parquet as pq

        pq.write_table(con.execute(select).to_arrow_table(), f"{folder}/{prefix}-0.parquet",
                       row_group_size=PYARROW_ROWS)
    elif layout == "one-file":
        con.execute(f"COPY ({select}) TO '{folder}/{prefix}-0.parquet' ({_duckdb_parquet()})")
    else:
        options = (f"PER_THREAD_OUTPUT, ROW_GROUP_SIZE {THREAD_ROWS}" if layout == "duckdb-threads"
                   else f"ROW_GROUPS_PER_FILE 1, ROW_GROUP_SIZE {DUCKDB_ROWS}")
        _copy_files(con, select, folder, prefix, options)


def _slices(con, select: str, folder: str, prefix: str) -> None:
    """Contiguous slices of the rows, each a file of at most :data:`ROWS_PER_FILE`: the rows of one order stay
    together, as dbgen made them."""
    rows = con.execute(f"SELECT count(*) FROM ({select})").fetchone()[0]
    count = max(1, math.ceil(rows / ROWS_PER_FILE))
    if count == 1:
        con.execute(f"COPY ({select}) TO '{folder}/{prefix}-0.parquet' ({_duckdb_parquet()})")
        return
    per = math.ceil(rows / count)
    for i in range(count):
        con.execute(f"COPY ({select} LIMIT {per} OFFSET {i * per}) TO '{folder}/{prefix}-{i}.parquet' "
                    f"({_duckdb_parquet()})")


def _duckdb_parquet() -> str:
    return f"FORMAT parquet, ROW_GROUP_SIZE {DUCKDB_ROWS}"


def _copy_files(con, select: str, folder: str, prefix: str, options: str) -> None:
    """DuckDB's COPY of the rows into files of its own naming (in a folder of their own, as steps side by side
    write one table), then moved into ``folder`` under ``prefix``."""
    own = os.path.join(folder, f".{prefix}")
    con.execute(f"COPY ({select}) TO '{own}' (FORMAT parquet, {options})")
    for name in sorted(os.listdir(own)):
        os.replace(os.path.join(own, name), os.path.join(folder, f"{prefix}-{name}"))
    os.rmdir(own)


def _stored(name: str, kind: str) -> str:
    if kind.startswith("DECIMAL"):
        return f"CAST({name} AS DOUBLE) AS {name}"
    if kind == "DATE":
        return f"CAST({name} AS TIMESTAMP) AS {name}"
    return name


def files(path: str, table: str) -> str:
    """The glob of a table's files."""
    return os.path.join(path, table, "*.parquet")


def sql(con, number: int, scale: float) -> str:
    """DuckDB's text of query ``number``; query 11 with the specification's fraction for ``scale``."""
    text = con.execute(f"SELECT query FROM tpch_queries() WHERE query_nr = {number}").fetchone()[0]
    if number == 11:
        text, n = re.subn(r"0\.0001\d*", repr(0.0001 / scale), text)
        assert n == 1, "query 11's fraction not found in DuckDB's text"
    return text


def views(con, path: str) -> None:
    """Each table as a view of its parquet files, so that DuckDB's queries read the same files as the others."""
    for table in TABLES:
        con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM read_parquet('{files(path, table)}')")


def reference(con, path: str, number: int, scale: float):
    """DuckDB's answer to query ``number`` over the parquet files, as a pandas frame."""
    views(con, path)
    return con.execute(sql(con, number, scale)).df()


def answers(path: str, scale: float, numbers) -> dict:
    """DuckDB's answer to each of the queries ``numbers`` over the files under ``path``, on one connection; each
    kept beside the tables (under ``answers/``, by its query's text) for the next run over the same files: DuckDB
    takes about a minute for the 22 answers at scale factor 100 on 16 cores."""
    con = connect()
    return {n: _answer(con, path, n, scale) for n in numbers}


def _answer(con, path: str, number: int, scale: float):
    import pandas as pd

    text = sql(con, number, scale)
    kept = os.path.join(path, ANSWERS, f"q{number}-{hashlib.sha1(text.encode()).hexdigest()[:16]}.parquet")
    if os.path.exists(kept):
        return pd.read_parquet(kept)
    answer = reference(con, path, number, scale)
    try:
        os.makedirs(os.path.dirname(kept), exist_ok=True)
        answer.to_parquet(kept + ".part")
        os.replace(kept + ".part", kept)  # whole or not at all, for a run beside this one
    except (OSError, ValueError):  # data that cannot be written beside, or columns parquet cannot name
        pass
    return answer


def same(got, want, rtol: float = 1e-6) -> str | None:
    """Why ``got`` (a pandas frame) is not ``want``'s answer, or None where it is. Columns are compared by
    position (names differ between engines), rows in order: every query ends in an ORDER BY. Floats agree to
    ``rtol`` (sums of doubles in another order), timestamps to the day, strings without trailing blanks. Rows
    whose float columns tie (to ``rtol``) may come in any order among themselves: sums that are equal in
    decimal differ in their last bits once added in another order, and so sort either way."""
    import numpy as np

    if got.shape != want.shape:
        return f"shape {got.shape}, not {want.shape}"
    if want.shape == (1, 1):  # a sum over no rows: NULL in SQL, 0 in pandas and Polars, on either side
        got, want = got.fillna(0), want.fillna(0)
    names, got, want = list(want.columns), _comparable(got), _comparable(want)
    floats = [i for i, kind in enumerate(want.dtypes) if kind.kind == "f"]
    exact = [i for i in range(want.shape[1]) if i not in floats]
    for i in floats:
        if not np.allclose(got.iloc[:, i], want.iloc[:, i], rtol=rtol, atol=1e-9, equal_nan=True):
            return _differs(got, want, i, names[i])
    for i in exact:
        if not got.iloc[:, i].equals(want.iloc[:, i]):
            if not floats or not _same_ties(got, want, floats, exact, rtol):
                return _differs(got, want, i, names[i])
    return None


def _comparable(frame):
    """Each column as floats, day-resolution timestamps or stripped strings, on a fresh index."""
    import pandas as pd

    columns = {}
    for i, (_, column) in enumerate(frame.items()):
        if pd.api.types.is_datetime64_any_dtype(column):
            column = pd.to_datetime(column).dt.normalize().astype("int64")
        elif pd.api.types.is_float_dtype(column) or pd.api.types.is_integer_dtype(column):
            column = column.astype(float if pd.api.types.is_float_dtype(column) else "int64")
        else:
            column = column.astype(str).str.rstrip().astype(object)
        columns[i] = column.reset_index(drop=True)
    return pd.DataFrame(columns)


def _same_ties(got, want, floats, exact, rtol) -> bool:
    """Whether the rows agree once each run of rows whose float columns tie is sorted by its other columns."""
    import numpy as np

    values = want.iloc[:, floats].to_numpy()
    ties = np.concatenate([[True], ~np.isclose(values[1:], values[:-1], rtol=rtol, atol=1e-9).all(axis=1)])
    run = np.cumsum(ties)

    def ordered(frame):
        return frame.assign(_run=run).sort_values(["_run", *exact]).iloc[:, exact].reset_index(drop=True)

    return bool(ordered(got).equals(ordered(want)))


def _differs(got, want, i, name) -> str:
    return f"column {i} ({name}) differs: got {got.iloc[:3, i].tolist()}, want {want.iloc[:3, i].tolist()}"
