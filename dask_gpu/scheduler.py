"""The scheduler's side of a GPU cluster: LocalCUDACluster's scheduler, its dashboard, and the plugins that make
distributed's answers read in a GPU cluster's terms.

- :class:`GPUScheduler`: distributed's, with dask-gpu's plugins, its root-task queue chosen by the cluster, and
  Python's cycle collector paused while it takes a graph in.
- :class:`MemoryDeaths`: a task whose workers were restarted for exceeding their memory limit ends in a
  ``KilledWorker`` that says so (distributed's says only that the workers died).
- :class:`DeviceIndices`: ``workers=[0]``, dask-cuda's name for the worker of GPU 0, finds that worker.

:func:`plugins` lists dask-gpu's plugins for any scheduler: :class:`MemoryDeaths` and the device shuffle
(:mod:`dask_gpu.dataframe.scheduler`). :func:`register` adds them to a scheduler that dask-gpu did not start
(``dask gpu worker``'s); :class:`DeviceIndices` is LocalCUDACluster's alone.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections import Counter

import dask
from dask.utils import format_bytes
from distributed import KilledWorker, Scheduler
from distributed.core import Status
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.protocol.pickle import dumps, loads

from dask_gpu import internals
from dask_gpu.dataframe.scheduler import DeviceShuffles, quiet_shuffle_logs
from dask_gpu.memory.collector import collector_paused

logger = logging.getLogger("dask_gpu")
GONE = 64  # removed workers remembered while a late memory event of theirs may come


class MemoryDeaths(SchedulerPlugin):
    """Adds a note to the ``KilledWorker`` of a task whose workers died for exceeding their memory limit.

    A nanny that terminates its worker for memory (``distributed.worker.memory.terminate``) logs an event
    on the scheduler first; the scheduler removes the worker once its process is gone, and errs a task
    that has killed too many workers (``allowed-failures``) with a ``KilledWorker`` made there. The event
    mostly comes first: the nanny sends it as it sends SIGTERM, and a process over its memory limit takes
    longer to exit. On a busy machine it can come after the removal: the tries of the tasks the worker was
    running still count then, and only the last try's late event leaves distributed's error as it is. The
    note goes into the task's
    exception as the task errs, so that its dependents carry it, and the task itself, whose message to
    its clients is already made, is reported again.
    """

    name = "dask-gpu-memory-deaths"
    idempotent = True

    def __init__(self):
        self.scheduler = None
        self.limits = {}  # address -> memory limit, of workers being restarted for memory
        self.deaths = Counter()  # key -> its earlier tries that ended in a restart for memory
        self.gone = {}  # address -> the keys it was running, of workers removed before any memory event of theirs
        self.noted = []  # keys whose KilledWorker got the note, to report again

    async def start(self, scheduler) -> None:
        self.scheduler = scheduler

    def log_event(self, topic, msg) -> None:
        if self.scheduler is None:
            return
        tasks = self.scheduler.tasks
        if topic == internals.MEMORY_RESTART_EVENT and isinstance(msg, dict):
            ws = self.scheduler.workers.get(msg.get("worker"))
            if ws is not None:
                self.limits[ws.address] = ws.memory_limit
            elif msg.get("worker") in self.gone:  # removed already: its tasks' tries ended for memory all the same
                self.deaths.update(key for key in self.gone.pop(msg.get("worker")) if key in tasks)
        elif removed := internals.removed_worker(topic, msg):
            # the tasks that will run again (a task that erred here has its note already)
            running = [key for key in removed[1] if key in tasks and tasks[key].state == "processing"]
            if removed[0] in self.limits:
                self.deaths.update(running)
            else:
                self.gone[removed[0]] = running
                if len(self.gone) > GONE:
                    self.gone.pop(next(iter(self.gone)))

    def transition(self, key, start, finish, *args, worker=None, exception=None, **kwargs) -> None:
        if finish not in ("memory", "erred", "forgotten"):
            return
        earlier = self.deaths.pop(key, 0)
        if finish == "erred" and worker in self.limits and isinstance(exception, bytes):
            try:
                error = loads(exception)
            except Exception:  # a task's own error, from a module the scheduler lacks: not a KilledWorker
                return
            if isinstance(error, KilledWorker):
                error.add_note(memory_note(earlier + 1, error.allowed_failures + 1, self.limits[worker]))
                self.scheduler.tasks[key].exception = dumps(error)
                self.noted.append(key)

    def remove_worker(self, scheduler, worker, **kwargs) -> None:
        # after the worker's tasks erred: their clients get the noted exception after distributed's
        self.limits.pop(worker, None)
        for key in self.noted:
            ts = scheduler.tasks.get(key)
            if ts is not None and ts.state == "erred":
                scheduler.report({"op": "task-erred", "key": key, "exception": ts.exception,
                                  "traceback": ts.traceback}, ts=ts)
        self.noted.clear()


def memory_note(deaths: int, tries: int, memory_limit: int) -> str:
    """What to tell of a task ``deaths`` of whose ``tries`` ended in its worker's restart for memory."""
    if tries == 1:
        who = "the worker running it was restarted for exceeding its"
    elif deaths >= tries:
        who = f"all {tries} workers running it were restarted for exceeding their"
    else:
        who = f"{deaths} of the {tries} workers running it were restarted for exceeding their"
    return (f"{who} memory limit (memory_limit={format_bytes(memory_limit)}): give workers more memory "
            "(memory_limit=) or make partitions smaller")


