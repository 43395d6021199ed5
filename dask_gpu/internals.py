"""The module of dask-gpu that touches private APIs of distributed, dask, cuDF and CuPy.

The rule: what these libraries keep to themselves (a private module or name, an undocumented attribute,
cuDF's internals under ``cudf.core``) is reached through here, so that a release of one of them that
changes it breaks this file. Their public APIs (pylibcudf's ``plc.*``, ``dask.task_spec``) are used
directly, where they are needed. Two kinds of use stand outside it, each in the module whose job it is:
dask-gpu's subclasses of dask's expressions (``dask_gpu.dataframe``) define and call the methods by which
dask's optimizer asks an expression of itself (``_meta``, ``_simplify_up``, ``_lower``, ``_layer``), as
dask-cudf's do; and the device shuffle's run (``dask_gpu.dataframe.shuffle``) overrides the members of
distributed's ``ShuffleRun`` by which a run receives, hands out and places its partitions (``_receive``,
``_get_output_partition``, ``_get_assigned_worker``); what else of the run it uses is reached through here.

It stands on the ground floor: it imports nothing of dask-gpu, and nothing of these libraries until a
caller uses a name, so that ``import dask_gpu`` works without cuDF and imports no private module
itself. Classes and functions taken as they are (``internals.ShuffleRun``) are imported on first
access, by the module's ``__getattr__``; attribute chains are small functions.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import importlib
import sys
import threading

# name -> (module, its name there): imported on first access, then kept in this module
_LAZY = {
    # distributed's P2P shuffle, which the device shuffle runs as, and the retry of a run's sends
    "ShuffleRun": ("distributed.shuffle._core", "ShuffleRun"),
    "barrier_key": ("distributed.shuffle._core", "barrier_key"),
    "DataFrameShuffleSpec": ("distributed.shuffle._shuffle", "DataFrameShuffleSpec"),
    "retry": ("distributed.utils_comm", "retry"),
    # the worker's state machine: a stimulus that drops the worker's copy of a key
    "RemoveReplicasEvent": ("distributed.worker_state_machine", "RemoveReplicasEvent"),
    # dask's expressions, and those whose metas dask_gpu.dataframe.meta keeps by kind
    "Expr": ("dask._expr", "Expr"),
    # dask's dataframe expressions that dask_gpu.dataframe.parquet reads as and plans with
    "FrameExpr": ("dask.dataframe.dask_expr._expr", "Expr"),
    "BlockwiseIO": ("dask.dataframe.dask_expr.io.io", "BlockwiseIO"),
    "PartitionsFiltered": ("dask.dataframe.dask_expr._expr", "PartitionsFiltered"),
    "Projection": ("dask.dataframe.dask_expr._expr", "Projection"),
    "Blockwise": ("dask.dataframe.dask_expr._expr", "Blockwise"),
    "Assign": ("dask.dataframe.dask_expr._expr", "Assign"),
    "Isin": ("dask.dataframe.dask_expr._expr", "Isin"),
    "AsType": ("dask.dataframe.dask_expr._expr", "AsType"),
    "Filter": ("dask.dataframe.dask_expr._expr", "Filter"),
    "ToFrame": ("dask.dataframe.dask_expr._expr", "ToFrame"),
    "ResetIndex": ("dask.dataframe.dask_expr._expr", "ResetIndex"),
    "Index": ("dask.dataframe.dask_expr._expr", "Index"),
    "Literal": ("dask.dataframe.dask_expr._expr", "Literal"),
    "Len": ("dask.dataframe.dask_expr._reductions", "Len"),
    "Repartition": ("dask.dataframe.dask_expr._repartition", "Repartition"),
    "SortValues": ("dask.dataframe.dask_expr._shuffle", "SortValues"),
    "TreeReduce": ("dask.dataframe.dask_expr._reductions", "TreeReduce"),
    "SimpleShuffle": ("dask.dataframe.dask_expr._shuffle", "SimpleShuffle"),
    "get_default_shuffle_method": ("dask.dataframe.dask_expr._util", "get_default_shuffle_method"),
    "AssignPartitioningIndex": ("dask.dataframe.dask_expr._shuffle", "AssignPartitioningIndex"),
    "is_filter_pushdown_available": ("dask.dataframe.dask_expr._expr", "is_filter_pushdown_available"),
    "determine_column_projection": ("dask.dataframe.dask_expr._expr", "determine_column_projection"),
    "Merge": ("dask.dataframe.dask_expr._merge", "Merge"),
    "BlockwiseMerge": ("dask.dataframe.dask_expr._merge", "BlockwiseMerge"),
    "ApplyConcatApply": ("dask.dataframe.dask_expr._reductions", "ApplyConcatApply"),
    "GroupByApplyConcatApply": ("dask.dataframe.dask_expr._groupby", "GroupByApplyConcatApply"),
    "GroupByChunk": ("dask.dataframe.dask_expr._groupby", "GroupByChunk"),
    "GroupByBase": ("dask.dataframe.dask_expr._groupby", "GroupByBase"),
    "adjust_split_out_for_group_keys": ("dask.dataframe.dask_expr._groupby", "_adjust_split_out_for_group_keys"),
    "FunctionMap": ("dask.dataframe.dask_expr._accessor", "FunctionMap"),
    "Mean": ("dask.dataframe.dask_expr._reductions", "Mean"),
    "DropDuplicates": ("dask.dataframe.dask_expr._reductions", "DropDuplicates"),
    "CudfGroupbyAgg": ("dask_cudf._expr.groupby", "CudfGroupbyAgg"),
    "DecomposableCudfGroupbyAgg": ("dask_cudf._expr.groupby", "DecomposableCudfGroupbyAgg"),
    # dask's task graphs: old-style ones converted, and the functions of dask.array's tasks that
    # dask_gpu.array.optimization recognizes
    "convert_legacy_graph": ("dask._task_spec", "convert_legacy_graph"),
    "execute_subgraph": ("dask._task_spec", "_execute_subgraph"),
    "apply_random": ("dask.array.random", "_apply_random"),
    "apply_random_func": ("dask.array.random", "_apply_random_func"),
}

# distributed's scheduler plugin for P2P shuffles logs under its module's name
SHUFFLE_LOGGER = "distributed.shuffle._scheduler_plugin"

# the event a nanny logs on the scheduler just before it terminates its worker for exceeding
# distributed.worker.memory.terminate: {"worker": address, "pid": ..., "rss": bytes}
MEMORY_RESTART_EVENT = "worker-restart-memory"

# what a worker logs, with a trace, where a heartbeat to its scheduler fails
HEARTBEAT_FAILED = "Failed to communicate with scheduler during heartbeat."


def __getattr__(name: str):
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = globals()[name] = getattr(importlib.import_module(module), attribute)
    return value


# --- distributed ------------------------------------------------------------------------------

_taking = contextvars.ContextVar("dask_gpu_scheduler_taking_a_graph", default=None)


@contextlib.contextmanager
def taking_graph(scheduler):
    """While ``scheduler`` takes a graph in (its ``update_graph``, and the threads it hands the work to): the
    scheduler that :func:`known_type_name` asks."""
    token = _taking.set(scheduler)
    try:
        yield
    finally:
        _taking.reset(token)


def known_type_name(key) -> str | None:
    """The type of ``key``'s value as the scheduler taking a graph in has it (``TaskState.type``, a dotted
    name), where it has it; None elsewhere. A graph that a scheduler takes in holds its persisted values as
    futures unpickled there, which know no type; the scheduler knows it from the worker that holds the value."""
    scheduler = _taking.get()
    ts = scheduler.tasks.get(key) if scheduler is not None else None
    return ts.type if ts is not None and ts.type else None


def scheduler_identity(client) -> dict:
    """The identity of the scheduler of ``client`` (a synchronous one) now, every worker in it.
    ``client.scheduler_info()`` returns the client's cached one, which the client's periodic refresh,
    asking for no workers, may overwrite between the fetch and the return. An asynchronous client
    cannot wait here: it gives its cached identity, as ``scheduler_info`` does."""
    if client.asynchronous:
        return client.scheduler_info()
    return client.sync(client.scheduler.identity, n_workers=-1)


def heard_identity(client) -> dict:
    """The identity of ``client``'s scheduler as the client last heard it (its periodic refresh: the workers'
    count, threads and memory, without the workers), with no round trip; ``{}`` before it has heard one."""
    return client._scheduler_identity or {}


def shuffle_run_arguments(shuffle_id, run_id, span_id, plugin) -> dict:
    """distributed's keywords for a :class:`ShuffleRun` on the worker of ``plugin`` (its shuffle worker
    plugin), for a run that keeps no files: no disk, and no limit on what it would write."""
    from distributed.shuffle._limiter import ResourceLimiter

    worker = plugin.worker
    return {
        "id": shuffle_id,
        "run_id": run_id,
        "span_id": span_id,
        "local_address": worker.address,
        "directory": worker.local_directory,
        "executor": plugin._executor,
        "rpc": worker.rpc,
        "digest_metric": worker.digest_metric,
        "scheduler": worker.scheduler,
        "memory_limiter_disk": ResourceLimiter(None),
        "memory_limiter_comms": plugin.memory_limiter_comms,
        "disk": False,
        "loop": worker.loop,
    }


def shuffle_run_metrics(run, where: str):
    """The context in which a :class:`ShuffleRun`'s work counts in its metrics, as ``where`` ("foreground")."""
    return run._capture_metrics(where)


