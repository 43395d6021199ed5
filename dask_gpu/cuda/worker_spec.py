"""``dask_cuda.worker_spec``: the specs of one worker per visible GPU, for a SpecCluster, from dask-gpu's one
spec builder (dask_gpu.spec.worker_specs): the workers LocalCUDACluster would run."""

from distributed import Nanny

from dask_gpu import checks, devices, keywords, parse
from dask_gpu.options import KEYWORDS, WorkerOptions
from dask_gpu.spec import worker_specs
from dask_gpu.ucx import UCX_PROTOCOLS

__all__ = ["worker_spec"]


def worker_spec(interface=None, protocol=None, dashboard_address=":8787", threads_per_worker=1, silence_logs=True,
                CUDA_VISIBLE_DEVICES=None, enable_tcp_over_ucx=False, enable_infiniband=False, enable_nvlink=False,
                cls=Nanny, memory_limit="default", device_memory_limit="default", **kwargs):
    """Worker name (``gpu-0``, ...) -> ``{"cls", "options"}``; dask-cuda's keywords, and any of LocalCUDACluster's
    worker keywords (``device_memory_limit``, ``rmm_pool_size``, ...), with the cluster's meaning (the memory limits:
    "default" the configuration, None no limit). Each spec's options name the interface, protocol, dashboard
    address, threads and log silencing asked for, None included."""
    if (enable_infiniband or enable_nvlink) and protocol not in UCX_PROTOCOLS:
        raise TypeError(f"Enabling InfiniBand or NVLink requires protocol='ucx', not {protocol!r}")
    options = WorkerOptions.resolve(
        nthreads=threads_per_worker, protocol=protocol, interface=interface, dashboard_address=dashboard_address,
        silence_logs=silence_logs, enable_tcp_over_ucx=enable_tcp_over_ucx or None,
        enable_infiniband=enable_infiniband or None, enable_nvlink=enable_nvlink or None, worker_class=cls,
        memory_limit=parse.keyword_limit(memory_limit), device_memory_limit=parse.keyword_limit(device_memory_limit),
        **kwargs)
    keywords.check(options.extra, "worker_spec", KEYWORDS, options.worker_class)
    # as LocalCUDACluster checks them, but an interface's name: dask-cuda's worker_spec takes any, and its specs name
    # interfaces that the machine making them may lack; a worker started with one it lacks says so
    checks.worker_keywords({k: v for k, v in options.extra.items() if not (k == "interface" and isinstance(v, str))},
                           "worker_spec")
    specs = worker_specs(devices.select(devices.discover(), CUDA_VISIBLE_DEVICES), options)
    asked = {"interface": interface, "protocol": protocol, "dashboard_address": dashboard_address,
             "silence_logs": silence_logs}
    for spec in specs.values():
        spec["options"].update(asked)
    return specs
