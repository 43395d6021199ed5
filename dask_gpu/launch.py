"""dask-cuda's CUDAWorker: one Nanny per visible GPU of this machine, attached to a running scheduler.

``dask gpu worker`` builds one and serves it until SIGINT/SIGTERM; a program may ``await`` one too.
"""

from __future__ import annotations

import asyncio
import atexit
import inspect
import logging
import os
import signal
import socket
import time

import dask
from distributed.comm import get_address_host
from distributed.deploy.cluster import Cluster
from distributed.security import Security
from distributed.utils import get_ip, get_ip_interface

from dask_gpu import checks, devices, keywords, machine, parse, reach
from dask_gpu.options import KEYWORDS, WorkerOptions
from dask_gpu.scheduler import register as register_scheduler_plugins
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
        if scheduler is not None and scheduler_file is not None:
            raise ValueError(f"give the scheduler's address ({scheduler}) or scheduler_file ({scheduler_file}), "
                             "not both (--scheduler-file)")
        if scheduler is None and scheduler_file is None and dask.config.get("scheduler-address", None) is None:
            raise ValueError("no scheduler: give its address, scheduler_file=, or the scheduler-address configuration")
        if scheduler_file is not None:
            reach.check_file_can_appear(scheduler_file)  # else a scheduler address: checked here
        elif scheduler is not None:
            parse.address(scheduler, "scheduler")
        _check_addresses(listen_address, contact_address, worker_port, options)
        if dashboard_prefix is not None:
            options["http_prefix"] = dashboard_prefix
        resolved = WorkerOptions.resolve(memory_limit=parse.keyword_limit(memory_limit), dashboard=dashboard,
                                         device_memory_limit=parse.keyword_limit(device_memory_limit),
                                         dashboard_address=dashboard_address, preload=list(preload) or None, **options)
        keywords.check(resolved.extra, "CUDAWorker", _OWN, resolved.worker_class)
        checks.worker_keywords(resolved.extra, "CUDAWorker")
        if resolved.local_directory:
            machine.directory(resolved.local_directory)
        self.death_timeout = resolved.extra.get("death_timeout")
        self.selected = devices.select(devices.discover().require("CUDAWorker"), CUDA_VISIBLE_DEVICES)
        self.specs = list(worker_specs(self.selected, resolved, name or socket.gethostname()).values())
        if listen_address and len(self.specs) > 1:
            raise ValueError(f"Cannot specify listen_address or contact_address when using multiple GPUs: "
                             f"listen_address names one address, and {len(self.specs)} GPU workers need one each; "
                             "give a host with worker_port ranges, or make one GPU visible")
        self.ports = apportion_ports(worker_port, nanny_port, len(self.specs))
        connection = _connection_args(resolved.extra.get("security") or Security())
        if isinstance(scheduler, str) and reach.no_tls(scheduler, connection):
            raise ValueError(reach.no_tls(scheduler, connection))
        self.extra = {"listen_address": listen_address, "contact_address": contact_address} if listen_address else {}
        self.scheduler, self.scheduler_file, self.pid_file = scheduler, scheduler_file, pid_file
        self.nannies = []
        if pid_file:
            try:
                with open(pid_file, "w") as f:
                    f.write(str(os.getpid()))
            except OSError as e:
                raise ValueError(f"pid_file {pid_file!r} cannot be written ({e.strerror})") from None
            atexit.register(self._remove_pid_file)

    async def start(self):
        """Find and reach the scheduler, start every Nanny (in this event loop), and give the scheduler
        dask-gpu's device shuffle and its note on workers restarted for memory."""
        if not self.nannies:
            address = await self._reach_scheduler()
            self.nannies = [spec["cls"](address, **bind(spec["options"], address, self.extra), **port, **self.extra)
                            for spec, port in zip(self.specs, self.ports)]
        began = time.monotonic()
        started = await asyncio.gather(*self.nannies, return_exceptions=True)
        errors = [result for result in started if isinstance(result, BaseException)]
        if errors:
            took = time.monotonic() - began  # distributed bounds a worker's start by its death timeout too, and
            if self.death_timeout is not None and took >= parse.seconds(self.death_timeout, "death_timeout"):
                raise asyncio.TimeoutError(f"their start took {took:.1f} s") from errors[0]  # its errors say
            raise errors[0]  # other things ("AssertionError: Status.starting")
        if self.nannies:  # a scheduler started by ``dask scheduler`` has none of dask-gpu's plugins
            await register_scheduler_plugins(self.nannies[0].scheduler)
        return self

    async def _reach_scheduler(self) -> str:
        """The scheduler's address, from its file where one is given, once one connection to it has
        worked: a SchedulerError naming the file or address past --death-timeout (or the connect timeout)."""
        timeout, why = reach.bound(self.death_timeout)
        address = self.scheduler or dask.config.get("scheduler-address", None)
        if self.scheduler_file:
            address = await reach.address_from_file(self.scheduler_file, timeout, why)
        security = (self.specs[0]["options"].get("security") if self.specs else None) or Security()
        await reach.reach(address, timeout, why, security.get_connection_args("worker"))
        names = [spec["options"]["name"] for spec in self.specs]
        taken = await reach.names_taken(address, names, timeout, security.get_connection_args("worker"))
        if taken:  # before any Nanny starts: the scheduler would refuse them, each with its traces
            raise reach.SchedulerError(f"workers failed: the scheduler at {address} has workers named "
                                       f"{', '.join(taken)} already; give these another --name")
        return address

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


