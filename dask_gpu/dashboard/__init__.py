"""dask-gpu's page on distributed's dashboard, at ``/gpu``: device memory and spilling of each GPU worker.

It is registered through distributed's own extension points: a Bokeh application at ``/gpu`` in
``distributed.dashboard.scheduler.applications`` (in place of distributed's NVML-only GPU page, whose
utilization and memory figures it shows too), and ``"gpu"`` among the pages of the scheduler's menu.
LocalCUDACluster registers it; a scheduler started by ``dask scheduler`` gets it with
``--preload dask_gpu.dashboard``. ``import dask_gpu`` imports none of this, nor Bokeh.
"""

from __future__ import annotations

import logging

from dask_gpu.dashboard.data import SpillHistory

PATH = "/gpu"
SAMPLER = "dask-gpu-spill-history"  # the scheduler's periodic callback and extension that keep the history
SAMPLE_MS = 500  # distributed's heartbeat interval for up to 10 workers

logger = logging.getLogger("dask_gpu")


def register(scheduler) -> None:
    """The page, its menu entry, and the spill history on ``scheduler``: before or after its dashboard
    is connected, in the scheduler's event loop. Idempotent."""
    install_page()
    add_menu_entry(scheduler)
    history_of(scheduler)


def dask_setup(scheduler) -> None:
    """``dask scheduler --preload dask_gpu.dashboard``: the page was installed on import, before the
    scheduler connected its dashboard; the menu entry and the history follow here."""
    register(scheduler)


def install_page() -> None:
    """``/gpu`` serves this page on every dashboard that connects from now on, in this process."""
    from distributed.dashboard import scheduler as dashboard

    dashboard.applications[PATH] = gpu_doc


def add_menu_entry(scheduler) -> None:
    """"gpu" in the menu of ``scheduler``'s pages (distributed lists it only where the scheduler's own
    machine has a GPU, which a scheduler of GPU workers need not have)."""
    from distributed.dashboard.scheduler import template_variables

    pages = template_variables(scheduler)["pages"]  # memoized per scheduler: one list, shared by its pages
    if "gpu" not in pages:
        pages.insert(pages.index("system") + 1 if "system" in pages else len(pages), "gpu")


def history_of(scheduler) -> SpillHistory:
    """``scheduler``'s spill history, sampled at each heartbeat from now on (started on first use)."""
    from tornado.ioloop import PeriodicCallback

    history = scheduler.extensions.get(SAMPLER)
    if history is None:
        history = scheduler.extensions[SAMPLER] = SpillHistory()
        callback = PeriodicCallback(lambda: history.sample(scheduler.workers.values()), SAMPLE_MS)
        scheduler.periodic_callbacks[SAMPLER] = callback  # stopped when the scheduler closes
        callback.start()
    return history


def gpu_doc(scheduler, extra, doc) -> None:
    """The Bokeh application of ``/gpu`` (distributed's signature for its pages)."""
    from dask_gpu.dashboard.page import build

    build(scheduler, history_of(scheduler), extra, doc)


# A preloaded module is imported before the scheduler connects its dashboard, and dask_setup runs after.
try:
    install_page()
except ImportError as e:  # no Bokeh: distributed serves no dashboard either
    logger.debug("dask-gpu's dashboard page is not installed: %s", e)
