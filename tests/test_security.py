"""Who can reach a LocalCUDACluster: localhost unless asked otherwise, and with TLS only holders of its certificates."""

import asyncio
import gc
import os
import socket
import subprocess
import sys
import time

import dask
import psutil
import pytest
from distributed import Client, Security
from distributed.comm import connect, get_address_host
from distributed.comm.utils import get_tcp_server_addresses

from dask_gpu import LocalCUDACluster, internals


def listening_hosts(cluster, client) -> dict[str, set[str]]:
    """The host of every address the cluster listens on (bound, not advertised), by what listens."""

    def in_worker(dask_worker):
        return [get_address_host(li.listen_address) for li in dask_worker.listeners] + [
            host for host, *_ in get_tcp_server_addresses(dask_worker.http_server)
        ]

    found = {
        "scheduler": {get_address_host(li.listen_address) for li in cluster.scheduler.listeners},
        "dashboard": {host for host, *_ in get_tcp_server_addresses(cluster.scheduler.http_server)},
    }
    for name, nanny in cluster.workers.items():
        found[f"nanny {name}"] = {get_address_host(li.listen_address) for li in nanny.listeners}
    for address, hosts in client.run(in_worker).items():
        found[f"worker {address}"] = set(hosts)
    return found


def client_error(address, security) -> str | None:
    """What a Client started with these credentials fails with; None where it connects."""
    try:
        with Client(address, security=security, timeout="5s"):
            return None
    except (OSError, TypeError) as e:
        return f"{type(e).__name__}: {e}"


def refused(address, security) -> str | None:
    error = client_error(address, security)
    # A Client whose start failed closes in __del__; there, in another Client's start, it deadlocks
    # on distributed's LoopRunner lock. Collect it here, outside any Client.
    gc.collect()
    return error


def external_interface():
    """A network interface other than loopback with an IPv4 address: (name, address), or None."""
    for name, addresses in psutil.net_if_addrs().items():
        for a in addresses:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return name, a.address
    return None


@pytest.mark.parametrize("dashboard", [None, ":0"], ids=["default-dashboard", "port-only-dashboard"])
def test_listens_on_localhost_by_default(simulate, dashboard):
    simulate(1)
    host, _, port = dask.config.get("gpu.dashboard-address").rpartition(":")
    assert (host, port) == ("127.0.0.1", "8787")  # gpu.yaml
    kwargs = {} if dashboard is None else {"dashboard_address": dashboard}
    # the default's host, on a free port: 8787 may be taken here (and distributed then leaks a socket)
    with dask.config.set({"gpu.dashboard-address": f"{host}:0"}), LocalCUDACluster(
        cpu_workers=1, **kwargs
    ) as cluster, Client(cluster) as client:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        assert cluster.dashboard_link.startswith("http://127.0.0.1:")
        hosts = listening_hosts(cluster, client)
        assert len(hosts) == 2 + 2 + 2  # scheduler, dashboard, a nanny and a worker for gpu-0 and cpu-0
        assert hosts == {what: {"127.0.0.1"} for what in hosts}


interface = external_interface()


@pytest.mark.parametrize(
    "kwargs, host",
    [
        pytest.param({"host": "0.0.0.0"}, "0.0.0.0", id="all-interfaces"),
        pytest.param(
            {"interface": interface and interface[0]},
            interface and interface[1],
            id="interface",
            marks=pytest.mark.skipif(interface is None, reason="no network interface besides loopback"),
        ),
    ],
)
def test_listens_where_asked(simulate, kwargs, host):
    simulate(1)
    with LocalCUDACluster(dashboard_address=":0", **kwargs) as cluster, Client(cluster) as client:
        hosts = listening_hosts(cluster, client)
        dashboard = hosts.pop("dashboard")
        assert hosts == {what: {host} for what in hosts}
        assert dashboard == {"0.0.0.0"}  # asked for the network: distributed's bare port, every interface
        assert not cluster.scheduler_address.startswith("tcp://127.")


# --- TLS ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_cluster():
    """A TLS cluster of one simulated GPU worker, with temporary credentials: (cluster, its Security)."""
    pytest.importorskip("cryptography")  # Security.temporary makes its certificates with it
    security = Security.temporary()
    with dask.config.set({"gpu.simulate": 1}):
        cluster = LocalCUDACluster(security=security, dashboard_address=False)
    with cluster:
        yield cluster, security


def pem_files(directory, security) -> list[str]:
    """``--tls-ca-file/--tls-cert/--tls-key`` arguments holding a Security's worker credentials."""
    args = []
    for flag, field in [("--tls-ca-file", "tls_ca_file"), ("--tls-cert", "tls_worker_cert"),
                        ("--tls-key", "tls_worker_key")]:
        path = directory / f"{field}.pem"
        path.write_text(getattr(security, field))
        args += [flag, str(path)]
    return args


