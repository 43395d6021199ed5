"""The scheduler's side of dataframe shuffles on a GPU cluster: which shuffles run on the device.

dask's graphs name distributed's P2P shuffle for ``shuffle``, hash joins, sorts and ``split_out``
groupbys when a distributed client is in use. :class:`DeviceShuffles`, a scheduler plugin, sees each
graph as it arrives, before any of its tasks runs, and gives the barrier of every P2P dataframe
shuffle of cuDF partitions a :class:`~dask_gpu.dataframe.shuffle.DeviceShuffleSpec`: the workers
then run the device shuffle instead of distributed's Arrow one. ``gpu.shuffle`` says which:

- ``gpu`` (default): shuffles of cuDF partitions;
- ``all``: pandas partitions too (they stay in host memory, in the worker's memory tiers);
- ``p2p``: none, distributed's own.
"""

from __future__ import annotations

import logging

import dask
from distributed.diagnostics.plugin import SchedulerPlugin

from dask_gpu import internals

MODES = ("gpu", "all", "p2p")


def shuffle_mode(value=None) -> str:
    """``value`` or ``gpu.shuffle``, checked."""
    mode = dask.config.get("gpu.shuffle", "gpu") if value is None else value
    if mode not in MODES:
        raise ValueError(f"gpu.shuffle must be one of {', '.join(MODES)}, not {mode!r}")
    return mode


class DeviceShuffles(SchedulerPlugin):
    """Gives P2P dataframe shuffles the device run, as ``gpu.shuffle`` says (read as each graph arrives)."""

    name = "dask-gpu-shuffle"
    idempotent = True

    def __init__(self):
        self.shuffles = 0  # given the device run so far

    def update_graph(self, scheduler, *, tasks=(), **kwargs) -> None:
        mode = shuffle_mode()
        if mode == "p2p":
            return
        prefix = internals.barrier_key("")
        for key in tasks:
            if not (isinstance(key, str) and key.startswith(prefix)):
                continue
            run_spec = scheduler.tasks[key].run_spec
            spec = getattr(run_spec, "spec", None)
            if type(spec) is internals.DataFrameShuffleSpec and (mode == "all" or _is_cudf(spec.meta)):
                from dask_gpu.dataframe.shuffle import DeviceShuffleSpec

                run_spec.spec = DeviceShuffleSpec.of(spec)
                self.shuffles += 1


def _is_cudf(meta) -> bool:
    return type(meta).__module__.split(".")[0] == "cudf"


class _QuietShuffles(logging.Filter):
    """Drops distributed's WARNINGs that a P2P shuffle started and ended, two lines per shuffle: routine.
    Failures and restarts still show, and their tasks' errors reach the client."""

    ROUTINE = ("Shuffle %s initialized by task", "Shuffle %s deactivated due to stimulus")

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.ROUTINE)


_quiet = _QuietShuffles()


def quiet_shuffle_logs() -> None:
    """Stop the scheduler's "Shuffle ... initialized by task" and "... deactivated" lines (idempotent)."""
    logger = logging.getLogger(internals.SHUFFLE_LOGGER)
    if _quiet not in logger.filters:
        logger.addFilter(_quiet)
