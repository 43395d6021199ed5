"""Bandwidth between workers: an array or a dataframe made on one worker and read on another, each ordered pair,
and a dataframe shuffled between two workers.

On the GPUs of this machine (LocalCUDACluster; CuPy arrays, cuDF frames), for each transport available:
TCP, and UCX where distributed-ucxx is installed. ``--cpu`` runs the same on two CPU workers
with NumPy arrays and pandas frames (a check of the method, and the host's own figure). Writes JSON with the
machine's description; best of ``--repeat`` for each pair and size, end to end (submit to
result, scheduling included) and on the wire (the receiving worker's own fetch time). A shuffle's figure is
the bytes its pieces took between the workers over the seconds from the call to its output held in memory.

    python benchmarks/transfer.py [--of arrays,frames,shuffle] [--sizes 256MB,1GB] [--repeat 3] [--cpu]
                                  [--out FILE]
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


COLUMNS = 8  # a frame's float64 columns, beside its int64 key
KINDS = ("arrays", "frames", "shuffle")


def make(nbytes: int, library: str):
    xp = __import__(library)
    return xp.ones(nbytes // 8, dtype="float64")


def make_frame(nbytes: int, library: str, seed: int = 0):
    """A frame of about ``nbytes``: an int64 key drawn from a million values, and float64 columns (cuDF's with
    CuPy)."""
    xp = __import__("cupy" if library == "cudf" else "numpy")
    frames = __import__(library)
    rows = max(nbytes // (8 * (COLUMNS + 1)), 1)
    random = xp.random.default_rng(seed)
    columns = {"k": random.integers(0, 1_000_000, rows)}
    columns.update({f"x{i}": random.random(rows) for i in range(COLUMNS)})
    return frames.DataFrame(columns)


def touch(x) -> int:
    """Read on the receiving worker: the transfer is complete once its input is there."""
    return int(x.nbytes) if hasattr(x, "nbytes") else int(x.memory_usage(index=False).sum())


def last_transfer(dask_worker) -> float:
    """Seconds the receiving worker spent fetching its last input (request to data in memory)."""
    return dask_worker.transfer_incoming_log[-1]["duration"]


def pair_bandwidth(client, source, target, nbytes, library, repeat) -> tuple[float, float]:
    """(end to end, on the wire) bytes/s, best of ``repeat``: end to end includes scheduling."""
    best, wire = float("inf"), float("inf")
    maker = make if library in ("numpy", "cupy") else make_frame
    for _ in range(repeat):
        data = client.submit(maker, nbytes, library, workers=[source], pure=False)
        size = client.submit(touch, data, workers=[source], pure=False).result()
        start = time.perf_counter()
        assert client.submit(touch, data, workers=[target], pure=False).result() == size
        best = min(best, time.perf_counter() - start)
        wire = min(wire, client.run(last_transfer, workers=[target])[target])
        del data
    return size / best, size / wire


def shuffle_bandwidth(client, workers, nbytes, library, repeat, partitions: int = 8) -> dict:
    """A frame of about ``nbytes`` in ``partitions`` on alternate workers, shuffled on its key by P2P (the device
    shuffle with cuDF): the best of ``repeat`` of the bytes sent between the workers over the seconds taken."""
    import dask
    import dask.dataframe as dd

    from dask_gpu.benchmarks.common import sent

    parts = [client.submit(make_frame, nbytes // partitions, library, i, workers=[workers[i % len(workers)]],
                           pure=False) for i in range(partitions)]
    wait(parts)
    meta = client.submit(lambda part: part.iloc[:0], parts[0]).result()
    frame = dd.from_delayed(parts, meta=meta, verify_meta=False)
    best = None
    with dask.config.set({"dataframe.shuffle.method": "p2p"}):
        for _ in range(repeat):
            before = sent(client)["shuffle_bytes"]
            start = time.perf_counter()
            shuffled = client.persist(frame.shuffle(on="k"))
            wait(shuffled)
            seconds = time.perf_counter() - start
            moved = sent(client)["shuffle_bytes"] - before
            assert client.compute(shuffled.k.count()).result() == client.compute(frame.k.count()).result()
            del shuffled
            if best is None or seconds < best["seconds"]:
                best = {"bytes": nbytes, "moved_bytes": moved, "seconds": seconds, "bytes_per_second": moved / seconds}
    return best


def measure(cluster, sizes, kind, library, repeat) -> list[dict]:
    with Client(cluster) as client:
        client.wait_for_workers(2)
        workers = sorted(client.nthreads())
        rows = []
        for nbytes in sizes:
            if kind == "shuffle":
                row = shuffle_bandwidth(client, workers, nbytes, library, repeat)
                rows.append(row)
                print(f"{format_bytes(nbytes):>9}  shuffled: {format_bytes(row['moved_bytes'])} between the workers "
                      f"in {row['seconds']:.2f} s, {row['bytes_per_second'] / 1e9:.2f} GB/s", flush=True)
                continue
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
    parser.add_argument("--of", default="arrays", help=f"what moves, of {', '.join(KINDS)}")
    parser.add_argument("--sizes", default="256MB,1GB")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cpu", action="store_true", help="two CPU workers and NumPy arrays")
    parser.add_argument("--out", default="benchmarks/results/transfer.json")
    args = parser.parse_args()
    sizes = [parse_bytes(s) for s in args.sizes.split(",")]
    kinds = args.of.split(",")
    if not set(kinds) <= set(KINDS):
        parser.error(f"--of {args.of!r}: name some of {', '.join(KINDS)}")
    results = {"machine": machine_dict(), "sizes": sizes, "repeat": args.repeat, "runs": {}}
    for kind in kinds:
        library = {"arrays": "numpy" if args.cpu else "cupy"}.get(kind, "pandas" if args.cpu else "cudf")
        if args.cpu:
            with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
                results["runs"][f"{kind}, tcp, CPU workers"] = measure(cluster, sizes, kind, library, args.repeat)
            continue
        from dask_gpu import LocalCUDACluster

        for protocol in transports():
            print(f"-- {kind}, {protocol}", flush=True)
            with LocalCUDACluster(protocol=protocol, dashboard_address=":0") as cluster:
                results["runs"][f"{kind}, {protocol}"] = measure(cluster, sizes, kind, library, args.repeat)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
