"""What ``dask gpu info`` and ``dask gpu config`` print: devices, installed libraries, worker settings."""

from __future__ import annotations

import importlib.metadata
import os

from dask.utils import format_bytes

from dask_gpu import internals
from dask_gpu.devices import System

# Distributions that matter on a GPU machine; CUDA builds add a suffix (cupy-cuda12x, rmm-cu13, dask-cuda).
LIBRARIES = ("cupy", "rmm", "distributed-ucxx", "ucxx", "libucx", "cudf", "dask-cudf", "dask-cuda", "torch",
             "nvidia-ml-py", "dask", "distributed", "numpy", "pandas", "pyarrow", "numba", "bokeh", "xxhash")
# The GPU libraries a bug report should say are missing, by distribution name (before any CUDA suffix).
WANTED = {"cupy": "CuPy", "cudf": "cuDF", "rmm": "RMM", "distributed-ucxx": "UCX (distributed-ucxx)"}


def installed() -> dict[str, str]:
    """Versions of the GPU-related distributions installed, read from metadata (nothing is imported)."""
    found = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name in LIBRARIES or any(name.startswith(prefix + "-cu") for prefix in LIBRARIES):
            found[name] = dist.version
    return dict(sorted(found.items()))


def missing(libs: dict) -> list[str]:
    """The GPU libraries of WANTED that none of ``libs`` provides."""
    return [label for name, label in WANTED.items() if not any(k == name or k.startswith(name + "-cu") for k in libs)]


def system_dict(system: System) -> dict:
    libs = installed()
    return {
        "state": system.state.value,
        "message": system.message,
        "driver_version": system.driver_version,
        "cuda_version": system.cuda_version,
        "devices": [{**d.describe(), "mig": [m.describe() for m in d.mig]} for d in system.devices],
        "installed": libs,
        "not_installed": missing(libs),
        **platform_dict(),
        "config": config_rows(),
        "environment": environment(),
        "problems": config_problems(),
    }


def platform_dict() -> dict:
    """dask-gpu, Python and the operating system, as a bug report wants them."""
    import platform

    from dask_gpu import __file__ as where
    from dask_gpu import __version__

    return {"dask_gpu": __version__, "dask_gpu_path": os.path.dirname(where),
            "python": f"{platform.python_version()} ({platform.python_implementation()})",
            "platform": platform.platform(), "cpu_count": os.cpu_count()}


def config_rows() -> list[dict]:
    """Each ``gpu.*`` key in force: its value and its default (None for a key dask-gpu does not know)."""
    import dask

    from dask_gpu.config import defaults

    given, known = dask.config.get("gpu", {}), defaults["gpu"]
    given = given if isinstance(given, dict) else {}
    keys = sorted(set(known) | {str(k).replace("_", "-") for k in given})
    values = {str(k).replace("_", "-"): v for k, v in given.items()}
    return [{"key": f"gpu.{k}", "value": values.get(k), "default": known.get(k), "known": k in known} for k in keys]


def environment() -> dict:
    """The variables that choose GPUs or set dask-gpu's configuration."""
    names = ["CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", *sorted(k for k in os.environ if k.startswith("DASK_GPU__"))]
    return {name: os.environ.get(name) for name in names}


def config_problems() -> list[str]:
    """What a cluster would refuse in the configuration: a misspelled gpu.* key, a bad value."""
    import warnings

    from dask_gpu.options import WorkerOptions

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a fallback from UCX to TCP, say: not a problem of the configuration
            WorkerOptions.resolve()
    except (ValueError, TypeError) as e:
        return [str(e)]
    return []


def system_text(system: System) -> str:
    lines = []
    if system.devices:
        lines.append(f"NVIDIA driver {system.driver_version}, CUDA {system.cuda_version}: {system.message}")
        rows = [("#", "name", "memory", "CPU cores", "UUID")]
        for d in system.devices:
            rows.append((str(d.index), d.name, format_bytes(d.memory_total), cores_text(d.cpu_affinity), d.uuid))
            for m in d.mig:
                rows.append((f"{d.index}.{m.mig_index}", m.name, format_bytes(m.memory_total), "", m.uuid))
        lines.append(table(rows))
    else:
        lines.append(f"No GPU: {system.message}")
        lines.append("To try GPU cluster code without a GPU, simulate devices: DASK_GPU__SIMULATE=2 dask gpu info")
    libs = installed()
    lines.append("Installed: " + ", ".join(f"{k} {v}" for k, v in libs.items()))
    if missing(libs):
        lines.append("Not installed: " + ", ".join(missing(libs)))
    if not any(k.startswith("cupy") for k in libs):
        lines.append("CuPy is not installed: pip install 'dask-gpu[cuda12]' or 'dask-gpu[cuda13]' for GPU arrays.")
    about = platform_dict()
    lines.append(f"dask-gpu {about['dask_gpu']} ({about['dask_gpu_path']}), Python {about['python']}, "
                 f"{about['platform']}, {about['cpu_count']} CPU cores")
    return "\n".join([*lines, config_text(config_rows()), environment_text(environment()),
                      *(f"Configuration problem: {p}" for p in config_problems())])