def shuffle_run_ship(run, shipments: dict) -> None:
    """Hand a run's ``shipments`` (worker address -> (input partition, payload)) to its comm buffer, from a task's
    thread: the run's event loop sends them."""
    from distributed.utils import sync

    sync(run._loop, run._write_to_comm, shipments)


async def shuffle_run_send(run, address: str, payload):
    """One send of the run's ``payload`` to the worker at ``address`` (distributed's send, without its retries)."""
    return await run._send(address, payload)


def shuffle_run_failed(run, error: BaseException) -> None:
    """Record ``error`` on the run, which raises it to the tasks that use the run next."""
    run._exception = error


def correct_cluster_state(cluster) -> None:
    """Have a ``SpecCluster`` start and stop workers to match its ``worker_spec``, on its event loop (what its own
    ``scale`` does once it has changed the spec)."""
    cluster.loop.add_callback(cluster._correct_state)


def is_single_partition_broadcast(merge) -> bool:
    """Whether dask joins ``merge`` by broadcasting a side of one partition."""
    return merge._is_single_partition_broadcast


def partitions_filtered(expr) -> bool:
    """Whether ``expr``, a ``PartitionsFiltered`` expression, keeps only some of its partitions."""
    return expr._filtered


def worker_alias(scheduler, alias):
    """The worker address that ``alias`` stands for on the scheduler (a worker's name is one), or None."""
    return scheduler.aliases.get(alias)


