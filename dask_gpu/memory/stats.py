"""Device-memory figures of a worker: for its heartbeat (dashboard), Prometheus, and clients."""

from __future__ import annotations

import functools
import weakref
from importlib.util import find_spec

PREFIX = "dask_gpu_memory_"


def worker_metrics(worker) -> dict:
    """Bytes and keys per tier, spill traffic and allocation-failure retries of ``worker``."""
    from dask_gpu.memory.allocator import allocator_metrics
    from dask_gpu.memory.store import DeviceHostDiskStore

    out = worker.data.metrics() if isinstance(worker.data, DeviceHostDiskStore) else {}
    out.update(allocator_metrics())
    return out


def memory_stats(client) -> dict[str, dict]:
    """``worker_metrics`` of every worker of ``client``'s cluster, by worker name."""
    stats = client.run(lambda dask_worker: (dask_worker.name, worker_metrics(dask_worker)))
    return dict(stats.values())


def export(worker) -> None:
    """Report ``worker_metrics`` in the heartbeat and, where prometheus_client is installed,
    on the worker's /metrics page."""
    worker.metrics["gpu-memory"] = worker_metrics
    if find_spec("prometheus_client") is not None:
        _collector().workers.add(worker)


class _Collector:
    """One per process (Prometheus refuses duplicate names); a ``worker`` label tells workers apart."""

    def __init__(self):
        self.workers = weakref.WeakSet()

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        families = {}
        for worker in list(self.workers):
            for name, value in worker_metrics(worker).items():
                if name not in families:
                    families[name] = GaugeMetricFamily(
                        PREFIX + name.replace("-", "_"), f"dask-gpu device memory: {name}", labels=["worker"]
                    )
                families[name].add_metric([str(worker.name)], float(value))
        yield from families.values()


@functools.lru_cache(maxsize=1)
def _collector() -> _Collector:
    from prometheus_client import REGISTRY

    collector = _Collector()
    REGISTRY.register(collector)
    return collector
