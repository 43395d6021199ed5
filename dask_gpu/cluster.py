"""LocalCUDACluster: one Dask worker per GPU of this machine, optionally with CPU workers beside them."""

from __future__ import annotations

import ast
import asyncio
import inspect
import logging
import os
import sys
import threading
from importlib.util import find_spec

import dask
from distributed import SpecCluster
from distributed.core import Status
from distributed.utils import NoOpAwaitable

from dask_gpu import devices, internals, parse
from dask_gpu.array import start as arrays
from dask_gpu.dataframe import start
from dask_gpu.dataframe.scheduler import shuffle_mode
from dask_gpu.dataframe.sizing import partition_size
from dask_gpu.options import ClusterOptions, WorkerOptions
from dask_gpu.plugins import spill_cudf
from dask_gpu.scheduler import GPUScheduler, attach_dashboard
from dask_gpu.spec import cpu_worker_spec, cpu_worker_threads, gpu_worker_spec

logger = logging.getLogger("dask_gpu")
WARMING = "dask-gpu-warm-client"  # the name of the thread that warms this process for a cluster's first calls


class LocalCUDACluster(SpecCluster):
    """A cluster of one worker per visible GPU on this machine.

    Each worker is a Nanny-managed process whose ``CUDA_VISIBLE_DEVICES`` puts its
    own GPU first, with ``nthreads=2``, ``resources={"GPU": 1}``, and its process
    pinned to the CPU cores nearest its GPU. Keywords left as None fall back to
    the ``gpu.*`` configuration (``gpu.yaml``); the memory limits do so as "default".
    It takes every keyword of dask-cuda 26.10's LocalCUDACluster, with its meaning
    (docs/migrating-from-dask-cuda.md).

    Parameters
    ----------
    CUDA_VISIBLE_DEVICES: str or list, optional
        Devices to use: indices, ``GPU-`` or ``MIG-`` UUIDs or their prefixes.
        Default: the environment variable, else every GPU.
    n_workers: int, optional
        GPU workers to start (default: one per visible device).
    threads_per_worker, local_directory, protocol, pre_import, resources:
        Per-worker options; see ``dask_gpu.options``. A UCX transport turned on with no
        protocol named means ``protocol="ucx"``, as in dask-cuda.
    memory_limit, device_memory_limit:
        Host and device memory per worker, as in dask-cuda: bytes, "16GB", a fraction, "auto"
        (host: the machine split evenly; device: the whole device), None, 0 or False for no
        limit (no device tier; no spilling to disk), "default" for the ``gpu.*`` configuration.
    cpu_workers: int, optional
        CPU-only workers started beside the GPU ones. They see no GPU and have no
        ``GPU`` resource, so tasks annotated ``resources={"GPU": 1}`` run on GPU
        workers while other tasks may run anywhere.
    dashboard_address: str, optional
        Default ``127.0.0.1:8787``; False turns the dashboard off. A port alone
        (``":8788"``) listens on the cluster's host, 127.0.0.1 unless ``host`` says otherwise.
    enable_tcp_over_ucx, enable_nvlink, enable_infiniband, enable_rdmacm: bool, optional
        With ``protocol="ucx"``, the UCX transports to use (default: UCX chooses).
        Without the distributed-ucxx package, ``protocol="ucx"`` warns and runs over TCP.
    allocator, rmm_pool_size, rmm_maximum_pool_size, rmm_managed_memory, rmm_async, rmm_release_threshold, rmm_log_directory, rmm_track_allocations:
        Device memory allocator of each worker (CuPy's pool by default; see
        ``dask_gpu.memory.allocator``), checked before anything starts.
    enable_cudf_spill, cudf_spill_stats: optional
        cuDF's own spilling of its frames (and its statistics level), in each worker and in
        this process; the workers' memory tiers then leave cuDF frames to cuDF.
    rmm_allocator_external_lib_list: str or list, optional
        With RMM, the libraries ("cupy", "torch") that allocate through it (default: both).
    log_spilling: bool, optional
        Log each move between a worker's device and host tiers (``distributed.worker``, INFO).
    worker_class: type or str, optional
        A Worker subclass that each Nanny runs, or a Nanny subclass to run instead of Nanny.
    security: Security or True, optional
        TLS settings; True makes temporary self-signed credentials.
    worker_saturation: float or "inf", optional
        Root tasks the scheduler sends ahead to each worker, per thread (default
        ``gpu.worker-saturation``, inf: all of them). A GPU task returns once its
        kernels are queued, so a worker that waits for the scheduler between tasks
        leaves its GPU idle; distributed's own 1.1 suits CPU work.
    **kwargs:
        SpecCluster's keywords (``name``, ``shutdown_on_close``, ...) go to the
        cluster; Nanny's and Worker's (``death_timeout``, ``data``, ...) to every worker;
        LocalCluster's ``processes=True`` and ``worker_dashboard_address`` are understood.
        Any other keyword is a TypeError that names it, before anything starts.
    """  # noqa: E501  (a parameter entry naming several keywords is one line)

    def __init__(self, CUDA_VISIBLE_DEVICES=None, n_workers=None, threads_per_worker=None, memory_limit="default",
                 device_memory_limit="default", enable_cudf_spill=None, cudf_spill_stats=None, local_directory=None,
                 protocol=None, enable_tcp_over_ucx=None, enable_infiniband=None, enable_nvlink=None,
                 enable_rdmacm=None, rmm_pool_size=None, rmm_maximum_pool_size=None, rmm_managed_memory=None,
                 rmm_async=None, rmm_allocator_external_lib_list=None, rmm_release_threshold=None,
                 rmm_log_directory=None, rmm_track_allocations=None, log_spilling=None, pre_import=None, *,
                 dashboard_address=None, resources=None, cpu_workers=None, cpu_affinity=None, host=None,
                 scheduler_port=0, interface=None, security=None, silence_logs=logging.WARN, scheduler_kwargs=None,
                 allocator=None, worker_saturation=None, worker_class=None, **kwargs):  # dask-cuda's order first
        # every keyword as given (super() puts __class__ among the locals), resolved in one place
        given = {k: v for k, v in locals().items()
                 if k not in ("self", "kwargs", "CUDA_VISIBLE_DEVICES", "n_workers", "__class__")}
        check_main_guard()
        self.devices = devices.select(devices.discover(), CUDA_VISIBLE_DEVICES)
        shuffle_mode(), partition_size()  # bad gpu.shuffle or gpu.partition-size: an error now, not in a task
        options = self.cluster_options = ClusterOptions.resolve(**given, **kwargs)
        if isinstance(n_workers, str):  # "2" as threads_per_worker="2" is: a count, from the command line or YAML
            n_workers = parse.count(n_workers, "n_workers")
        n_workers = len(self.devices) if n_workers is None else n_workers
        self._check_count(n_workers, minimum=0 if options.cpu_workers else 1)  # as dask-cuda: at least one worker
        self._prepare_this_process()
        self._n_total = len(self.devices) + options.cpu_workers  # host memory is split across all possible workers
        self._gpu_names = {d.label for _, d in self.devices}
        self._dashboard = bool(options.dashboard_address) and find_spec("bokeh") is not None
        cpu_threads = cpu_worker_threads(len(self.devices), self.options, options.cpu_workers)
        workers = {f"cpu-{i}": cpu_worker_spec(i, self.options, self._n_total, cpu_threads)
                   for i in range(options.cpu_workers)}
        for position in range(n_workers):
            workers[self.devices[position][1].label] = self._spec(position)
        super().__init__(workers=workers, scheduler=self._scheduler_spec(options), worker=self._spec(0),
                         security=options.security, silence_logs=options.silence_logs, **options.spec_cluster)
        if not self.called_from_running_loop:  # started: its workers too (await it, where asynchronous)
            self.sync(self._warmed)

    def _prepare_this_process(self) -> None:
        """What the client and the scheduler here need as the workers start: CuPy's serializers and dask-cudf
        warmed (:meth:`_warm_up`), cuDF's spilling, UCX's settings."""
        self._warm_ups = []
        if self.devices and not all(d.simulated for _, d in self.devices):
            self._warm_ups.append(arrays.client_warm_up())  # for the first CuPy result
        if self.devices and start.wanted(any(d.simulated for _, d in self.devices)):
            from dask_gpu.dataframe import backend  # dask.dataframe: only where cuDF's partitions are asked for

            self._warm_ups.append(start.client_warm_up(backend.cudf_backend))  # the client's dask-cudf
        self._warm_ups = [step for step in self._warm_ups if step is not None]
        self._warming = None
        self._undo_cudf_spill = None
        if self.options.cudf_spill:  # the client's cuDF objects too, as in each worker
            self._undo_cudf_spill = spill_cudf(True, self.options.cudf_spill_stats)
        if self.options.ucx:  # the scheduler and clients here too; other distributed-ucxx settings stay
            dask.config.set({f"distributed-ucxx.{k}": v for k, v in self.options.ucx.items()})

    def _warm_up(self) -> None:
        """This process's warm-ups, in a thread of their own, in turn (one import at a time), started once: as the
        first nanny spawns its worker (the scheduler's ``on_nanny``), so that they run beside the workers' start,
        not before it, or as the start ends where no nanny came. The start ends once they are done
        (:meth:`_warmed`). A failure is left to the first call that needs it."""
        if self._warming is not None or not self._warm_ups:
            return

        def run():
            for step in self._warm_ups:
                try:
                    step()
                except Exception as e:  # noqa: BLE001  the first call that needs it raises it, where the user looks
                    logger.debug("%s was not warmed: %s", step, e)

        self._warming = threading.Thread(target=run, name=WARMING, daemon=True)
        self._warming.start()

    @property
    def options(self) -> WorkerOptions:
        """Each worker's options (``cluster_options.workers``)."""
        return self.cluster_options.workers

    def _scheduler_spec(self, options: ClusterOptions) -> dict:
        dashboard, host = options.dashboard_address, options.host
        return {
            "cls": GPUScheduler,
            "options": {
                "worker_saturation": options.worker_saturation,
                # dask-cuda's worker names, as aliases; not for MIG instances, which share their GPU's index
                "device_indices": {d.label: d.index for _, d in self.devices if d.mig_index is None},
                "host": host,
                "port": options.scheduler_port,
                "interface": options.interface,
                "protocol": options.workers.protocol,
                "security": options.security,
                # The HTTP server binds now; the dashboard's pages attach once bokeh is
                # imported (~1 s), in the background while the workers start.
                "dashboard": None if dashboard and not self._dashboard else False,  # None: "install bokeh" page
                # off: a free port on the scheduler's host for its HTTP routes (not 8787, not every interface)
                "dashboard_address": parse.on_host(dashboard, host) if dashboard else f"{host or ''}:0",
                "on_nanny": self._warm_up,
                **options.scheduler_kwargs,
            },
        }

    def __await__(self):
        yield from super().__await__()
        yield from self._warmed().__await__()
        return self

    async def _warmed(self) -> None:
        """The warm-up done, once the workers have started: the user's first call imports nothing beside it."""
        self._warm_up()  # where no nanny came
        await self._join_warm_up()

    async def _start(self):
        await super()._start()
        if self._dashboard:
            prefix = self.scheduler_spec["options"].get("http_prefix", "/")
            self._dashboard_task = asyncio.ensure_future(attach_dashboard(self.scheduler, prefix))

    async def _close(self):
        await super()._close()
        await self._join_warm_up()  # a start that failed: not torn down with the interpreter mid-import
        if self._undo_cudf_spill is not None:  # the client's cuDF as it was: its next cluster may not spill
            self._undo_cudf_spill()
            self._undo_cudf_spill = None

    async def _join_warm_up(self) -> None:
        if self._warming is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._warming.join, 60)

    def _spec(self, position: int) -> dict:
        return gpu_worker_spec(self.devices, position, self.options, self._n_total)

    def _check_count(self, n: int, minimum: int = 0):
        visible = len(self.devices)
        if isinstance(n, bool) or not isinstance(n, int):
            raise ValueError(f"n_workers must be a whole number of GPU workers, {max(minimum, 1)} to {visible} here "
                             f"(one per visible GPU), or None for one per GPU; not {n!r}")
        if n < minimum:
            raise ValueError(f"n_workers={n}: a LocalCUDACluster runs 1 to {visible} GPU workers here (one per "
                             "visible GPU; None: all of them). For CPU workers only, give n_workers=0 with "
                             "cpu_workers=N, or use distributed.LocalCluster")
        if n > visible:
            labels = ", ".join(f"{t} ({d.name})" for t, d in self.devices)
            raise ValueError(
                f"cannot run {n!r} GPU workers: {visible} GPU(s) are visible ({labels}), "
                "one worker each. Make more GPUs visible with CUDA_VISIBLE_DEVICES, "
                "or add CPU-only workers with cpu_workers=N."
            )

    def new_worker_spec(self) -> dict:
        """The spec of the first visible device that has no worker yet."""
        for position, (_, device) in enumerate(self.devices):
            if device.label not in self.worker_spec:
                return {device.label: self._spec(position)}
        raise ValueError(f"every visible GPU already has a worker ({len(self.devices)})")

    def scale(self, n=0, memory=None, cores=None):
        """Run ``n`` GPU workers (at most one per visible GPU); CPU workers are left as they are."""
        self._check_count(n)
        if self.status in (Status.closing, Status.closed):
            self.worker_spec.clear()  # SpecCluster closes with scale(0): the CPU workers go too
        gpu = [name for name in self.worker_spec if name in self._gpu_names]
        for name in gpu[n:]:
            del self.worker_spec[name]
        for _ in range(n - len(gpu)):
            self.worker_spec.update(self.new_worker_spec())
        internals.correct_cluster_state(self)
        if self.asynchronous:
            return NoOpAwaitable()


def check_main_guard() -> None:
    """Refuse, in one line, a cluster started by a script's top-level code outside ``if __name__ == "__main__":``.

    Each worker process is spawned: it imports the script again, which would start a cluster of its own,
    and distributed would then print a trace per worker ending in "Nanny failed to start". Only a script run
    as a file is read (not a notebook, ``python -c`` or a REPL), and only where workers are spawned.
    """
    if dask.config.get("distributed.worker.multiprocessing-method") == "fork":
        return
    script = getattr(sys.modules.get("__main__"), "__file__", None)
    frame = inspect.currentframe().f_back
    while frame is not None and not (frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") in (
            "__main__", "__mp_main__") and frame.f_code.co_filename == script):
        frame = frame.f_back
    if frame is None or not os.path.isfile(script):
        return
    line = frame.f_lineno
    with open(script, encoding="utf-8", errors="replace") as f:
        tree = ast.parse(f.read(), script)
    guarded = any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
                  and node.lineno <= line <= node.end_lineno for node in tree.body)
    if not guarded:
        raise RuntimeError(f"{script}, line {line}, starts a LocalCUDACluster outside `if __name__ == \"__main__\":`; "
                           "each worker process imports the script again: put the code that starts the cluster "
                           "under that guard")