def config_text(rows: list[dict]) -> str:
    """The gpu.* configuration as a table; a value that is not the default says what the default is."""
    out = [("configuration", "value", "default (where it differs)")]
    for r in rows:
        default = "(unknown key)" if not r["known"] else "" if r["value"] == r["default"] else repr(r["default"])
        out.append((r["key"], repr(r["value"]), default))
    return table(out)


def environment_text(env: dict) -> str:
    return "Environment: " + ", ".join(f"{k}={v}" if v is not None else f"{k} unset" for k, v in env.items())


def worker_dict(dask_worker) -> dict:
    """A worker's configuration, read inside the worker (``client.run(worker_dict)``)."""
    plugin = dask_worker.plugins.get("dask-gpu")
    gpu = plugin.info() if plugin is not None else {}
    return {
        "name": dask_worker.name,
        "address": dask_worker.address,
        "nthreads": dask_worker.state.nthreads,
        "memory_limit": dask_worker.memory_manager.memory_limit,
        "resources": dict(dask_worker.state.total_resources),
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cpu_affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "local_directory": dask_worker.local_directory,
        "pid": os.getpid(),
        "device": gpu.get("device"),
        "device_memory_limit": gpu.get("device_memory_limit"),
        "pre_import": list(gpu.get("pre_import", ())),
        "cudf_spill": gpu.get("cudf_spill", False),
        "allocator": gpu.get("allocator"),
        "worker_class": f"{type(dask_worker).__module__}.{type(dask_worker).__qualname__}",
        "data": type(dask_worker.data).__name__,  # DeviceHostDiskStore: the device tier is on
    }


def cluster_dict(client) -> dict:
    """The cluster as its scheduler sees it: address, workers, threads, worker TTL, extensions."""
    info = internals.scheduler_identity(client)
    address = info.get("address", "")
    return {
        "scheduler": address,
        "protocol": address.split("://", 1)[0] if "://" in address else None,
        "workers": len(info["workers"]),
        "threads": sum(w["nthreads"] for w in info["workers"].values()),
        "worker-ttl": client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.worker_ttl),
        "extensions": client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.extensions)),
    }


def workers_rows(client) -> list[dict]:
    """``worker_dict`` of every worker of ``client``'s cluster, sorted by name."""
    workers = client.run(worker_dict)
    return [workers[address] for address in sorted(workers, key=lambda a: str(workers[a]["name"]))]


def cluster_text(cluster: dict, rows: list[dict]) -> str:
    ttl = cluster["worker-ttl"]
    head = (f"scheduler {cluster['scheduler']}: {cluster['workers']} worker(s), {cluster['threads']} thread(s), "
            f"worker TTL {f'{ttl:g} s' if ttl else 'none'}; extensions: {', '.join(cluster['extensions'])}")
    return head + "\n" + workers_text(rows) if rows else head


def print_cluster_config(client) -> None:
    """Print the cluster's configuration and each worker's (``dask gpu config``), as dask-cuda's function does."""
    print(cluster_text(cluster_dict(client), workers_rows(client)))


def workers_text(rows: list[dict]) -> str:
    out = [("name", "device", "threads", "memory", "device memory", "CUDA_VISIBLE_DEVICES", "CPU cores", "resources")]
    for w in rows:
        device = w["device"] or {}
        out.append(
            (
                str(w["name"]),
                device.get("name", "-"),
                str(w["nthreads"]),
                format_bytes(w["memory_limit"]) if w["memory_limit"] else "unlimited",
                format_bytes(w["device_memory_limit"]) if w["device_memory_limit"] else "-",
                w["CUDA_VISIBLE_DEVICES"] if w["CUDA_VISIBLE_DEVICES"] is not None else "(unset)",
                cores_text(w["cpu_affinity"] or ()),
                " ".join(f"{k}={v:g}" for k, v in w["resources"].items()) or "-",
            )
        )
    return table(out)


def cores_text(cores) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    spans: list[list[int]] = []
    for core in sorted(set(cores)):
        if spans and core == spans[-1][1] + 1:
            spans[-1][1] = core
        else:
            spans.append([core, core])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans) or "-"


def table(rows) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def machine_dict() -> dict:
    """This machine, for benchmark results: CPU, memory, GPUs, library versions."""
    import platform

    from dask.system import CPU_COUNT
    from distributed.system import MEMORY_LIMIT

    from dask_gpu.devices import discover

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "cores": CPU_COUNT,
        "memory": MEMORY_LIMIT,
        "python": platform.python_version(),
        "gpus": system_dict(discover()),
    }
