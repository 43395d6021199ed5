"""``dask gpu worker | info | config | bench``: parse arguments, then call the library."""

from __future__ import annotations

import asyncio
import functools
import os
import json
import sys
from importlib.util import find_spec

import click

from dask_gpu import benchmarks, devices, machine, parse, report

_pem = click.Path(exists=True, dir_okay=False, resolve_path=True)


def _seconds(ctx, param, value):
    """A positive, finite number of seconds, as :func:`dask_gpu.parse.seconds` reads one for the Python API."""
    if value is None:
        return None
    try:
        return parse.seconds(value, param.name)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def _libraries(ctx, param, value):
    """--set-rmm-allocator-for-libs: comma-separated names among cupy and torch, as the cluster reads them."""
    from dask_gpu.memory.allocator import RMM_LIBRARIES

    try:
        names = parse.names_among(value, RMM_LIBRARIES, "rmm_allocator_external_lib_list", "libraries")
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    if names == ():
        raise click.BadParameter(f"{value!r} names no library: give cupy, torch or both, comma-separated")
    return None if names is None else list(names)


# Flags of older dask-cuda versions: what to do instead.
_RETIRED_FLAGS = {
    "--enable-jit-unspill": "JIT-unspilling is gone (dask-cuda 26.10 has none either); dask-gpu's device tier spills "
                            "and unspills device objects itself: drop it",
    "--disable-jit-unspill": "dask-gpu has no JIT-unspilling to disable: drop it",
    "--shared-filesystem": "it configured JIT-unspilling, which dask-gpu has no need of: drop it",
    "--no-shared-filesystem": "it configured JIT-unspilling, which dask-gpu has no need of: drop it",
    "--net-devices": "UCX picks its network devices; set UCX_NET_DEVICES in the environment to choose: drop it",
}


def _preload_argv(ctx, param, value):
    """Arguments for the --preload modules (as dask worker takes them); an unknown option is an error that
    says what to use instead, or the closest option, rather than an argument passed on."""
    import difflib

    from distributed.preloading import validate_preload_argv

    flags = [f for p in ctx.command.params for f in (*p.opts, *p.secondary_opts) if f.startswith("--")]
    scheduler = ctx.params.get("scheduler") or ""
    for i, arg in enumerate([scheduler, *value]):
        flag = arg.split("=", 1)[0]
        if flag in _RETIRED_FLAGS:
            raise click.UsageError(f"{flag} is a flag of older dask-cuda versions: {_RETIRED_FLAGS[flag]}", ctx)
        if flag.startswith("-") and (i == 0 or not ctx.params.get("preload")):  # not an address; not a preload's
            raise click.NoSuchOption(flag, possibilities=difflib.get_close_matches(flag, flags, n=1), ctx=ctx)
    if ctx.params.get("preload"):
        try:
            machine.preloads(ctx.params["preload"], "--preload")  # distributed imports them next: a trace if absent
        except ValueError as e:
            raise click.UsageError(str(e), ctx) from None
    return validate_preload_argv(ctx, param, value)


@click.group(name="gpu", context_settings={"help_option_names": ["-h", "--help"]})  # subcommands inherit it
def gpu():
    """Dask on NVIDIA GPUs: workers, device information, benchmarks."""


@gpu.command(name="worker", context_settings={"show_default": True, "ignore_unknown_options": True})
@click.argument("scheduler", required=False)
@click.argument("preload_argv", nargs=-1, type=click.UNPROCESSED, callback=_preload_argv)
@click.option("--scheduler-file", help="File with the scheduler's address (dask scheduler --scheduler-file).")
@click.option("--cuda-visible-devices", "visible", help="GPUs to use (indices or UUIDs); default: all visible.")
@click.option("--nthreads", type=int, help="Threads per GPU worker [config gpu.nthreads: 2].")
@click.option("--memory-limit", default="default",
              help="Host memory per worker: bytes, '16GB', 'auto' (split the machine evenly), 0 (no limit), or "
                   "'default' (config gpu.memory-limit: auto).")
@click.option("--device-memory-limit", default="default",
              help="Device memory per worker: bytes, '16GB', a fraction 0-1, 'auto' (the whole device), 0 (no device "
                   "tier), or 'default' (config gpu.device-memory-limit: 0.8).")
