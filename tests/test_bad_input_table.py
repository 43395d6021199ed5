"""A table of bad inputs across the API, the command line and ``dask gpu bench``: each ends in one clear error.

Where tests/test_bad_input.py generates input for each parser, this table names the inputs a user gets
wrong, one by one: every LocalCUDACluster keyword and gpu.* key, CUDAWorker, the parsers, and every
``dask gpu worker | config | bench | info`` option. Each must fail before anything starts, in one line
that names the bad value (a ValueError or TypeError from Python; from the command line exit code 2, one
"Error:" line, no traceback, never "Nanny failed to start"), within a bound. The few that can only fail
after waiting (a scheduler that does not answer, a scheduler file that does not appear) run as real
processes, all at once, and must fail within their timeout, naming the address or the file.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import subprocess
import sys
import time
from unittest import mock

import dask
import pytest
from click.testing import CliRunner
from distributed import SpecCluster

from dask_gpu import devices, parse
from dask_gpu.cli import gpu
from dask_gpu.cluster import LocalCUDACluster
from dask_gpu.keywords import parse_worker_class
from dask_gpu.parse import port_range
from dask_gpu.launch import CUDAWorker, apportion_ports

HERE = os.path.dirname(os.path.abspath(__file__))
NOWHERE = "/nonexistent-dask-gpu/dir"  # a directory that does not exist, so nothing can appear under it
ADDRESS = "tcp://127.0.0.1:1"

pytestmark = pytest.mark.timeout(30)  # each case; the processes' test has its own bound

# -- LocalCUDACluster: (keywords, error, what the one line must say) -------------------------------------

CLUSTER = [
    ({"n_workers": 0}, ValueError, r"n_workers=0: .*1 to 2 GPU workers.*n_workers=0 with cpu_workers=N"),
    ({"n_workers": -1}, ValueError, r"n_workers=-1: a LocalCUDACluster runs 1 to 2 GPU workers here"),
    ({"n_workers": 3}, ValueError, r"cannot run 3 GPU workers: 2 GPU\(s\) are visible"),
    ({"n_workers": "two"}, ValueError, r"n_workers must be a whole number >= 0, not 'two'"),
    ({"n_workers": "3"}, ValueError, r"cannot run 3 GPU workers: 2 GPU\(s\) are visible"),  # a count, as "2" is
    ({"n_workers": 1.5}, ValueError, r"n_workers must be a whole number .* not 1.5"),
    ({"n_workers": True}, ValueError, r"n_workers must be a whole number .* not True"),
    ({"n_workers": -1, "cpu_workers": 1}, ValueError, r"n_workers=-1"),
    ({"threads_per_worker": 0}, ValueError, r"threads per worker must be >= 1, not 0"),
    ({"threads_per_worker": "many"}, ValueError, r"threads per worker must be a whole number >= 1, not 'many'"),
    ({"cpu_workers": -1}, ValueError, r"cpu_workers must be >= 0, not -1"),
    ({"cpu_workers": 10**6}, ValueError, r"cpu_workers=1000000 is more than this machine's"),
    ({"CUDA_VISIBLE_DEVICES": "5"}, ValueError, r"entry '5' is not a GPU on this machine \(indices 0-1 exist\)"),
    ({"CUDA_VISIBLE_DEVICES": "0,0"}, ValueError, r"names device '0' twice"),
    ({"CUDA_VISIBLE_DEVICES": ""}, ValueError, r"CUDA_VISIBLE_DEVICES is empty"),
    ({"CUDA_VISIBLE_DEVICES": "GPU-zzzz"}, ValueError, r"'GPU-zzzz' matches no device UUID"),
    ({"CUDA_VISIBLE_DEVICES": 1.5}, ValueError, r"CUDA_VISIBLE_DEVICES must be .* not 1.5"),
    ({"memory_limit": "lots"}, ValueError, r"memory_limit='lots' is not a size"),
    ({"memory_limit": -1}, ValueError, r"memory_limit=-1 must not be negative"),
    ({"memory_limit": "150%"}, ValueError, r"memory_limit='150%': a percentage must be between 0 and 100"),
    ({"device_memory_limit": 1.5}, ValueError, r"device_memory_limit=1.5: a fraction must be between 0 and 1"),
    ({"device_memory_limit": "64GB"}, ValueError, r"device_memory_limit=64000000000 bytes is larger than the device"),
    ({"device_memory_limit": "-1GB"}, ValueError, r"device_memory_limit=.*-1gb.* must not be negative"),
    ({"resources": "GPU"}, ValueError, r"resource 'GPU' must look like NAME=AMOUNT"),
    ({"resources": {"MEM": -1}}, ValueError, r"resource 'MEM' must be >= 0, not -1"),
    ({"resources": "GPU=0"}, ValueError, r"resources: GPU=0, but each GPU worker holds one GPU"),
    ({"host": "256.1.1.1"}, ValueError, r"host='256.1.1.1' is not an address of this machine"),
    ({"host": "192.0.2.1"}, ValueError, r"host='192.0.2.1' is not an address of this machine"),  # TEST-NET-1
    ({"memory_limit": "10MB"}, ValueError, r"memory_limit=10000000 bytes is less than a worker needs to start"),
    ({"pre_import": "not_a_module_x"}, ValueError, r"pre_import: ModuleNotFoundError: No module named 'not_a_m"),
    ({"pre_import": "a-b"}, ValueError, r"pre_import entry 'a-b' is not a module name"),
    ({"protocol": "http"}, ValueError, r"protocol 'http' is not one of tcp, tls, ucx"),
    ({"protocol": "tcp", "enable_nvlink": True}, ValueError, r"enable_nvlink choose UCX transports: .*not 'tcp'"),
    ({"enable_nvlink": "yes"}, ValueError, r"enable_nvlink must be True or False, not 'yes'"),
    ({"security": "yes"}, TypeError, r"security must be a distributed.Security or True, not str"),
    ({"worker_saturation": 0}, ValueError, r"worker_saturation must be a number > 0 or 'inf', not 0"),
    ({"dashboard_address": "x:y"}, ValueError, r"dashboard_address='x:y' is not a dashboard address"),
    ({"dashboard_address": True}, ValueError, r"dashboard_address=True is not a dashboard address"),
    ({"scheduler_port": 70000}, ValueError, r"scheduler_port=70000 is not a port: give a number from 0"),
    ({"scheduler_port": "x"}, ValueError, r"scheduler_port='x' is not a port"),
    ({"host": "not a host!"}, ValueError, r"host='not a host!' is not a host: give an IP address or a host name"),
    ({"host": ""}, ValueError, r"host='' is not a host"),
    ({"interface": "eht0"}, ValueError, r"interface='eht0' is not a network interface of this machine: it has .*lo"),
    ({"silence_logs": "warnign"}, ValueError, r"silence_logs='warnign' is not a log level.*did you mean 'warning'"),
    ({"scheduler_kwargs": {"worker_tll": 5}}, TypeError, r"'worker_tll' is not a keyword of distributed's Scheduler; "
                                                          r"did you mean 'worker_ttl'"),
    ({"scheduler_kwargs": 5}, ValueError, r"scheduler_kwargs must be a mapping of Scheduler keywords, not 5"),
    ({"processes": False}, ValueError, r"processes=False: each GPU worker needs a process of its own"),
    ({"processes": "x"}, ValueError, r"processes must be True or False, not 'x'"),
    ({"asynchronous": "x"}, ValueError, r"asynchronous must be True or False, not 'x'"),
    ({"shutdown_on_close": "no"}, ValueError, r"shutdown_on_close must be True or False, not 'no'"),
    ({"death_timeout": "soon"}, ValueError, r"death_timeout='soon' is not a duration: give seconds > 0"),
    ({"death_timeout": -1}, ValueError, r"death_timeout=-1 is not a duration"),
    ({"lifetime": "x"}, ValueError, r"lifetime='x' is not a duration"),
    ({"heartbeat_interval": 0}, ValueError, r"heartbeat_interval=0 is not a duration"),
    ({"connection_limit": 0}, ValueError, r"connection_limit must be a whole number >= 1, not 0"),
    ({"env": {1: "x"}}, ValueError, r"env: 1 is not an environment variable name"),
    ({"env": 5}, ValueError, r"env must be a mapping of variable names to values"),
    ({"preload": "not_a_module_x"}, ValueError, r"preload: 'not_a_module_x' is not an installed module"),
    ({"preload": "/nonexistent/f.py"}, ValueError, r"preload: the file '/nonexistent/f.py' does not exist"),
    ({"preload": 5}, ValueError, r"preload=5 must be a module name, a .py file or a URL"),
    ({"local_directory": "/proc/nonexistent/x"}, ValueError, r"local_directory='/proc/nonexistent/x' cannot be made"),
    ({"local_directory": 5}, ValueError, r"local_directory must be a directory path, not 5"),
    ({"cpu_affinity": "yes"}, ValueError, r"cpu_affinity must be True or False, not 'yes'"),
    ({"allocator": "cuda"}, ValueError, r"allocator='cuda' is not one of 'pool', 'async', 'managed', 'rmm'"),
    ({"rmm_pool_size": "x"}, ValueError, r"rmm_pool_size='x' is not a size"),
    ({"rmm_release_threshold": "1GB"}, ValueError, r"rmm_release_threshold='1GB' only applies to cudaMallocAsync"),
    ({"rmm_pool_size": "1GB", "allocator": "pool"}, ValueError, r"configure RMM, but allocator='pool'"),
    ({"rmm_allocator_external_lib_list": "numpy"}, ValueError, r"must name libraries among cupy, torch"),
    ({"worker_class": "nope.Nope"}, ValueError, r"worker_class 'nope.Nope' cannot be imported"),
    ({"worker_class": 5}, ValueError, r"worker_class must be a subclass of distributed.Worker"),
    ({"enable_cudf_spill": "yes"}, ValueError, r"enable_cudf_spill must be True or False, not 'yes'"),
    ({"cudf_spill_stats": -1}, ValueError, r"cudf_spill_stats must be >= 0, not -1"),
    ({"log_spilling": "yes"}, ValueError, r"log_spilling must be True or False, not 'yes'"),
    ({"jit_unspill": True}, TypeError, r"'jit_unspill' is not a keyword of dask-gpu: .*Drop it"),
    ({"device_memory_limt": "1GB"}, TypeError, r"unknown keyword 'device_memory_limt'.*did you mean "
                                               r"'device_memory_limit'"),
    ({"nthreads": 2}, TypeError, r"'nthreads' is the name dask gpu worker and CUDAWorker use; .*threads_per_worker="),
]

# -- gpu.* configuration, read by the same cluster: (key, value, what the line says) ---------------------

CONFIG = [
    ("gpu.nthreads", "two", r"threads per worker must be a whole number >= 1, not 'two'"),
    ("gpu.nthred", 2, r"unknown configuration key gpu.nthred: did you mean gpu.nthreads"),
    ("gpu.device-memory-limit", "150%", r"device_memory_limit='150%': a percentage must be between 0 and 100"),
    ("gpu.shuffle", "gpus", r"gpu.shuffle must be one of gpu, all, p2p, not 'gpus'"),
    ("gpu.partition-size", 0, r"gpu.partition-size must be more than 0"),
    ("gpu.worker-saturation", "x", r"worker_saturation must be a number > 0 or 'inf', not 'x'"),
    ("gpu.cpu-workers", -1, r"cpu_workers must be >= 0, not -1"),
    ("gpu.simulate", "x", r"gpu.simulate entry 'x' is not a memory size"),
    ("gpu.simulate", 10**10, r"gpu.simulate=10000000000 asks for more than 1024 devices"),
    ("gpu.dashboard-address", "x:y", r"dashboard_address='x:y' is not a dashboard address"),
    ("gpu.local-directory", "", r"local_directory must be a directory path, not ''"),
    ("gpu.resources", {"A": "x"}, r"resource 'A' must be a number, not 'x'"),
    ("gpu", 5, r"the gpu configuration must map gpu.\* keys to values, not 5"),
]

# -- CUDAWorker, constructed: (scheduler, keywords, error, line) -------------------------------------------

WORKER_API = [
    (None, {}, ValueError, r"no scheduler: give its address, scheduler_file=, or the scheduler-address"),
    ("http://x:1", {}, ValueError, r"scheduler='http://x:1': 'http' is not a protocol of distributed"),
    ("tcp://127.0.0.1", {}, ValueError, r"scheduler='tcp://127.0.0.1' names no port"),
    ("tcp://no host!:8786", {}, ValueError, r"scheduler='tcp://no host!:8786': 'no host!' is not a host"),
    (None, {"scheduler_file": f"{NOWHERE}/s.json"}, ValueError, rf"its directory '{NOWHERE}' does not exist"),
    (None, {"scheduler_file": HERE}, ValueError, r"scheduler file '.*tests' is a directory"),
    ("tls://127.0.0.1:1", {}, ValueError, r"the scheduler at tls://127.0.0.1:1 takes TLS connections only"),
    (ADDRESS, {"listen_address": "tcp://127.0.0.1:9000"}, ValueError, r"listen_address names one address, and 2 GPU"),
    (ADDRESS, {"listen_address": "nonsense://x:1"}, ValueError, r"'nonsense' is not a protocol of distributed"),
    (ADDRESS, {"contact_address": "tcp://10.0.0.1:9000"}, ValueError,
     r"Must specify listen_address when contact_address is provided"),
    (ADDRESS, {"interface": "lo", "listen_address": "tcp://127.0.0.1:9000"}, ValueError,
     r"Cannot specify listen_address when host or interface is given"),
    (ADDRESS, {"worker_port": "9000", "listen_address": "tcp://127.0.0.1:9000"}, ValueError,
     r"Cannot specify worker_port when listen_address is given"),
    (ADDRESS, {"worker_port": "9000"}, ValueError, r"Not enough ports in --worker-port range for 2 GPUs: '9000'"),
    (ADDRESS, {"pid_file": f"{NOWHERE}/pid"}, ValueError, rf"pid_file '{NOWHERE}/pid' cannot be written"),
    (ADDRESS, {"death_timeout": "x"}, ValueError, r"CUDAWorker: death_timeout='x' is not a duration"),
    (ADDRESS, {"nthread": 2}, TypeError, r"CUDAWorker: unknown keyword 'nthread'.*did you mean 'nthreads'"),
    (ADDRESS, {"host": "0.0.0.0", "interface": "lo"}, ValueError, r"give host or interface .*not both"),
    (ADDRESS, {"scheduler_file": HERE}, ValueError, r"give the scheduler's address .* or scheduler_file .*not both"),
]

# -- parsers and checks, called directly: (function, arguments, line) --------------------------------------

PARSERS = [
    (parse.memory_limit, ("GB",), r"'gb' is not a size"),
    (parse.size, ("1 2GB",), r"'1 2GB' is not a size"),
    (parse.resources, ("A=1 A=2",), r"resource 'A' is given twice"),
    (parse.pre_import, (5,), r"pre_import must be module names .* not 5"),
    (parse.protocol, ("sctp",), r"protocol 'sctp' is not one of"),
    (parse.saturation, (0,), r"worker_saturation must be a number > 0"),
    (parse.count, ("x", "things"), r"things must be a whole number >= 0, not 'x'"),
    (apportion_ports, ("9000:99999", None, 1), r"port 99999 is outside 1-65535"),
    (port_range, ("9010:9000", "--nanny-port"), r"a range's last port must be above its first"),
    (devices.simulated_system, ("x",), r"gpu.simulate entry 'x' is not a memory size"),
    (devices.parse_visible_devices, (1.0,), r"CUDA_VISIBLE_DEVICES must be .* not 1.0"),
    (parse_worker_class, ("os.path",), r"worker_class must be a subclass of distributed.Worker"),
    (parse.seconds, ("1 fortnight", "death_timeout"), r"death_timeout='1 fortnight' is not a duration"),
    (parse.address, ("tcp://[::1", "scheduler"), r"scheduler='tcp://\[::1'"),
    (parse.dashboard_address, (":99999",), r"dashboard_address=':99999' is not a dashboard address"),
]

# -- the command line, in this process: (arguments, the one "Error:" line) ---------------------------------

W = ["worker", ADDRESS]
CLI = [
    (["worker"], r"give the scheduler's address \(dask gpu worker tcp://host:8786\) or --scheduler-file"),
    ([*W, "--nthreads", "x"], r"Invalid value for '--nthreads': 'x' is not a valid integer"),
    ([*W, "--nthreads", "0"], r"threads per worker must be >= 1, not 0"),
    ([*W, "--memory-limit", "lots"], r"memory_limit='lots' is not a size"),
    ([*W, "--memory-limit", "10MB"], r"memory_limit=10000000 bytes is less than a worker needs to start"),
    ([*W, "--resources", "GPU=0"], r"resources: GPU=0, but each GPU worker holds one GPU"),
    ([*W, "--host", "256.0.0.1"], r"host='256.0.0.1' is not an address of this machine"),
    (["bench", "--json", "/proc/results.json"], r"--json /proc/results.json: cannot be written here"),
    (["bench", "--suite", "tpch", "--data", "/proc/tpch"],
     r"--data /proc/tpch cannot be made \(.*\); give a directory"),
    (["bench", "--suite", "tpch", "--scale", "1e9"], r"--scale must be a scale factor above 0 and at most 10,000"),
    ([*W, "--scheduler-file", HERE], r"give the scheduler's address .* or scheduler_file .*not both"),
    ([*W, "--device-memory-limit", "150%"], r"device_memory_limit='150%': a percentage must be between 0 and 100"),
    ([*W, "--resources", "MEM"], r"resource 'MEM' must look like NAME=AMOUNT"),
    ([*W, "--cuda-visible-devices", "7"], r"entry '7' is not a GPU on this machine"),
    ([*W, "--protocol", "sctp"], r"protocol 'sctp' is not one of"),
    ([*W, "--protocol", "tcp", "--enable-nvlink"], r"enable_nvlink choose UCX transports"),
    ([*W, "--worker-port", "70000:70003"], r"port 70000 is outside 1-65535"),
    ([*W, "--nanny-port", "x"], r"--nanny-port 'x' is not a port"),
    ([*W, "--listen-address", "tcp://127.0.0.1:9000"], r"listen_address names one address, and 2 GPU workers"),
    ([*W, "--contact-address", "tcp://10.0.0.2:9000"], r"Must specify listen_address when contact_address is provided"),
    ([*W, "--tls-ca-file", __file__], r"TLS needs all three of --tls-ca-file, --tls-cert and --tls-key"),
    ([*W, "--tls-ca-file", __file__, "--tls-cert", __file__, "--tls-key", __file__],
     r"the TLS credentials do not load .*give PEM files from the scheduler's CA"),
    ([*W, "--death-timeout", "soon"], r"death_timeout='soon' is not a duration"),
    ([*W, "--death-timeout", "-1"], r"death_timeout='-1' is not a duration"),
    ([*W, "--pid-file", f"{NOWHERE}/pid"], rf"pid_file '{NOWHERE}/pid' cannot be written"),
    (["worker", "--scheduler-file", f"{NOWHERE}/s.json"], rf"its directory '{NOWHERE}' does not exist"),
    ([*W, "--local-directory", "/proc/nonexistent/x"], r"local_directory='/proc/nonexistent/x' cannot be made"),
    ([*W, "--preload", "not_a_module_x"], r"preload: 'not_a_module_x' is not an installed module"),
    ([*W, "--host", "not a host!"], r"host='not a host!' is not a host"),
    ([*W, "--interface", "eht0"], r"interface='eht0' is not a network interface of this machine.*did you mean 'eth0'"),
    ([*W, "--dashboard-address", "x:y"], r"dashboard_address='x:y' is not a dashboard address"),
    ([*W, "--enable-jit-unspill"], r"--enable-jit-unspill is a flag of older dask-cuda versions"),
    ([*W, "--device-memory-limt", "1GB"], r"No such option '--device-memory-limt'. Did you mean "
                                          r"'--device-memory-limit'"),
    ([*W, "--set-rmm-allocator-for-libs", "jax"], r"'jax' must name libraries among cupy, torch"),
    ([*W, "--multiprocessing-method", "thread"], r"'thread' is not one of 'spawn', 'fork', 'forkserver'"),
    ([*W, "--worker-class", "nope.Nope"], r"worker_class 'nope.Nope' cannot be imported"),
    (["worker", "http://x:1"], r"'http' is not a protocol of distributed"),
    (["worker", "tls://127.0.0.1:1"], r"the scheduler at tls://127.0.0.1:1 takes TLS connections only: give "
                                      r"--tls-ca-file"),
    ([*W, "--pre-import", "a-b"], r"pre_import entry 'a-b' is not a module name"),
    ([*W, "--cudf-spill-stats", "-1"], r"cudf_spill_stats must be >= 0, not -1"),
    ([*W, "--rmm-pool-size", "x"], r"rmm_pool_size='x' is not a size"),
    (["config"], r"give the scheduler's address, --scheduler-file, or the scheduler-address configuration"),
    (["config", "http://x:1"], r"'http' is not a protocol of distributed"),
    (["config", "x"], r"scheduler='x' names no port"),
    (["config", ADDRESS, "--timeout", "never"], r"timeout='never' is not a duration"),
    (["config", "--scheduler-file", f"{NOWHERE}/s.json"], rf"its directory '{NOWHERE}' does not exist"),
    (["config", ADDRESS, "--tls-cert", __file__], r"TLS needs all three"),
    (["config", "tls://127.0.0.1:1"], r"the scheduler at tls://127.0.0.1:1 takes TLS connections only"),
    (["config", "--bogus"], r"No such option '--bogus'"),
    (["bench", "--shape", "0"], r"Invalid value for '--shape': 0 is not in the range x>=1"),
    (["bench", "--chunks", "0"], r"Invalid value for '--chunks': 0 is not in the range x>=1"),
    (["bench", "--shape", "100", "--chunks", "200"], r"chunks \(200\) cannot be larger than the array's side \(100\)"),
    (["bench", "--workloads", "summ"], r"unknown workloads \['summ'\].*did you mean 'sum'"),
    (["bench", "--repeat", "0"], r"Invalid value for '--repeat': 0 is not in the range x>=1"),
    (["bench", "--timeout", "-1"], r"Invalid value for '--timeout': -1.0 is not in the range x>0"),
    (["bench", "--cpu-budget", "0"], r"Invalid value for '--cpu-budget': 0.0 is not in the range x>0"),
    (["bench", "--gpus", "1,two"], r"--gpus takes GPU counts separated by commas"),
    (["bench", "--gpus", "5"], r"--gpus 5: each count must be 1 to the number of GPUs visible here \(2\)"),
    (["bench", "--gpus", "0"], r"--gpus 0: each count must be 1 to the number of GPUs visible here \(2\)"),
    (["bench", "--size", "huge"], r"'huge' is not one of 'small', 'medium', 'full'"),
    (["bench", "--suite", "parquet"], r"'parquet' is not one of 'array', 'dataframe'"),
    (["bench", "--compare", "ray"], r"'ray' is not 'dask-cuda'"),
    (["bench", "--protocol", "sctp"], r"'sctp' is not one of 'tcp', 'ucx'"),
    (["bench", "--rows", "100"], r"--rows: options of --suite dataframe, not of --suite array"),
    (["bench", "--suite", "dataframe", "--rows", "0"], r"Invalid value for '--rows': 0 is not in the range x>=1"),
    (["bench", "--suite", "dataframe", "--size", "medium"], r"--size medium: the dataframe suite has small and full"),
    (["bench", "--suite", "dataframe", "--workloads", "read,join"], r"unknown workloads \['join'\]"),
    (["bench", "--suite", "dataframe", "--shape", "100"], r"--shape: options of --suite array"),
    (["bench", "--suite", "dataframe", "--data", __file__], r"--data .* is a file; give a directory"),
    (["bench", "--suite", "dataframe", "--data", "/proc/nonexistent/x"], r"--data /proc/nonexistent/x cannot be made"),
    (["bench", "--suite", "dataframe", "--timeout", "0"], r"Invalid value for '--timeout': 0.0 is not in the range"),
    (["info", "--bogus"], r"No such option '--bogus'"),
    (["info", "extra"], r"Got unexpected extra argument \(extra\)"),
    (["nonsense"], r"No such command 'nonsense'"),
]

# -- as real processes, all at once: (arguments, environment, exit code, line, seconds allowed) ------------

CONNECT_2S = {"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"}
PROCESSES = [
    (["gpu", "worker", ADDRESS], CONNECT_2S, 1,
     r"cannot reach the scheduler at tcp://127.0.0.1:1 within 2 s \(distributed.comm.timeouts.connect", 2),
    (["gpu", "worker", "tcp://127.0.0.1:9", "--death-timeout", "1"], {}, 1,
     r"cannot reach the scheduler at tcp://127.0.0.1:9 within 1 s \(--death-timeout\)", 1),
    (["gpu", "worker", "--scheduler-file", "{tmp}/missing.json", "--death-timeout", "1"], {}, 1,
     r"the scheduler file .*/missing.json does not exist after 1 s \(--death-timeout\); start the scheduler with", 1),
    (["gpu", "worker", "--scheduler-file", "{tmp}/missing.json"], CONNECT_2S, 1,
     r"the scheduler file .*/missing.json does not exist after 2 s \(distributed.comm.timeouts.connect", 2),
    (["gpu", "worker", "--scheduler-file", "{tmp}/garbage.json", "--death-timeout", "1"], {}, 1,
     r"the scheduler file .*/garbage.json is not JSON", 1),
    (["gpu", "worker", "--scheduler-file", "{tmp}/garbage.json"], {}, 1,  # not the connect timeout's 30 s
     r"the scheduler file .*/garbage.json is not JSON .* after 1 s: it is there, and is no file that", 1),
    (["gpu", "worker", "--scheduler-file", f"{NOWHERE}/s.json"], {}, 2, rf"its directory '{NOWHERE}' does not exist",
     0),
    (["gpu", "config", "--scheduler-file", "{tmp}/missing.json", "--timeout", "1"], {}, 1,
     r"the scheduler file .*/missing.json does not exist after 1 s \(--timeout\)", 1),
    (["gpu", "worker", ADDRESS, "--nthreads", "0"], {}, 2, r"threads per worker must be >= 1, not 0", 0),
    (["gpu", "info"], {"DASK_GPU__SIMULATE": "x"}, 2, r"gpu.simulate entry 'x' is not a memory size", 0),
]
STARTUP = 25  # seconds a process may take to start and exit, two cores shared by all of them at once

ALL = [*CLUSTER, *CONFIG, *WORKER_API, *PARSERS, *CLI, *PROCESSES]


def test_the_table_holds_at_least_100_distinct_bad_inputs():
    assert len(ALL) >= 100
    inputs = [repr(("api", c[0])) for c in CLUSTER] + [repr(c[:2]) for c in [*CONFIG, *WORKER_API, *PARSERS]]
    inputs += [repr(("cli", c[0])) for c in CLI] + [repr(c[:2]) for c in PROCESSES]
    assert len(set(inputs)) == len(inputs), "a bad input listed twice"


def one_line(message: str) -> bool:
    return "\n" not in message.strip() and "Nanny failed to start" not in message and "Traceback" not in message


class Started(Exception):
    """The cluster got past every check: SpecCluster.__init__ would start the scheduler now."""


@pytest.mark.filterwarnings("ignore:protocol=.* needs the distributed-ucxx package:UserWarning")
@pytest.mark.parametrize("kwargs, error, match", CLUSTER, ids=[repr(c[0])[:60] for c in CLUSTER])
def test_local_cuda_cluster(simulate, kwargs, error, match):
    simulate(2)
    with mock.patch.object(SpecCluster, "__init__", side_effect=Started), pytest.raises(error) as info:
        LocalCUDACluster(**{"dashboard_address": False, **kwargs})
    assert re.search(match, str(info.value)) and one_line(str(info.value)), str(info.value)


@pytest.mark.parametrize("key, value, match", CONFIG, ids=[f"{c[0]}={c[1]!r}" for c in CONFIG])
def test_gpu_configuration(simulate, key, value, match):
    simulate(2)
    explicit = {} if key == "gpu.dashboard-address" else {"dashboard_address": False}
    with dask.config.set({key: value}), mock.patch.object(SpecCluster, "__init__", side_effect=Started):
        with pytest.raises(ValueError) as info:
            LocalCUDACluster(**explicit)
    assert re.search(match, str(info.value)) and one_line(str(info.value)), str(info.value)


@pytest.mark.parametrize("scheduler, kwargs, error, match", WORKER_API, ids=[repr(c[:2])[:60] for c in WORKER_API])
def test_cuda_worker(simulate, scheduler, kwargs, error, match):
    simulate(2)
    with dask.config.set({"scheduler-address": None}), pytest.raises(error) as info:
        CUDAWorker(scheduler, **kwargs)
    assert re.search(match, str(info.value)) and one_line(str(info.value)), str(info.value)


@pytest.mark.parametrize("parse, args, match", PARSERS, ids=[f"{c[0].__name__}{c[1]!r}"[:60] for c in PARSERS])
def test_parser(parse, args, match):
    with pytest.raises(ValueError) as info:
        parse(*args)
    assert re.search(match, str(info.value)) and one_line(str(info.value)), str(info.value)


@pytest.mark.filterwarnings("ignore:protocol=.* needs the distributed-ucxx package:UserWarning")
@pytest.mark.parametrize("args, match", CLI, ids=[" ".join(c[0])[:60] for c in CLI])
def test_command_line(simulate, args, match):
    simulate(2)
    started = []

    async def no_serving(worker):  # where a bad input got through, nothing starts: the test fails below
        started.append(worker)
        return 0

    with mock.patch("dask_gpu.launch.serve", no_serving), dask.config.set({"scheduler-address": None}):
        result = CliRunner().invoke(gpu, args, catch_exceptions=False)
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 2 and not started, result.output
    assert len(errors) == 1 and re.search(match, errors[0]), result.output
    assert one_line(errors[0]) and "Traceback" not in result.output


def test_processes(tmp_path):
    """The inputs that need a process of their own, or some waiting: all at once, each within its bound."""
    (tmp_path / "garbage.json").write_text("not JSON {")
    env = {**os.environ, "DASK_GPU__SIMULATE": "1", "PYTHONPATH": os.getcwd()}

    def run(case):
        args, extra, code, match, seconds = case
        argv = [sys.executable, "-m", "dask", *(a.replace("{tmp}", str(tmp_path)) for a in args)]
        start = time.monotonic()
        done = subprocess.run(argv, env={**env, **extra}, capture_output=True, text=True, timeout=seconds + STARTUP)
        return done, time.monotonic() - start

    with concurrent.futures.ThreadPoolExecutor(len(PROCESSES)) as pool:
        results = list(pool.map(run, PROCESSES))
    for (args, _, code, match, seconds), (done, elapsed) in zip(PROCESSES, results):
        output = done.stdout + done.stderr
        assert done.returncode == code, (args, output)
        assert re.search(match, output), (args, output)
        assert seconds <= elapsed < seconds + STARTUP, (args, elapsed)  # it waited what it said, no more
        assert "Traceback" not in output and "Nanny failed to start" not in output, (args, output)
        assert len([line for line in output.splitlines() if re.search(match, line)]) == 1, (args, output)
