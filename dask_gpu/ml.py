"""Machine learning on GPU workers: Dask-ML's hyper-parameter searches with every fit on a GPU.

    with dask_gpu.ml.on_gpus(client) as gpus:
        X, y = gpus.scatter(X, y)   # on a GPU worker, as CuPy arrays (NumPy where the GPUs are simulated)
        search.fit(X, y)            # dask_ml.model_selection.GridSearchCV or RandomizedSearchCV

Dask-ML builds its search as a low-level graph and hands it to the scheduler that dask finds. Inside the
block that scheduler is :meth:`GPUs.get`: every computation (the fits and scores, the type of target Dask-ML
computes for a classifier, the refit) runs on the workers with the ``GPU`` resource, one task per GPU at a
time, and a failing fit raises at once (Dask-ML's own loop over a distributed client retries it for ever).
What the block submits through the client itself (``client.submit``, ``persist``, ``compute``: cuML's Dask
estimators do so) carries the same resource, so that it too stays off the cluster's CPU workers.
Where the GPUs are real, those tasks run in an executor whose threads turn on scikit-learn's Array API
dispatch, so that estimators that support it compute with CuPy on the arrays where they lie; on simulated
GPUs they run scikit-learn on NumPy, and :class:`GPUs` says so.
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from importlib.util import find_spec

import dask
from distributed import WorkerPlugin, default_client
from distributed.threadpoolexecutor import ThreadPoolExecutor

from dask_gpu import internals

logger = logging.getLogger("dask_gpu")

EXECUTOR = "array-api"  # the executor of GPU workers whose threads run scikit-learn with Array API dispatch


class ArrayAPIThreadPoolExecutor(ThreadPoolExecutor):
    """distributed's thread pool, each task inside ``sklearn.config_context(array_api_dispatch=True)``
    (scikit-learn's configuration is per thread). The name ends in ThreadPoolExecutor: distributed runs
    tasks with their context variables only in executors so named."""

    def submit(self, fn, /, *args, **kwargs):
        return super().submit(_dispatching, fn, *args, **kwargs)


def _dispatching(fn, *args, **kwargs):
    import sklearn

    with sklearn.config_context(array_api_dispatch=True):
        return fn(*args, **kwargs)


class ArrayAPI(WorkerPlugin):
    """Gives each worker with the GPU resource the :data:`EXECUTOR` executor, and scipy the
    ``SCIPY_ARRAY_API=1`` that scikit-learn's dispatch needs (scipy reads it once, as it is imported)."""

    name = "dask-gpu-array-api"

    def __init__(self, resource: str = "GPU"):
        self.resource = resource

    def setup(self, worker):
        if not worker.state.total_resources.get(self.resource) or EXECUTOR in worker.executors:
            return
        if "scipy" in sys.modules and os.environ.get("SCIPY_ARRAY_API") != "1":
            raise RuntimeError(f"worker {worker.name} imported scipy without SCIPY_ARRAY_API=1, which scikit-learn's "
                               "Array API dispatch needs: give the workers SCIPY_ARRAY_API=1 in their environment "
                               "as they start (os.environ before the cluster starts, LocalCUDACluster(env={"
                               "'SCIPY_ARRAY_API': '1'}), or export it before dask gpu worker)")
        os.environ["SCIPY_ARRAY_API"] = "1"
        worker.executors[EXECUTOR] = ArrayAPIThreadPoolExecutor(worker.state.nthreads,
                                                                thread_name_prefix="Dask-Array-API-Thread")


class GPUs:
    """The GPU workers of ``client``'s cluster, as a dask scheduler (:meth:`get`) for the block of :func:`on_gpus`.

    ``device``: the data are CuPy arrays (real GPUs with CuPy) or NumPy ones (simulated GPUs). ``array_api``:
    scikit-learn's Array API dispatch is on in the tasks; by default where ``device``.
    """

    def __init__(self, client, resource: str = "GPU", array_api: bool | None = None, fits_per_gpu: int = 1):
        if not isinstance(resource, str) or not resource:
            raise TypeError(f"resource must be the name of the workers' GPU resource, such as 'GPU', not {resource!r}")
        if isinstance(fits_per_gpu, bool) or not isinstance(fits_per_gpu, int) or fits_per_gpu < 1:
            raise ValueError(f"fits_per_gpu must be a whole number of fits at once on each GPU, 1 or more, not "
                             f"{fits_per_gpu!r}")
        self.client, self.resource, self.fits_per_gpu = client, resource, fits_per_gpu
        # a share a little under 1/n: n of them fit in the worker's 1, whatever the floating-point sum
        self.share = 1.0 if fits_per_gpu == 1 else (1 - 1e-9) / fits_per_gpu
        info = internals.scheduler_identity(client)["workers"]
        self.workers = gpu_workers(info, resource)
        threads = min(info[address]["nthreads"] for address in self.workers)
        if threads < fits_per_gpu:
            raise ValueError(f"fits_per_gpu={fits_per_gpu}, but the GPU workers run {threads} thread(s) each: start "
                             f"them with {fits_per_gpu} (LocalCUDACluster(threads_per_worker={fits_per_gpu}), dask "
                             f"gpu worker --nthreads {fits_per_gpu})")
        states = client.run(worker_state, workers=self.workers)
        lacking = sorted(address for address, state in states.items() if not state["sklearn"])
        if lacking:
            raise ImportError(f"scikit-learn is not installed on the GPU worker(s) {', '.join(lacking)}: install "
                              "dask-gpu[ml] where the workers run")
        self.device = all(state["cupy"] and not state["simulated"] for state in states.values())
        self.simulated = any(state["simulated"] for state in states.values())
        self.array_api = self.device if array_api is None else bool(array_api)

    def __str__(self):
        n = len(self.workers)
        where = f"{n} {'simulated ' if self.simulated else ''}GPU worker{'s' if n > 1 else ''}"
        if self.fits_per_gpu > 1:
            where += f", {self.fits_per_gpu} fits at once on each"
        if self.device:
            return f"{where}: scikit-learn on CuPy arrays" + ("" if self.array_api else ", without Array API dispatch")
        why = "simulated GPUs" if self.simulated else "CuPy is not installed there"
        dispatch = ", Array API dispatch on" if self.array_api else ""
        return f"{where}: scikit-learn on NumPy arrays ({why}{dispatch})"

    def get(self, dsk, keys, **kwargs):
        """Dask's scheduler interface: the values of ``keys`` of graph ``dsk``, computed on the GPU workers.
        Other keywords (Dask-ML's ``num_workers``) are for local schedulers and are ignored."""
        with dask.annotate(**({"executor": EXECUTOR} if self.array_api else {})):
            return self.client.get(dsk, keys, resources={self.resource: self.share})

    def scatter(self, *arrays):
        """Each array on one GPU worker, as the array that the estimators compute on there: CuPy where the
        GPUs are real, NumPy otherwise. A NumPy array is sent to the worker and copied to its device once (a
        dask.delayed of it comes back, which Dask-ML takes as data); a dask array is converted chunk by chunk
        on the GPU workers and persisted. None stays None."""
        out = []
        for array in arrays:
            if array is None:
                out.append(None)
            elif dask.is_dask_collection(array):
                with dask.annotate(resources={self.resource: self.share}):
                    moved = array.map_blocks(to_device, self.device, dtype=array.dtype)
                out.append(self.client.persist(moved, optimize_graph=False))  # fusing would drop the annotation
            else:
                host = self.client.scatter(array, workers=self.workers[:1])  # X and y on one worker, together
                future = self.client.submit(to_device, host, self.device, resources={self.resource: self.share})
                out.append(dask.delayed(future))
        return out[0] if len(arrays) == 1 else out


@contextmanager
def on_gpus(client=None, resource: str = "GPU", array_api: bool | None = None, fits_per_gpu: int = 1):
    """Every dask computation in the block runs on the GPU workers of ``client`` (default: the current client):
    Dask-ML's ``GridSearchCV.fit`` and ``RandomizedSearchCV.fit`` among them, and what is submitted through a
    client (as cuML's Dask estimators do). Yields the :class:`GPUs`.
    ``array_api``: scikit-learn's Array API dispatch in those tasks (default: on where the GPUs are real).
    ``fits_per_gpu``: tasks at once on each GPU worker (default 1; more needs as many worker threads), which
    overlaps the host-side work of small or host-bound fits.

    Errors before anything runs: no client, no worker with ``resource``, scikit-learn missing on a GPU worker.
    """
    if client is None:
        try:
            client = default_client()
        except ValueError:
            raise ValueError("on_gpus needs a dask client: start a cluster with GPU workers (dask_gpu."
                             "LocalCUDACluster, dask gpu worker) and a distributed.Client first") from None
    gpus = GPUs(client, resource, array_api, fits_per_gpu)
    if gpus.array_api:
        client.register_plugin(ArrayAPI(resource))
    logger.info("fits on %s", gpus)
    with dask.config.set(scheduler=gpus.get), dask.annotate(resources={resource: gpus.share}):
        yield gpus


def gpu_workers(workers: dict, resource: str = "GPU") -> list[str]:
    """Addresses of the workers (the scheduler's address -> worker info) that have one or more ``resource``; a
    ValueError that says what to do where none has."""
    found = sorted(address for address, info in workers.items() if info.get("resources", {}).get(resource, 0) >= 1)
    if found:
        return found
    if not workers:
        raise ValueError("the cluster has no workers yet: wait for them (client.wait_for_workers(n)) first")
    names = sorted({name for info in workers.values() for name in info.get("resources", {})})
    have = f"the resources there are {', '.join(map(repr, names))}" if names else "none has a resource"
    raise ValueError(f"none of the cluster's {len(workers)} worker(s) has the {resource!r} resource ({have}): run GPU "
                     "workers with dask_gpu.LocalCUDACluster or dask gpu worker, which give each {'GPU': 1}, or name "
                     "the resource your GPU workers have (on_gpus(resource=...))")


def worker_state(dask_worker) -> dict:
    """What a GPU worker can run: scikit-learn's version, whether CuPy is installed, whether its GPU is simulated."""
    plugin = dask_worker.plugins.get("dask-gpu")  # dask-gpu's GPU workers know their device
    sklearn = find_spec("sklearn")
    version = None
    if sklearn is not None:
        from importlib.metadata import PackageNotFoundError, version as dist_version

        try:
            version = dist_version("scikit-learn")
        except PackageNotFoundError:
            version = "unknown"
    return {"sklearn": version, "cupy": find_spec("cupy") is not None,
            "simulated": bool(plugin is not None and plugin.device.get("simulated"))}


def to_device(array, gpu: bool):
    """The array on this worker's GPU (CuPy) where ``gpu``, else as it is."""
    if not gpu:
        return array
    import cupy

    return cupy.asarray(array)
