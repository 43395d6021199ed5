import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from distributed import Client

from dask_gpu import internals
from dask_gpu.cli import gpu
from dask_gpu.launch import apportion_ports


def invoke(*args, env=None):
    return CliRunner().invoke(gpu, list(args), env=env, catch_exceptions=False)


def test_info_without_gpu(no_gpu):
    result = invoke("info")
    assert result.exit_code == 0
    assert "No GPU" in result.output and "DASK_GPU__SIMULATE" in result.output
    assert "distributed" in result.output


def test_info_with_simulated_devices(simulate):
    simulate(["8GB", "16GB"])
    result = invoke("info")
    assert result.exit_code == 0, result.output
    assert result.output.count("Simulated GPU") == 2 and "14.90 GiB" in result.output
    data = json.loads(invoke("info", "--json").output)
    assert data["state"] == "simulated"
    assert [d["memory_total"] for d in data["devices"]] == [8 * 10**9, 16 * 10**9]


@pytest.mark.parametrize(
    "args, match",
    [
        ([], "scheduler's address"),
        (["tcp://127.0.0.1:1", "--worker-port", "9000"], "Not enough ports in --worker-port range for 2 GPUs"),
        (["tcp://127.0.0.1:1", "--worker-port", "9001:9000"], "--worker-port"),
        (["tcp://127.0.0.1:1", "--nanny-port", "x"], "--nanny-port 'x'"),
        (["tcp://127.0.0.1:1", "--worker-port", "70000:70003"], "outside 1-65535"),
        (["tcp://127.0.0.1:1", "--cuda-visible-devices", "7"], "'7'"),
        (["tcp://127.0.0.1:1", "--device-memory-limit", "lots"], "device_memory_limit"),
        (["tcp://127.0.0.1:1", "--resources", "MEM"], "NAME=AMOUNT"),
        (["tcp://127.0.0.1:1", "--listen-address", "tcp://127.0.0.1:9000"], "one address"),
        (["tcp://127.0.0.1:1", "--contact-address", "tcp://1.2.3.4:9000"], "--listen-address"),
        (["tcp://127.0.0.1:1", "--tls-ca-file", __file__], "all three"),
        (["tcp://127.0.0.1:1", "--protocol", "tcp", "--enable-nvlink"], "enable_nvlink choose UCX transports"),
    ],
)
def test_worker_usage_errors(simulate, args, match):
    simulate(2)
    result = invoke("worker", *args)
    assert result.exit_code == 2
    assert pytest.importorskip("re").search(match, result.output), result.output


def test_worker_without_gpu(no_gpu):
    result = invoke("worker", "tcp://127.0.0.1:1")
    assert result.exit_code == 2 and "DASK_GPU__SIMULATE" in result.output


@pytest.mark.parametrize(
    "worker_port, nanny_port, n, expected",
    [
        (None, None, 2, [{"worker_port": 0, "port": 0}] * 2),
        ("9000:9003", None, 2, [{"worker_port": [9000, 9002], "port": 0}, {"worker_port": [9001, 9003], "port": 0}]),
        ("9000", "9100", 1, [{"worker_port": [9000], "port": [9100]}]),
    ],
)
def test_apportion_ports(worker_port, nanny_port, n, expected):
    assert apportion_ports(worker_port, nanny_port, n) == expected


@pytest.mark.parametrize("spec, match", [("1:999999999999", "port 999999999999 is outside 1-65535"),
                                         (5.5, "5.5 is not a port"), ("9010:9000", "above its first")])
def test_bad_port_ranges_are_refused_before_any_port_is_listed(spec, match):
    with pytest.raises(ValueError, match=match):
        apportion_ports(spec, None, 1)


def test_worker_joins_scheduler_and_exits_on_sigterm(scheduler, tmp_path):
    pid_file = str(tmp_path / "worker.pid")
    env = {**os.environ, "DASK_GPU__SIMULATE": "2"}
    log = open(tmp_path / "worker.log", "w")
    worker = subprocess.Popen(
        [sys.executable, "-m", "dask", "gpu", "worker", "--scheduler-file", scheduler, "--name", "node",
         "--resources", "MEM=2", "--nthreads", "2", "--memory-limit", "1GB", "--no-dashboard", "--pid-file", pid_file,
         "--enable-cudf-spill", "--cudf-spill-stats", "1"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        with Client(scheduler_file=scheduler, timeout="20s") as client:
            client.wait_for_workers(2, timeout=60)
            info = {w["name"]: w for w in internals.scheduler_identity(client)["workers"].values()}
            assert set(info) == {"node-gpu-0", "node-gpu-1"}
            assert all(w["resources"] == {"GPU": 1, "MEM": 2} and w["nthreads"] == 2 for w in info.values())
            env_by_name = client.run(lambda dask_worker: (dask_worker.name, os.environ["CUDA_VISIBLE_DEVICES"]))
            assert sorted(env_by_name.values()) == [("node-gpu-0", "0,1"), ("node-gpu-1", "1,0")]

            config = subprocess.run(
                [sys.executable, "-m", "dask", "gpu", "config", "--scheduler-file", scheduler, "--json"],
                capture_output=True, text=True, timeout=60,
            )
            assert config.returncode == 0, config.stderr
            rows = json.loads(config.stdout)
            assert [r["name"] for r in rows] == ["node-gpu-0", "node-gpu-1"]
            assert all(r["memory_limit"] == 10**9 and r["device"]["name"] == "Simulated GPU" for r in rows)
            assert all(r["cudf_spill"] for r in rows)
            # the scheduler, started by dask itself, was given the device shuffle
            assert client.run_on_scheduler(lambda dask_scheduler: "dask-gpu-shuffle" in dask_scheduler.plugins)
            table = subprocess.run([sys.executable, "-m", "dask", "gpu", "config", "--scheduler-file", scheduler],
                                   capture_output=True, text=True, timeout=60)
            assert "node-gpu-1" in table.stdout and "1,0" in table.stdout

            with open(pid_file) as f:
                assert int(f.read()) == worker.pid
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(30) == 0
            assert not os.path.exists(pid_file)
            deadline = time.monotonic() + 20
            while internals.scheduler_identity(client)["workers"]:
                assert time.monotonic() < deadline, "workers stayed registered"
                time.sleep(0.1)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        log.close()


def test_config_cannot_reach_scheduler():
    result = subprocess.run(
        [sys.executable, "-m", "dask", "gpu", "config", "tcp://127.0.0.1:1", "--timeout", "1s"],
        capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert "could not reach the scheduler" in result.stderr


def test_dask_cli_lists_gpu_group():
    result = subprocess.run([sys.executable, "-m", "dask", "gpu", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "worker" in result.stdout and "bench" in result.stdout


def test_the_command_line_dask_jobqueue_writes_is_accepted():
    # SLURMCluster(worker_command="dask_gpu.cli worker", worker_extra_args=[...]) runs exactly this
    args = ["tcp://10.0.0.1:8786", "--name", "dummy-name", "--nthreads", "8", "--memory-limit", "238.42GiB",
            "--death-timeout", "60", "--nthreads", "1", "--memory-limit", "auto"]
    params = gpu.commands["worker"].make_context("worker", args).params
    assert params["scheduler"] == "tcp://10.0.0.1:8786" and params["name"] == "dummy-name"
    assert params["nthreads"] == 1 and params["memory_limit"] == "auto" and params["death_timeout"] == 60