def add_worker_alias(scheduler, alias, address: str) -> None:
    """Have the scheduler take ``alias`` wherever it takes a worker's address (``workers=``)."""
    scheduler.aliases[alias] = address


def remove_worker_alias(scheduler, alias, address: str) -> None:
    """Forget ``alias``, where it still stands for ``address``."""
    if scheduler.aliases.get(alias) == address:
        del scheduler.aliases[alias]


async def register_worker_plugin(worker, plugin, name: str) -> None:
    """Have ``worker``'s scheduler give ``plugin`` to every worker, as each registers (what
    ``Client.register_plugin`` asks of it), once: a plugin of that name already there stays."""
    from distributed.protocol.pickle import dumps

    await worker.scheduler.register_worker_plugin(plugin=dumps(plugin), name=name, idempotent=True)


def removed_worker(topic, msg):
    """The address of the worker a scheduler event says was removed, with the keys it was running; None for
    another event. distributed's ``Scheduler.remove_worker`` logs it under "all", after erring the tasks that
    have killed too many workers, before the others run again."""
    if topic == "all" and isinstance(msg, dict) and msg.get("action") == "remove-worker":
        return msg.get("worker"), msg.get("processing-tasks", ())
    return None


def spill_buffer_disk(spill_buffer):
    """The disk side of distributed's ``SpillBuffer``, uncached: a ``distributed.spill.Slow``, a zict.Func
    whose ``d`` is the file mapping (an ``AnyKeyFile``)."""
    return spill_buffer._slow_uncached


def file_name_prefix(key) -> str:
    """How ``zict.File`` (under distributed's ``AnyKeyFile``) begins the names of a key's files: the key's
    text, quoted, then "#" and a count of its own."""
    from urllib.parse import quote

    return quote(str(key), safe="") + "#"


# --- attributes of dask's and cuDF's classes that dask-gpu replaces, and puts back ---------------

_replaced: dict = {}  # (class, attribute) -> what the class itself had (None: nothing of its own)


