"""dask-cuda's CUDAWorker: one Nanny per visible GPU of this machine, attached to a running scheduler.

``dask gpu worker`` builds one and serves it until SIGINT/SIGTERM; a program may ``await`` one too.
"""

from __future__ import annotations

import asyncio
import atexit
import inspect
import logging
import os
import re
import signal
import socket

import dask
from distributed.deploy.cluster import Cluster

from dask_gpu import devices, keywords
from dask_gpu.dataframe.scheduler import register as register_device_shuffles
from dask_gpu.options import KEYWORDS, WorkerOptions, keyword_limit
from dask_gpu.spec import worker_specs

logger = logging.getLogger("dask_gpu")


class CUDAWorker:
    """One Nanny per visible GPU, attached to ``scheduler`` (an address, a cluster, or ``scheduler_file=``).

    Takes dask-cuda's CUDAWorker keywords by name (``nthreads``, ``memory_limit``, ``device_memory_limit``,
    ``enable_cudf_spill``, ``rmm_*``, ``pre_import``, ``worker_class``, ``resources``, ``preload``,
    ``security``, ``enable_*`` UCX transports, ...) with their meaning, and distributed's Nanny and
    Worker keywords; anything else is an error here, before a process starts. Each worker is named
    ``{name}-gpu-N`` (``name``: this host's name by default). ``await worker`` starts the nannies.
    """

    def __init__(self, scheduler=None, *, name=None, memory_limit="default", device_memory_limit="default",
                 CUDA_VISIBLE_DEVICES=None, worker_port=None, nanny_port=None, listen_address=None,
                 contact_address=None, dashboard=True, dashboard_address=":0", dashboard_prefix=None, preload=(),
                 scheduler_file=None, pid_file=None, **options):
        if isinstance(scheduler, Cluster):
            scheduler = scheduler.scheduler_address
        if scheduler is None and scheduler_file is None and dask.config.get("scheduler-address", None) is None:
            raise ValueError("no scheduler: give its address, scheduler_file=, or the scheduler-address configuration")
        _check_addresses(listen_address, contact_address, worker_port, options)
        if dashboard_prefix is not None:
            options["http_prefix"] = dashboard_prefix
        resolved = WorkerOptions.resolve(memory_limit=keyword_limit(memory_limit), dashboard=dashboard,
                                         device_memory_limit=keyword_limit(device_memory_limit),
                                         dashboard_address=dashboard_address, preload=list(preload) or None, **options)
        keywords.check(resolved.extra, "CUDAWorker", _OWN, resolved.worker_class)
        selected = devices.select(devices.discover().require("CUDAWorker"), CUDA_VISIBLE_DEVICES)
        self.specs = list(worker_specs(selected, resolved, name or socket.gethostname()).values())
        if listen_address and len(self.specs) > 1:
            raise ValueError(f"listen_address names one address, and {len(self.specs)} GPU workers need one each: "
                             "give a host with worker_port ranges, or make one GPU visible")
        self.ports = apportion_ports(worker_port, nanny_port, len(self.specs))
        self.extra = {"listen_address": listen_address, "contact_address": contact_address} if listen_address else {}
        self.scheduler, self.scheduler_file, self.pid_file = scheduler, scheduler_file, pid_file
        self.nannies = []
        if pid_file:
            with open(pid_file, "w") as f:
                f.write(str(os.getpid()))
            atexit.register(self._remove_pid_file)

    async def start(self):
        """Start every Nanny (in this event loop) and give the scheduler dask-gpu's device shuffle."""
        if not self.nannies:
            self.nannies = [spec["cls"](self.scheduler, scheduler_file=self.scheduler_file, **spec["options"],
                                        **port, **self.extra) for spec, port in zip(self.specs, self.ports)]
        await asyncio.gather(*self.nannies)
        if self.nannies:  # a scheduler started by ``dask scheduler`` has no device shuffle of its own
            await register_device_shuffles(self.nannies[0].scheduler)
        return self

    def __await__(self):
        return self.start().__await__()

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
        await self.close()

    async def finished(self):
        await asyncio.gather(*(n.finished() for n in self.nannies))

    async def close(self, timeout=5):
        await asyncio.gather(*(n.close(timeout=timeout, reason="dask-gpu-worker-exit") for n in self.nannies),
                             return_exceptions=True)
        self._remove_pid_file()

    def _remove_pid_file(self):
        if self.pid_file and os.path.exists(self.pid_file):
            os.remove(self.pid_file)


_OWN = set(inspect.signature(CUDAWorker).parameters) - {"options"} | KEYWORDS  # for "did you mean ...?"


def _check_addresses(listen_address, contact_address, worker_port, options):
    if contact_address and not listen_address:
        raise ValueError("contact_address needs listen_address (--contact-address needs --listen-address)")
    if listen_address and (worker_port or options.get("host")):
        raise ValueError("listen_address already names the host and port: drop host and worker_port "
                         "(--host, --worker-port)")
    if options.get("host") and options.get("interface"):
        raise ValueError("give host or interface (--host, --interface), not both")


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


async def serve(worker: CUDAWorker) -> int:
    """Run ``worker`` until its nannies finish or SIGINT/SIGTERM arrives; the process's exit code.

    1 where the workers never joined, as ``dask worker`` exits (a --death-timeout that expired, say):
    a supervisor should see that the workers are not there.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)

    async def run():
        await worker.start()
        await worker.finished()

    serving = asyncio.ensure_future(run())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if serving.done() and serving.exception() is not None:
        error = serving.exception()
        where = worker.scheduler or worker.scheduler_file
        if isinstance(error, asyncio.TimeoutError):
            logger.error("dask gpu worker: the workers did not join the scheduler at %s in time (%s); exiting",
                         where, error)
        else:
            logger.error("dask gpu worker: workers failed: %s", error)
        code = 1
    serving.cancel()
    stopping.cancel()
    await worker.close(timeout=10)
    return code