@click.option("--resources", help="Extra resources per GPU worker, e.g. 'MEM=10e9 FOO=2'; GPU=1 is always set.")
@click.option("--name", help="Worker name prefix; each worker is named PREFIX-gpu-N [default: host name].")
@click.option("--host", help="Host (IP or name) the workers listen on.")
@click.option("--interface", help="Network interface the workers listen on, e.g. eth0 or ib0.")
@click.option("--protocol", help="Protocol: tcp, tls, ucx.")
@click.option("--worker-port", help="Worker port, or a range like 9000:9010 shared out among the GPU workers.")
@click.option("--nanny-port", help="Nanny port, or a range like 9100:9110.")
@click.option("--listen-address", help="Address a single worker listens on, e.g. tcp://0.0.0.0:9000.")
@click.option("--contact-address", help="Address a single worker advertises (with --listen-address), e.g. behind NAT.")
@click.option("--local-directory", help="Directory for scratch space and spill files.")
@click.option("--preload", multiple=True, is_eager=True, help="Module or file each worker preloads (repeatable).")
@click.option("--pre-import", help="Modules each worker imports before its first task, comma-separated.")
@click.option("--death-timeout", callback=_seconds,
              help="Seconds (or '1 minute') to wait for the scheduler; past it the command exits with code 1.")
@click.option("--pid-file", type=click.Path(dir_okay=False), help="Write this process's id here while it runs.")
@click.option("--dashboard/--no-dashboard", default=True, help="Serve each worker's dashboard.")
@click.option("--dashboard-address", default=":0", help="Address of each worker's dashboard.")
@click.option("--dashboard-prefix", help="Prefix of each worker's dashboard pages, e.g. /worker.")
@click.option("--cpu-affinity/--no-cpu-affinity", default=None, help="Pin each worker to the cores nearest its GPU.")
@click.option("--tls-ca-file", type=_pem, help="CA certificate for TLS.")
@click.option("--tls-cert", type=_pem, help="Worker certificate for TLS.")
@click.option("--tls-key", type=_pem, help="Worker private key for TLS.")
@click.option("--worker-class", help="Worker (or Nanny) subclass each worker runs, e.g. mypackage.MyWorker.")
@click.option("--multiprocessing-method", type=click.Choice(["spawn", "fork", "forkserver"]), default="spawn",
              help="How each Nanny starts its worker process.")
@click.option("--allocator", type=click.Choice(["pool", "async", "managed", "rmm"]),
              help="Device allocator: CuPy's pool, cudaMallocAsync, managed memory, or RMM [default: pool].")
@click.option("--rmm-pool-size", help="Initial RMM pool size: bytes, '16GB' or a fraction of the device.")
@click.option("--rmm-maximum-pool-size", help="Largest RMM pool size: bytes, '16GB' or a fraction of the device.")
@click.option("--rmm-managed-memory/--no-rmm-managed-memory", default=None, help="RMM over CUDA managed memory.")
@click.option("--rmm-async/--no-rmm-async", default=None, help="RMM over cudaMallocAsync.")
@click.option("--set-rmm-allocator-for-libs", "rmm_allocator_external_lib_list", callback=_libraries,
              help="Libraries that allocate through RMM, comma-separated from cupy, torch [default: both, with RMM].")
@click.option("--rmm-release-threshold", help="Bytes the async pool keeps before releasing memory (async only).")
@click.option("--rmm-log-directory", help="Directory for RMM allocation logs, one file per worker.")
@click.option("--rmm-track-allocations/--no-rmm-track-allocations", default=None, help="Track RMM allocations.")
@click.option("--enable-cudf-spill/--disable-cudf-spill", default=None,
              help="cuDF's own spilling of its frames to host memory [config gpu.cudf-spill: off].")