def replace_class_attribute(cls, attribute: str, value) -> None:
    """``cls.attribute`` replaced by ``value``; :func:`restore_class_attributes` puts the class's own back."""
    _replaced.setdefault((cls, attribute), cls.__dict__.get(attribute))
    setattr(cls, attribute, value)


def restore_class_attributes() -> None:
    """Every attribute that :func:`replace_class_attribute` replaced, as its class had it."""
    for (cls, attribute), value in _replaced.items():
        if value is None:
            delattr(cls, attribute)
        else:
            setattr(cls, attribute, value)
    _replaced.clear()


# --- dask's dataframe expressions ------------------------------------------------------------

def expression_as(expr, cls):
    """``expr`` as an expression of class ``cls``: the same operands under the same name, with what it has
    computed (as dask rebuilds an expression it unpickles)."""
    from dask._expr import Expr

    computed = {k: v for k, v in vars(expr).items() if k not in ("operands", "_determ_token")}
    return Expr._reconstruct(cls, *expr.operands, expr.deterministic_token, computed)


def isin_values(isin):
    """The values of dask's ``Isin`` expression (held in a delayed object of its own), or None."""
    value = _isin_given(isin)
    return None if value is None else [str(v) if isinstance(v, str) else v for v in value]  # NumPy strings as Python's


def isin_given_values(isin) -> bool:
    """Whether dask's ``Isin`` expression holds values given to it (a list), not a computation of them."""
    return _isin_given(isin) is not None


def _isin_given(isin):
    obj = getattr(isin.operand("values"), "obj", None)
    value = dict(obj.__dask_graph__()).get(obj.key) if obj is not None else None
    value = getattr(value, "value", value)  # a graph's data node holds it
    return None if value is None or isinstance(value, tuple) and callable(value[0]) else value


# --- cuDF: a frame's columns as pylibcudf columns, and a frame made from them -----------------

def cudf_column_names(frame) -> tuple:
    """A cuDF frame's data column names, in order."""
    return frame._column_names


def cudf_columns(obj) -> tuple:
    """A cuDF frame's data columns, or an index's columns, as cuDF column objects."""
    return obj._columns


def cudf_dtypes(frame) -> tuple:
    """A cuDF frame's data columns' dtypes, in order, without the pandas Series that ``frame.dtypes`` makes."""
    return tuple(column.dtype for column in frame._columns)


def cudf_column_labels(frame) -> tuple:
    """What shapes a cuDF frame's column labels besides their names: a MultiIndex or not, the levels' names,
    whether they form a range, and their dtype."""
    labels = frame._data
    return labels.multiindex, tuple(labels.level_names), labels.rangeindex, labels.label_dtype


def cudf_columns_by_label(frame, labels: list):
    """``frame[labels]`` of a cuDF frame, for a list of its columns' names, without the pandas Series of the
    labels that cuDF makes first."""
    return frame._get_columns_by_label(labels)


def cudf_column(frame, name):
    """A cuDF frame's data column ``name``."""
    return frame._data[name]


def as_pylibcudf(column):
    """A cuDF column's pylibcudf column, not accessed for reading (see below): to look at its buffers."""
    return column.plc_column


@contextlib.contextmanager
def read_as_pylibcudf(*columns):
    """cuDF columns as pylibcudf columns while the block runs, accessed for reading as cuDF's copy-on-write
    and spilling ask."""
    from cudf.core.column.utils import access_columns

    with access_columns(*columns, mode="read", scope="internal") as accessed:
        yield [c.plc_column for c in accessed]


def identity_hash():
    """libcudf's identity hash: a column of partition numbers partitions by its values."""
    from pylibcudf.libcudf.partitioning import hash_id

    return hash_id.HASH_IDENTITY


def from_pylibcudf(columns, dtypes) -> list:
    """pylibcudf columns as cuDF columns of the cuDF ``dtypes`` (which carry categories and time zones)."""
    from cudf.core.column import ColumnBase

    return [ColumnBase.create(c, dtype) for c, dtype in zip(columns, dtypes)]


def cudf_frame(like, columns: dict):
    """A cuDF frame of ``like``'s type made of ``columns`` (label -> cuDF column) as they are, with a RangeIndex,
    as cuDF's merge makes its result."""
    return type(like)._from_data(dict(columns))


