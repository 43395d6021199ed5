"""Bandwidth between workers: an array made on one worker and read on another, each ordered pair.

On the GPUs of this machine (LocalCUDACluster, CuPy arrays), for each transport available:
TCP, and UCX where distributed-ucxx is installed. ``--cpu`` runs the same on two CPU workers
with NumPy arrays (a check of the method, and the host's own figure). Writes JSON with the
machine's description; best of ``--repeat`` for each pair and size, end to end (submit to
result, scheduling included) and on the wire (the receiving worker's own fetch time).

    python benchmarks/transfer.py [--sizes 256MB,1GB] [--repeat 3] [--cpu] [--out FILE]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from importlib.util import find_spec

from dask.utils import format_bytes, parse_bytes
from distributed import Client, LocalCluster, wait

from dask_gpu.report import machine_dict


def make(nbytes: int, library: str):
    xp = __import__(library)
    return xp.ones(nbytes // 8, dtype="float64")


def touch(x) -> int:
    """Read on the receiving worker: the transfer is complete once its input is there."""
    return int(x.nbytes)


def last_transfer(dask_worker) -> float:
    """Seconds the receiving worker spent fetching its last input (request to data in memory)."""
    return dask_worker.transfer_incoming_log[-1]["duration"]


def pair_bandwidth(client, source, target, nbytes, library, repeat) -> tuple[float, float]:
    """(end to end, on the wire) bytes/s, best of ``repeat``: end to end includes scheduling."""
    best, wire = float("inf"), float("inf")
    for _ in range(repeat):
        data = client.submit(make, nbytes, library, workers=[source], pure=False)
        wait(data)
        start = time.perf_counter()
        assert client.submit(touch, data, workers=[target], pure=False).result() == nbytes
        best = min(best, time.perf_counter() - start)
        wire = min(wire, client.run(last_transfer, workers=[target])[target])
        del data
    return nbytes / best, nbytes / wire


def measure(cluster, sizes, library, repeat) -> list[dict]:
    with Client(cluster) as client:
        client.wait_for_workers(2)
        workers = sorted(client.nthreads())
        rows = []
        for nbytes in sizes:
            pair_bandwidth(client, workers[0], workers[1], nbytes, library, 1)  # warm up the connection
            for source, target in itertools.permutations(workers, 2):
                bandwidth, wire = pair_bandwidth(client, source, target, nbytes, library, repeat)
                rows.append({"source": source, "target": target, "bytes": nbytes,
                             "bytes_per_second": bandwidth, "wire_bytes_per_second": wire})
                print(f"{format_bytes(nbytes):>9}  {source} -> {target}: {bandwidth / 1e9:.2f} GB/s end to end, "
                      f"{wire / 1e9:.2f} GB/s on the wire", flush=True)
        return rows


def transports() -> list[str]:
    return ["tcp"] + (["ucx"] if find_spec("distributed_ucxx") else [])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="256MB,1GB")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cpu", action="store_true", help="two CPU workers and NumPy arrays")
    parser.add_argument("--out", default="benchmarks/results/transfer.json")
    args = parser.parse_args()
    sizes = [parse_bytes(s) for s in args.sizes.split(",")]
    results = {"machine": machine_dict(), "sizes": sizes, "repeat": args.repeat, "runs": {}}
    if args.cpu:
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
            results["runs"]["tcp, CPU workers"] = measure(cluster, sizes, "numpy", args.repeat)
    else:
        from dask_gpu import LocalCUDACluster

        for protocol in transports():
            print(f"-- {protocol}", flush=True)
            with LocalCUDACluster(protocol=protocol, dashboard_address=":0") as cluster:
                results["runs"][protocol] = measure(cluster, sizes, "cupy", args.repeat)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