@click.option("--cudf-spill-stats", type=int, help="cuDF's spill statistics level (with --enable-cudf-spill).")
@click.option("--enable-tcp-over-ucx/--disable-tcp-over-ucx", default=None, help="UCX over TCP (--protocol ucx).")
@click.option("--enable-nvlink/--disable-nvlink", default=None, help="UCX over NVLink (--protocol ucx).")
@click.option("--enable-infiniband/--disable-infiniband", default=None, help="UCX over InfiniBand (--protocol ucx).")
@click.option("--enable-rdmacm/--disable-rdmacm", default=None, help="RDMA connection manager (--protocol ucx).")
def worker(scheduler, preload_argv, visible, tls_ca_file, tls_cert, tls_key, multiprocessing_method, **options):
    """Start one worker per visible GPU, attached to SCHEDULER (e.g. tcp://host:8786). Arguments after the
    options go to the --preload modules, as with dask worker."""
    import dask

    from dask_gpu.launch import CUDAWorker, serve

    scheduler = scheduler or (None if options["scheduler_file"] else dask.config.get("scheduler-address", None))
    if not scheduler and not options["scheduler_file"]:
        raise click.UsageError("give the scheduler's address (dask gpu worker tcp://host:8786) or --scheduler-file")
    options = {k: v for k, v in options.items() if v is not None}
    try:
        security = _security(tls_ca_file, tls_cert, tls_key)
        workers = CUDAWorker(scheduler, CUDA_VISIBLE_DEVICES=visible, security=security,
                             preload_argv=list(preload_argv) or None, **options)
    except (ValueError, TypeError, devices.NoGPUError) as e:
        raise click.UsageError(str(e)) from None
    if multiprocessing_method == "forkserver":
        import multiprocessing.forkserver

        multiprocessing.forkserver.ensure_running()
    with dask.config.set({"distributed.worker.multiprocessing-method": multiprocessing_method}):
        code = asyncio.run(serve(workers))
    sys.exit(code)


def _security(ca, cert, key, role="worker"):
    if not (ca or cert or key):
        return None  # distributed's own configuration decides
    if not (ca and cert and key):
        raise click.UsageError("TLS needs all three of --tls-ca-file, --tls-cert and --tls-key")
    from distributed.security import Security

    security = Security(tls_ca_file=ca, require_encryption=True, **{f"tls_{role}_cert": cert, f"tls_{role}_key": key})
    try:
        security.get_connection_args(role)  # reads and checks the three files now
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
        raise click.UsageError(f"--tls-ca-file {ca}, --tls-cert {cert}, --tls-key {key}: the TLS credentials do "
                               f"not load ({e}); give PEM files from the scheduler's CA") from None
    return security


@gpu.command(name="info")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def info(as_json):
    """Show what a bug report needs: this machine's GPUs, driver and CUDA, the libraries installed, Python and
    the platform, the gpu.* configuration in force and the variables that choose GPUs."""
    try:
        system = devices.discover()
    except ValueError as e:  # gpu.simulate that is not a count or sizes
        raise click.UsageError(str(e)) from None
    if as_json:
        click.echo(json.dumps(report.system_dict(system), indent=2))
    else:
        click.echo(report.system_text(system))


@gpu.command(name="warmup")
@click.option("--kernel-cache", type=click.Path(file_okay=False),
              help="Directory of compiled kernels  [default: gpu.kernel-cache, else CuPy's own cache]")
def warmup(kernel_cache):
    """Compile the seed workloads' GPU kernels into this machine's kernel cache, so that no process here
    compiles them on its first call: once per machine or container image, before the first cluster."""
    import dask

    from dask_gpu import warmup as warmups

    if find_spec("cupy") is None:
        raise click.ClickException("dask gpu warmup compiles CuPy kernels, and CuPy is not installed: "
                                   "pip install 'dask-gpu[cuda13]' (or [cuda12])")
    system = devices.discover()
    if not system.usable or any(d.simulated for d in system.devices):
        raise click.ClickException(f"dask gpu warmup compiles for this machine's GPU, and none is usable: "
                                   f"{system.message or 'the devices are simulated (gpu.simulate)'}")
    with dask.config.set({"gpu.kernel-cache": kernel_cache} if kernel_cache else {}):
        try:
            result = warmups.compile_kernels(status=lambda line: click.echo(f"  {line}"))
        except ValueError as e:  # a kernel cache that cannot be made
            raise click.UsageError(str(e)) from None
    click.echo(f"{result['after']} kernels in {result['directory']} ({result['after'] - result['before']} new)")


@gpu.command(name="config")
@click.argument("scheduler", required=False)
@click.option("--scheduler-file", help="File with the scheduler's address.")
@click.option("--tls-ca-file", type=_pem, help="CA certificate for TLS.")
@click.option("--tls-cert", type=_pem, help="Client certificate for TLS.")
@click.option("--tls-key", type=_pem, help="Client private key for TLS.")
@click.option("--timeout", default="10s", show_default=True, callback=_seconds,
              help="How long to try to reach the scheduler (and to wait for its file).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one object per worker) instead of a table.")