def frame_like(template, columns: list, names: list, index_names: list):
    """A frame of ``template``'s kind from cuDF ``columns``: the index's, then the data columns ``names``."""
    return template._from_columns_like_self(columns, names, index_names)


def allocation(buffer) -> tuple:
    """The allocation under a pylibcudf column's data or mask, and its size in bytes: the owner of cuDF's
    buffer, or RMM's buffer; the buffer itself where it has neither."""
    owner = getattr(buffer, "owner", None) or getattr(buffer, "obj", None) or buffer
    return owner, int(getattr(owner, "size", None) or buffer.nbytes)


# --- cuDF's spill manager, which moves spillable buffers itself -------------------------------

def cudf_spill_manager():
    """cuDF's global spill manager: None where its spilling is off."""
    from cudf.core.buffer import spill_manager

    return spill_manager.get_global_manager()


def set_cudf_spill_manager(manager) -> None:
    """Make ``manager`` cuDF's global spill manager (None: new buffers are plain)."""
    from cudf.core.buffer import spill_manager

    spill_manager.set_global_manager(manager)


def new_cudf_spill_manager(device_memory_limit, statistic_level):
    """A cuDF spill manager, not yet set."""
    from cudf.core.buffer import spill_manager

    return spill_manager.SpillManager(device_memory_limit=device_memory_limit, statistic_level=statistic_level)


def cudf_spill_on_demand() -> None:
    """Have cuDF spill where an allocation fails, as its ``spill_on_demand`` option does."""
    from cudf.core.buffer import spill_manager

    spill_manager.set_spill_on_demand_globally()


# --- CuPy's accelerators and compiler --------------------------------------------------------

def drop_cub_block_reductions(cupy) -> None:
    """Take CUB out of CuPy's reduction kernels in this process (``cupy._core._accelerator``), leaving its
    routines' CUB (the device-wide reductions and scans precompiled in CuPy's wheel) as it is."""
    accelerator = cupy._core._accelerator
    cub = accelerator.ACCELERATOR_CUB
    accelerator.set_reduction_accelerators([a for a in accelerator.get_reduction_accelerators() if a != cub])


def _cupy_compiler_and_cache():
    """CuPy 14's compiler module and its disk cache backend, where CuPy is imported and has them."""
    compiler = sys.modules.get("cupy.cuda.compiler")
    return compiler, getattr(compiler, "_kernel_cache_backend", None)


def cupy_kernel_cache_dir() -> str | None:
    """The directory of this process's CuPy disk cache backend, where CuPy is imported and has one."""
    return getattr(_cupy_compiler_and_cache()[1], "_cache_dir", None)


def set_cupy_kernel_cache_dir(directory: str) -> None:
    """This process's CuPy disk cache backend made again for ``directory``, where CuPy is imported and has one
    (CuPy reads ``CUPY_CACHE_DIR`` once, as it is imported)."""
    compiler, backend = _cupy_compiler_and_cache()
    if backend is not None and getattr(backend, "_cache_dir", directory) != directory:
        compiler._set_kernel_cache_backend(type(backend)(directory))


def use_nvrtc_pch(cupy) -> None:
    """Have NVRTC precompile CuPy's headers once in this process (what ``CUPY_NVRTC_USE_PCH=1`` asks for,
    which CuPy reads once, as it is imported)."""
    cupy.cuda.compiler._use_pch = True


def compile_each_kernel_once(cupy) -> None:
    """Threads of this process that ask CuPy for the same kernel at once wait for the first one's compile, then
    load what it wrote to the kernel cache (``cupy.cuda.compiler._compile_module_with_cache``, which CuPy calls
    where its memory holds no such kernel). CuPy compiles a kernel in each thread that asks for it before one
    is done. Different kernels still compile side by side."""
    compiler = cupy.cuda.compiler
    compile_module = compiler._compile_module_with_cache
    if getattr(compile_module, "once", False):
        return
    locks: dict = {}
    guard = threading.Lock()

    @functools.wraps(compile_module)
    def once(*args, **kwargs):
        key = hashlib.sha1(repr((args, sorted(kwargs.items()))).encode()).digest()
        with guard:
            lock = locks.setdefault(key, threading.Lock())
        with lock:
            return compile_module(*args, **kwargs)

    once.once = True
    compiler._compile_module_with_cache = once
