"""Starting the workers of ``dask gpu worker``: one Nanny per visible GPU, stopped by SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import re
import signal

from dask_gpu import devices
from dask_gpu.dataframe.scheduler import register as register_device_shuffles
from dask_gpu.options import WorkerOptions
from dask_gpu.spec import gpu_worker_spec

logger = logging.getLogger("dask_gpu")


def worker_specs(visible, name_prefix: str, preload=(), **options) -> list[dict]:
    """One spec per visible GPU, from the CLI's options (None: fall back to config)."""
    selected = devices.select(devices.discover().require("dask gpu worker"), visible)
    resolved = WorkerOptions.resolve(preload=list(preload) or None, **options)
    return [gpu_worker_spec(selected, i, resolved, len(selected), name_prefix) for i in range(len(selected))]


def apportion_ports(worker_port, nanny_port, n: int) -> list[dict]:
    """Share ``--worker-port``/``--nanny-port`` (a port or a range) out among n workers, disjointly."""
    workers = _share(worker_port, n, "--worker-port")
    nannies = _share(nanny_port, n, "--nanny-port")
    return [{"worker_port": w, "port": p} for w, p in zip(workers, nannies)]


def _share(spec, n: int, flag: str) -> list:
    if spec in (None, "", "0", 0):
        return [0] * n  # any free port
    ports = port_range(spec, flag)
    if len(ports) < n:
        raise ValueError(
            f"{flag} {spec!r} gives {len(ports)} port(s) for {n} GPU workers: "
            f"give a range of at least {n}, e.g. {ports[0]}:{ports[0] + n - 1}"
        )
    return [list(ports[i::n]) for i in range(n)]


def port_range(spec, flag: str) -> range:
    """A port (9000) or a range ("9000:9010") as ports, checked before any is listed: 1:10**12 is an error."""
    text = str(spec) if isinstance(spec, (int, str)) and not isinstance(spec, bool) else ""
    match = re.fullmatch(r"\s*([0-9]{1,20})\s*(?::\s*([0-9]{1,20})\s*)?", text)
    if not match:
        raise ValueError(f"{flag} {spec!r} is not a port or a range like 9000:9010")
    first, last = int(match[1]), int(match[2] or match[1])
    bad = [p for p in (first, last) if not 0 < p < 65536]
    if bad:
        raise ValueError(f"{flag} {spec!r}: port {bad[0]} is outside 1-65535")
    if last < first:
        raise ValueError(f"{flag} {spec!r}: a range's last port must be above its first, e.g. 9000:9010")
    return range(first, last + 1)


async def run_nannies(scheduler, scheduler_file, specs, ports, extra) -> int:
    """Run the nannies until they finish or a signal arrives; the process's exit code."""
    nannies = [
        spec["cls"](scheduler, scheduler_file=scheduler_file, **spec["options"], **port, **extra)
        for spec, port in zip(specs, ports)
    ]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)

    async def serve():
        await asyncio.gather(*nannies)
        if nannies:  # a scheduler started by ``dask scheduler`` has no device shuffle of its own
            await register_device_shuffles(nannies[0].scheduler)
        await asyncio.gather(*(n.finished() for n in nannies))

    serving = asyncio.ensure_future(serve())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if serving.done() and serving.exception() is not None:
        logger.error("dask gpu worker: workers failed: %s", serving.exception())
        code = 1
    serving.cancel()
    stopping.cancel()
    await asyncio.gather(*(n.close(timeout=10, reason="dask-gpu-worker-exit") for n in nannies), return_exceptions=True)
    return code