def config(scheduler, scheduler_file, tls_ca_file, tls_cert, tls_key, timeout, as_json):
    """Show the running cluster at SCHEDULER (default: the scheduler-address configuration) and each worker's
    configuration."""
    import dask
    from distributed import Client, Security

    from dask_gpu import parse, reach

    scheduler = scheduler or (None if scheduler_file else dask.config.get("scheduler-address", None))
    if not scheduler and not scheduler_file:
        raise click.UsageError("give the scheduler's address, --scheduler-file, or the scheduler-address configuration")
    security = _security(tls_ca_file, tls_cert, tls_key, role="client")
    try:
        if scheduler_file:
            reach.check_file_can_appear(scheduler_file)
        else:
            parse.address(scheduler, "scheduler")
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    try:
        if scheduler_file:
            scheduler = asyncio.run(reach.address_from_file(scheduler_file, timeout, "--timeout"))
        if reach.no_tls(scheduler, (security or Security()).get_connection_args("client")):
            raise click.UsageError(reach.no_tls(scheduler, (security or Security()).get_connection_args("client")))
        with Client(scheduler, timeout=timeout, security=security) as client:
            rows = report.workers_rows(client)
            cluster = None if as_json else report.cluster_dict(client)
    except reach.SchedulerError as e:
        raise click.ClickException(str(e)) from None
    except (OSError, TimeoutError, ValueError) as e:
        raise click.ClickException(f"could not reach the scheduler at {scheduler} within {timeout:g} s (--timeout): "
                                   f"{e}") from None
    click.echo(json.dumps(rows, indent=2) if as_json else report.cluster_text(cluster, rows))


def _check_suite_options(suite: str, given: dict) -> None:
    """A usage error naming the options given that belong to other suites."""
    owners = benchmarks.OPTIONS
    wrong = [option for option, value in given.items() if value is not None and suite not in owners[option]]
    if wrong:
        theirs = sorted({name for option in wrong for name in owners[option]})
        raise click.UsageError(f"{', '.join(wrong)}: options of --suite {' or '.join(theirs)}, not of --suite {suite}")


def _check_outputs(json_path, plot_path) -> None:
    """--json and --plot checked before the run, not after it."""
    if plot_path and find_spec("matplotlib") is None:
        raise click.UsageError("--plot needs matplotlib: pip install 'dask-gpu[bench]'")
    for path, flag in ((json_path, "--json"), (plot_path, "--plot")):
        why = path and _unwritable(path)
        if why:
            raise click.UsageError(f"{flag} {path}: cannot be written here ({why}); give a writable path")


def _write_data(module, plan) -> None:
    """The suite's data, written with a progress bar where it is not there yet; a full disk in one line."""
    lines = module.data_lines(plan) if hasattr(module, "data_lines") else 0
    if not lines:
        return
    try:
        with _Bar(lines, "writing data") as bar:
            module.write_data(plan, log=bar.step)
    except OSError as e:  # a full disk, say: one line that says where
        raise click.ClickException(str(e)) from None


@gpu.command(name="bench")
@click.option("--suite", type=click.Choice(list(benchmarks.SUITES)), default="array", show_default=True,
              help="The seeds' array workloads, dataframe workloads on parquet data that the suite writes, the 22 "
                   "TPC-H queries against DuckDB, Polars, pandas and cudf-polars, or hyper-parameter searches "
                   "against scikit-learn.")
@click.option("--size", type=click.Choice(["small", "medium", "full"]), default="small", show_default=True,
              help="The dataframe suite has small (200,000 rows) and full (200 million rows, 40 files); the tpch "
                   "suite small (scale factor 0.01) and full (10); the ml suite small (2,000 rows a search, 20,000 a "
                   "model) and full (100,000 and 50 million).")
@click.option("--shape", type=click.IntRange(min=1), help="Side of the square array (overrides --size; array suite).")
@click.option("--chunks", type=click.IntRange(min=1), help="Side of a square chunk (overrides --size; array suite).")
@click.option("--rows", type=click.IntRange(min=1), help="Rows of the dataframe suite's table (overrides --size).")
@click.option("--scale", type=click.FloatRange(min=0, min_open=True),
              help="TPC-H scale factor, about 1 GB of data each (overrides --size; tpch suite).")
@click.option("--data", "data_dir", type=click.Path(),
              help="Directory of the dataframe or tpch suite's data, reused while its manifest matches [default: "
                   "under the temporary directory].")
@click.option("--layout", help="How the tpch suite's files hold each table: suite (its own), pyarrow (pandas' and "
                               "pyarrow's defaults), duckdb-threads (a file a thread, row groups of a million rows), "
                               "small-files or one-file [default: suite].")
