"""On a real GPU: the seeds' code runs on LocalCUDACluster and each worker uses its own device."""

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, get_worker

from dask_gpu import LocalCUDACluster, discover, internals

pytestmark = pytest.mark.gpu


def cuda_uuid() -> str:
    """UUID of CUDA device 0 in this process, as NVML writes it: found by its PCI bus ID (CUDA's UUID
    bytes come through CuPy as a C string, cut at a zero byte)."""
    import cupy
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByPciBusId(cupy.cuda.Device(0).pci_bus_id)
    uuid = pynvml.nvmlDeviceGetUUID(handle)
    return uuid.decode() if isinstance(uuid, bytes) else uuid


@pytest.fixture(scope="module")
def client():
    # the seed's snippet (000): LocalCUDACluster() + Client
    cluster = LocalCUDACluster()
    client = Client(cluster)
    yield client
    client.close()
    cluster.close()


def test_one_worker_per_gpu(client):
    gpus = [d for d in discover().devices]
    workers = internals.scheduler_identity(client)["workers"].values()
    assert len(workers) == sum(len(g.mig) or 1 for g in gpus)
    threads = dask.config.get("gpu.nthreads")  # two: one task's reads and copies beside another's kernels
    assert threads == 2 and all(w["resources"] == {"GPU": 1} and w["nthreads"] == threads for w in workers)


def test_each_worker_sees_its_own_device(client):
    def check(dask_worker):
        import cupy

        mine = dask_worker.plugins["dask-gpu"].info()["device"]["uuid"]
        x = cupy.arange(10)  # a context on CUDA device 0
        return mine, cuda_uuid(), int(x.sum()), x.device.id

    seen = client.run(check)
    for mine, cuda, total, device_id in seen.values():
        assert cuda.lower() == mine.lower()
        assert total == 45 and device_id == 0
    assert len({mine for mine, *_ in seen.values()}) == len(seen)


def test_seed_workload_reduced(client):
    import cupy

    # 001: the 2 TB workload's code, at 3.2 GB
    rs = da.random.RandomState(RandomState=cupy.random.RandomState)
    x = rs.normal(10, 1, size=(20000, 20000), chunks=(2000, 2000))
    total = float((x + 1)[::2, ::2].sum().compute())
    assert abs(total / (10000 * 10000) - 11) < 1e-3
    block = x.blocks[0, 0].compute()
    assert isinstance(block, cupy.ndarray) and block.shape == (2000, 2000)


def test_seed_svd(client):
    import cupy

    # 000: the SVD example
    with dask.config.set({"array.backend": "cupy"}):
        rs = da.random.RandomState(RandomState=cupy.random.RandomState)
        x = rs.random((10000, 1000), chunks=(1000, 1000))
        u, s, v = da.linalg.svd(x)
        xc, uc, sc, vc = dask.compute(x, u, s, v)
    assert isinstance(uc, cupy.ndarray)
    error = float(cupy.linalg.norm(xc - (uc * sc) @ vc) / cupy.linalg.norm(xc))
    assert error < 1e-10


def test_gpu_tasks_go_to_gpu_workers_beside_cpu_workers():
    with LocalCUDACluster(cpu_workers=1, dashboard_address=False) as cluster, Client(cluster) as client:
        def where():
            import cupy

            return get_worker().name, float(cupy.ones(4).sum())

        with dask.annotate(resources={"GPU": 1}):
            results = dask.compute(*[dask.delayed(where)(dask_key_name=f"w-{i}") for i in range(4)])
        assert all(name.startswith("gpu-") and value == 4.0 for name, value in results)
        assert client.submit(np.ones, 3, workers=["cpu-0"]).result().sum() == 3


def test_cli_worker_on_real_gpus(scheduler, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    n = len(discover().devices)
    with open(tmp_path / "worker.log", "w") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "dask", "gpu", "worker", "--scheduler-file", scheduler, "--no-dashboard"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            with Client(scheduler_file=scheduler, timeout="20s") as client:
                client.wait_for_workers(n, timeout=60)

                def device_total():
                    import cupy

                    return os.environ["CUDA_VISIBLE_DEVICES"].split(",")[0], float(cupy.ones(10).sum())

                seen = client.run(device_total)
                assert sorted(first for first, _ in seen.values()) == [str(i) for i in range(n)]
                assert all(total == 10.0 for _, total in seen.values())
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(60) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