class DeviceIndices(SchedulerPlugin):
    """Each GPU worker's device index as an alias of its address: ``workers=[0]`` means the worker of GPU 0.

    dask-cuda's LocalCUDACluster named its workers by device index; dask-gpu's are ``gpu-0``, ``gpu-1``.
    An index is taken only where nothing else on the scheduler has it as a name or alias; while it is
    taken, a worker that comes with that name is refused as a duplicate, as distributed refuses names.
    """

    name = "dask-gpu-device-indices"
    idempotent = True

    def __init__(self, indices):
        self.indices = dict(indices)  # worker name -> its device's index
        self.aliased = {}  # index -> address, the aliases this plugin made

    def add_worker(self, scheduler, worker: str) -> None:
        index = self.indices.get(scheduler.workers[worker].name)
        if index is not None and internals.worker_alias(scheduler, index) is None:
            internals.add_worker_alias(scheduler, index, worker)
            self.aliased[index] = worker

    def remove_worker(self, scheduler, worker: str, **kwargs) -> None:
        for index in [i for i, address in self.aliased.items() if address == worker]:
            internals.remove_worker_alias(scheduler, index, worker)
            del self.aliased[index]


def plugins() -> list:
    """dask-gpu's plugins for any scheduler, each with the level and the words of what goes on without it: the
    device shuffle, and the note on workers restarted for memory."""
    return [
        (DeviceShuffles(), logging.WARNING, "cuDF shuffles run on distributed's P2P shuffle, through host memory"),
        (MemoryDeaths(), logging.INFO, "its KilledWorker errors stay as distributed makes them"),
    ]


class GPUScheduler(Scheduler):
    """distributed's Scheduler, with :func:`plugins`, its root-task queue (``worker-saturation``) chosen here,
    Python's cycle collector paused while it takes a graph in (:mod:`dask_gpu.memory.collector`),
    :class:`DeviceIndices` (``device_indices``: GPU worker name -> its device's index), and ``on_nanny``, called
    once, as the first nanny asks to start its worker process."""

    def __init__(self, *args, worker_saturation=None, device_indices=None, on_nanny=None, **kwargs):
        chosen = {} if worker_saturation is None else {"distributed.scheduler.worker-saturation": worker_saturation}
        with dask.config.set(chosen):  # read once, while the scheduler is made
            super().__init__(*args, **kwargs)
        self._on_nanny = on_nanny
        for plugin, *_ in plugins():
            self.add_plugin(plugin)
        if device_indices:
            self.add_plugin(DeviceIndices(device_indices))
        quiet_shuffle_logs()

    async def add_nanny(self, comm, address):  # distributed's "register_nanny" handler, as it reads its arguments
        on_nanny, self._on_nanny = self._on_nanny, None
        if on_nanny is not None:
            on_nanny()
        return await super().add_nanny(comm, address)

    async def update_graph(self, *args, **kwargs):
        # unpickling and materializing make a task object per chunk, and more; the array optimizer, which runs as
        # the graph is materialized, asks this scheduler the types of the values that the graph's futures hold
        with collector_paused(), internals.taking_graph(self):
            return await super().update_graph(*args, **kwargs)


async def attach_dashboard(scheduler, prefix: str = "/") -> bool:
    """Add the bokeh dashboard to a running scheduler's HTTP server; warn, never fail, on error."""
    try:
        dashboard = await asyncio.get_running_loop().run_in_executor(
            None, importlib.import_module, "distributed.dashboard.scheduler"
        )
        if scheduler.status in (Status.closing, Status.closed):
            return False
        importlib.import_module("dask_gpu.dashboard").register(scheduler)  # the GPU page, before connect reads pages
        dashboard.connect(scheduler.http_application, scheduler.http_server, scheduler, prefix=prefix)
        return True
    except Exception as e:  # the cluster works without its dashboard
        logger.warning("the dashboard could not start: %s", e)
        return False


async def register(scheduler_rpc) -> None:
    """Add :func:`plugins` to a scheduler that dask-gpu did not start (``dask gpu worker``). Where the scheduler
    refuses one (one that takes no pickled plugins), the log says what goes on without it."""
    for plugin, level, without in plugins():
        try:
            await scheduler_rpc.register_scheduler_plugin(plugin=dumps(plugin), name=plugin.name, idempotent=True)
        except Exception as e:
            logger.log(level, "the scheduler did not take dask-gpu's plugin %s (%s): %s", plugin.name, e, without)