def start_worker(address, *args, log):
    return subprocess.Popen(
        [sys.executable, "-m", "dask", "gpu", "worker", address, "--no-dashboard", "--death-timeout", "10", *args],
        env={**os.environ, "DASK_GPU__SIMULATE": "1"}, stdout=log, stderr=subprocess.STDOUT,
    )


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_security_true_makes_a_tls_cluster(simulate):
    pytest.importorskip("cryptography")
    simulate(1)
    with LocalCUDACluster(security=True, n_workers=1, dashboard_address=False) as cluster:
        assert cluster.security.require_encryption and "BEGIN CERTIFICATE" in cluster.security.tls_ca_file
        assert cluster.scheduler_address.startswith("tls://127.0.0.1:")
        assert "TLS expects" in refused(cluster.scheduler_address, None)  # no credentials, no connection


def test_tls_reaches_scheduler_workers_and_nannies(tls_cluster):
    cluster, security = tls_cluster
    assert cluster.scheduler_address.startswith("tls://127.0.0.1:")
    with Client(cluster) as client:
        assert client.submit(lambda x: x + 1, 1).result() == 2
        ((worker, info),) = internals.scheduler_identity(client)["workers"].items()
        assert info["name"] == "gpu-0"
        assert worker.startswith("tls://127.0.0.1:") and info["nanny"].startswith("tls://127.0.0.1:")
    with Client(cluster.scheduler_address, security=security, timeout="5s") as client:  # a client elsewhere
        assert client.submit(sum, [1, 2]).result() == 3

    async def handshake(address, credentials):
        comm = await connect(address, timeout=5, **credentials.get_connection_args("client"))
        await comm.close()

    other = Security.temporary()
    for address in (cluster.scheduler_address, worker, info["nanny"]):  # workers and nannies check certificates too
        asyncio.run(handshake(address, security))
        with pytest.raises(OSError):
            asyncio.run(handshake(address, other))


@pytest.mark.parametrize(
    "credentials",
    ["none", "plain", "another CA", "our CA, another's certificate"],
)
def test_client_without_the_cluster_credentials_cannot_connect(tls_cluster, credentials):
    cluster, security = tls_cluster
    other = Security.temporary()
    security = {
        "none": None,
        "plain": Security(),
        "another CA": other,
        "our CA, another's certificate": Security(
            tls_ca_file=security.tls_ca_file, tls_client_cert=other.tls_client_cert,
            tls_client_key=other.tls_client_key, require_encryption=True,
        ),
    }[credentials]
    clients = set(cluster.scheduler.clients)
    start = time.monotonic()
    assert refused(cluster.scheduler_address, security)
    assert time.monotonic() - start < 15  # an error, not a hang
    assert set(cluster.scheduler.clients) == clients


def workers(client) -> dict[str, str]:
    """The scheduler's workers now: name -> address."""
    return {w["name"]: address for address, w in internals.scheduler_identity(client)["workers"].items()}


def test_cli_worker_with_the_cluster_certificates_joins(tls_cluster, tmp_path):
    cluster, security = tls_cluster
    with Client(cluster) as client, open(tmp_path / "worker.log", "w") as log:
        before = workers(client)
        proc = start_worker(cluster.scheduler_address, "--name", "cli", *pem_files(tmp_path, security), log=log)
        try:
            deadline = time.monotonic() + 30
            while "cli-gpu-0" not in workers(client):
                assert proc.poll() is None, (tmp_path / "worker.log").read_text()
                assert time.monotonic() < deadline, "the worker never joined"
                time.sleep(0.05)
            address = workers(client)["cli-gpu-0"]
            assert address.startswith("tls://")
            assert client.submit(lambda: 42, workers=[address]).result() == 42
            proc.terminate()
            assert proc.wait(30) == 0
            deadline = time.monotonic() + 20
            while workers(client) != before:
                assert time.monotonic() < deadline, "the worker stayed registered"
                time.sleep(0.05)
        finally:
            stop(proc)


@pytest.mark.parametrize("credentials", ["another CA", "no TLS options"])
def test_cli_worker_without_the_cluster_certificates_cannot_join(tls_cluster, tmp_path, credentials):
    cluster, _ = tls_cluster
    args = pem_files(tmp_path, Security.temporary()) if credentials == "another CA" else []
    with Client(cluster) as client, open(tmp_path / "worker.log", "w") as log:
        before = workers(client)
        proc = start_worker(cluster.scheduler_address, "--name", "intruder", *args, log=log)
        try:
            start = time.monotonic()
            while proc.poll() is None or time.monotonic() - start < 2:  # and a moment after it gives up
                assert workers(client) == before
                assert time.monotonic() - start < 30, "the worker neither joined nor gave up"
                time.sleep(0.05)
            output = (tmp_path / "worker.log").read_text()
            if credentials == "another CA":  # the scheduler refuses the certificate: an error after the timeout
                assert proc.returncode == 1, output
                assert f"cannot reach the scheduler at {cluster.scheduler_address} within 10 s" in output, output
            else:  # no credentials for a TLS address: a usage error at once
                assert proc.returncode == 2, output
                assert f"the scheduler at {cluster.scheduler_address} takes TLS connections only" in output, output
            assert "Traceback" not in output and "Nanny failed to start" not in output
            assert workers(client) == before
        finally:
            stop(proc)