@click.option("--workloads", help="Comma-separated, from sum, mean, svd, transpose (array), read, groupby-low, "
                                  "groupby-high, merge, sort, shuffle, q1, q3 (dataframe), q1 ... q22 (tpch) or "
                                  "pca, ridge, logistic, kmeans, linear (ml) "
                                  "[default: all].")
@click.option("--compare", type=click.Choice(["dask-cuda"]), help="Run the GPU columns on dask-cuda's cluster too.")
@click.option("--engines", help="Columns, comma-separated: of the tpch suite from duckdb, polars, pandas, dask-gpu, "
                                "dask-cuda, cudf-polars; of the dataframe suite from pandas, dask-gpu, dask-cuda, "
                                "cudf [default: every one installed].")
@click.option("--gpus", help="GPU counts of the GPU columns, comma-separated, such as 1,2,4,8 [default: 1 and all "
                             "that CUDA_VISIBLE_DEVICES shows].")
@click.option("--protocol", type=click.Choice(["tcp", "ucx"]),
              help="Between GPU workers [default: ucx for several GPUs where distributed-ucxx is installed].")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Runs of each GPU workload after a warm-up on every worker; the best counts.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True),
              help="Seconds a GPU run may take; past it, that workload is cancelled and reported as failed.")
@click.option("--cpu-budget", type=click.FloatRange(min=0, min_open=True),
              help="Values a CPU column computes in full [2.5e9]; past it, it measures a fraction and estimates "
                   "(array suite).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write the results here.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Also draw them as a PNG (matplotlib).")
def bench(suite, size, shape, chunks, rows, scale, data_dir, layout, workloads, compare, engines, gpus, protocol,
          repeat, timeout, cpu_budget, json_path, plot_path):
    """The seeds' workloads on one CPU core, all cores, one GPU and all GPUs here: the seed's table. With
    --suite dataframe: dataframe workloads on pandas workers, dask-gpu's GPUs and cuDF in one process. With
    --suite tpch: the 22 TPC-H queries on DuckDB, Polars, pandas workers, dask-gpu's GPUs and cudf-polars. With
    --suite ml: the same grid searches by scikit-learn on every core and with each fit on a GPU worker, and
    KMeans and LinearRegression by scikit-learn, by cuML on one GPU and by cuML's Dask estimators across the GPUs."""
    from dask_gpu.benchmarks.common import Options

    _check_suite_options(suite, {"--shape": shape, "--chunks": chunks, "--cpu-budget": cpu_budget, "--rows": rows,
                                 "--scale": scale, "--engines": engines, "--layout": layout, "--data": data_dir})
    _check_outputs(json_path, plot_path)
    module = benchmarks.suite(suite)
    options = Options(size=size, workloads=parse.name_list(workloads),
                      compare=compare, gpus=gpus, protocol=protocol, repeat=repeat, timeout=timeout, shape=shape,
                      chunks=chunks, cpu_budget=cpu_budget, rows=rows, scale=scale, data=data_dir, layout=layout,
                      engines=engines)
    try:  # every argument checked before anything runs
        plan = module.planned(options)
    except (ValueError, ImportError) as e:
        raise click.UsageError(str(e)) from None
    _write_data(module, plan)
    checkpoint = functools.partial(_write_json, json_path) if json_path else None
    with _Bar(plan.steps, "running") as bar:
        results = module.run(plan, progress=bar.step, status=bar.status, checkpoint=checkpoint)
    click.echo(module.table(results))
    if plot_path:
        module.plot(results, plot_path)


class _Bar:
    """A progress bar on stderr: ``step(label)`` advances it, ``status(text)`` says what the step is doing."""

    def __init__(self, length: int, label: str):
        self.bar = click.progressbar(length=length, label=label, item_show_func=lambda item: item, file=sys.stderr)
        self.label = ""

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        self.bar.__exit__(*exc)

    def step(self, label: str) -> None:
        self.label = label
        self.bar.update(1, label)

    def status(self, text: str) -> None:
        self.bar.update(0, f"{self.label}: {text}" if self.label else text)


def _unwritable(path) -> str | None:
    """Why ``path`` cannot be written, found by opening it (and removing it again where it was not there)."""
    existed = os.path.exists(path)
    try:
        with open(path, "a"):
            pass
    except OSError as e:
        return e.strerror or str(e)
    if not existed:
        os.remove(path)
    return None


def _write_json(path, results):
    with open(path, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":  # pragma: no cover
    gpu()