def _connection_args(security: Security) -> dict:
    """The worker's TLS context, made here: a certificate, key or CA that does not load is a ValueError now."""
    try:
        return security.get_connection_args("worker")
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
        files = [f"{name} {value}" for name, value in [("CA", security.tls_ca_file), ("certificate",
                 security.tls_worker_cert), ("key", security.tls_worker_key)] if value and "-----" not in value]
        named = f" ({', '.join(files)})" if files else ""
        raise ValueError(f"the TLS credentials do not load{named}: {e}; "
                         "give PEM files from the scheduler's CA (--tls-ca-file, --tls-cert, --tls-key)") from None


def bind(options: dict, scheduler: str, extra: dict) -> dict:
    """A worker's listeners, its dashboard's too, on one host: the host or interface given, else the address this
    machine reaches the scheduler from (127.0.0.1 for a scheduler on loopback), never every interface unasked."""
    if extra.get("listen_address"):
        return options  # it names the host and port itself
    try:
        if options.get("interface"):
            host = get_ip_interface(options["interface"])
        else:
            host = options.get("host") or get_ip(get_address_host(scheduler))
    except (OSError, ValueError):  # no route or an odd address: distributed's choice
        return options
    options = dict(options)
    if not options.get("interface"):
        options["host"] = host
    if options.get("dashboard"):
        options["dashboard_address"] = parse.on_host(options.get("dashboard_address", ":0"), host)
    return options


def _check_addresses(listen_address, contact_address, worker_port, options):
    for value, what in [(listen_address, "listen_address"), (contact_address, "contact_address")]:
        if value is not None:
            parse.address(value, what)
    # dask-cuda's words first, for whoever matches on them; then what to do
    if contact_address and not listen_address:
        raise ValueError("Must specify listen_address when contact_address is provided "
                         "(--contact-address needs --listen-address)")
    if listen_address and (options.get("host") or options.get("interface")):
        raise ValueError("Cannot specify listen_address when host or interface is given: listen_address already "
                         "names the host and port (drop --host and --interface)")
    if listen_address and worker_port:
        raise ValueError("Cannot specify worker_port when listen_address is given: listen_address already names "
                         "the port (drop --worker-port)")
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
    ports = parse.port_range(spec, flag)
    if len(ports) < n:
        raise ValueError(
            f"Not enough ports in {flag} range for {n} GPUs: {spec!r} gives {len(ports)}; "
            f"give a range of at least {n}, e.g. {ports[0]}:{ports[0] + n - 1}"
        )
    return [list(ports[i::n]) for i in range(n)]


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
        logger.error("dask gpu worker: %s", failure(serving.exception(), worker.scheduler or worker.scheduler_file,
                                                   worker.death_timeout))
        code = 1
    serving.cancel()
    stopping.cancel()
    await worker.close(timeout=10)
    return code


def failure(error: BaseException, where, death_timeout=None) -> str:
    """One line on why the workers stopped: the first cause, not distributed's "Nanny failed to start"."""
    if isinstance(error, reach.SchedulerError):
        return str(error)
    if isinstance(error, asyncio.TimeoutError) and death_timeout is not None:  # a worker's start is bound by it
        return (f"the workers did not start within --death-timeout {death_timeout} ({error}); a busy machine starts "
                "them more slowly: give a longer --death-timeout")
    if isinstance(error, asyncio.TimeoutError):
        return f"the workers did not join the scheduler at {where} in time ({error}); exiting"
    for _ in range(10):  # "Nanny failed to start" from the worker's own error, and so on
        if error.__cause__ is None:
            break
        error = error.__cause__
    if "name taken" in str(error):  # the scheduler knows a worker of this name already
        return f"workers failed: {error}: another worker has that name; give these another --name"
    return f"workers failed: {type(error).__name__}: {error}"
