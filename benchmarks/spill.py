"""Device <-> host spill bandwidth: dask-gpu's dispatch against the hardware, plain CuPy and dask-cuda.

For float32 CuPy arrays of each size, the median of --repeat runs after --warmup runs, each run
synchronised before and after and timed with perf_counter, in both directions:

  hardware     cudaMemcpyAsync between the device array and one pinned buffer of the same size
  dask-gpu     dispatch.to_host / dispatch.to_device (pooled pinned memory, per-thread copy stream);
               to_host also of arrays a few KB shorter each run (sizes the pinned pool has not seen),
               to_device also from pageable memory, as after the host tier wrote the copy to disk
  cupy         cupy.asnumpy / cupy.asarray (pageable host memory)
  dask-cuda    DeviceHostFile, when installed: a device->host eviction (inserting a second array past
               its device_memory_limit), then reading the evicted key back

Results from a run are freed before the next, so pooled memory is reused as in a steady spill loop;
"first_s" is the very first (cold) run. Ratios are bandwidth ratios: above 1, dask-gpu is faster.

    python benchmarks/spill.py [--sizes 1GB,256MB] [--repeat 5] [--out benchmarks/results/spill.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pickle
import statistics
import sys
import tempfile
import time
from importlib.util import find_spec

import numpy as np
from dask.utils import format_bytes, parse_bytes


def require_gpu():
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no CUDA device")
    except Exception as e:  # ImportError, or CUDARuntimeError without a driver/device
        sys.exit(f"benchmarks/spill.py needs CuPy and an NVIDIA GPU: {type(e).__name__}: {e}")
    return cupy


def timed(fn, sync, repeat: int, warmup: int) -> dict:
    runs = []
    for _ in range(warmup + repeat):
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        runs.append(time.perf_counter() - t0)
        del out
    return {"median_s": statistics.median(runs[warmup:]), "min_s": min(runs[warmup:]), "first_s": runs[0],
            "runs_s": runs[warmup:]}


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.reshape(-1).view(np.uint8),
                                                                        b.reshape(-1).view(np.uint8))


def dask_cuda_spill(cupy, x, sync, repeat: int, warmup: int) -> dict:
    """Time DeviceHostFile's own eviction (device->host) and un-spilling read (host->device) of x."""
    from dask_cuda.device_host_file import DeviceHostFile

    d2h, h2d = [], []
    filler = cupy.empty_like(x)
    with tempfile.TemporaryDirectory() as directory:
        store = DeviceHostFile(directory, device_memory_limit=int(1.5 * x.nbytes), memory_limit=None)
        for i in range(warmup + repeat):
            store["spilled"] = x
            sync()
            t0 = time.perf_counter()
            store["filler"] = filler  # over the limit: the older key goes device -> host
            sync()
            d2h.append(time.perf_counter() - t0)
            assert "spilled" in store.host and "spilled" not in store.device
            del store["filler"]
            sync()
            t0 = time.perf_counter()
            y = store["spilled"]  # host -> device, into a device tier with room for it
            sync()
            h2d.append(time.perf_counter() - t0)
            if i == 0:
                assert bool(cupy.array_equal(y, x)), "dask-cuda round trip changed the values"
            del store["spilled"], y
    return {name: {"median_s": statistics.median(r[warmup:]), "min_s": min(r[warmup:]), "first_s": r[0],
                   "runs_s": r[warmup:]} for name, r in (("to_host", d2h), ("to_device", h2d))}


def measure(cupy, size: str, repeat: int, warmup: int) -> dict:
    from dask_gpu.memory import dispatch

    rt = cupy.cuda.runtime
    sync = cupy.cuda.Device().synchronize
    x = cupy.random.default_rng(0).random(parse_bytes(size) // 4, dtype=cupy.float32)
    nbytes = x.nbytes
    reference = cupy.asnumpy(x)
    out = {"size": size, "bytes": nbytes, "dtype": "float32", "to_host": {}, "to_device": {}}

    # hardware: one DMA between the device array and a pinned buffer, on a non-blocking stream
    pinned = rt.hostAlloc(nbytes, 0)
    stream = cupy.cuda.Stream(non_blocking=True)
    target = cupy.empty_like(x)

    def dma(dst, src, kind):
        rt.memcpyAsync(dst, src, nbytes, kind, stream.ptr)
        stream.synchronize()

    try:
        out["to_host"]["hardware"] = timed(lambda: dma(pinned, x.data.ptr, rt.memcpyDeviceToHost), sync, repeat,
                                           warmup)
        out["to_device"]["hardware"] = timed(lambda: dma(target.data.ptr, pinned, rt.memcpyHostToDevice), sync,
                                             repeat, warmup)
    finally:
        rt.freeHost(pinned)
    target = None

    # dask-gpu
    out["to_host"]["dask-gpu"] = timed(lambda: dispatch.to_host(x), sync, repeat, warmup)
    copy = dispatch.to_host(x)
    assert same_bytes(copy.payload, reference), "dask-gpu to_host changed the values"
    assert same_bytes(cupy.asnumpy(dispatch.to_device(copy)), reference), "dask-gpu to_device changed the values"
    out["to_device"]["dask-gpu"] = timed(lambda: dispatch.to_device(copy), sync, repeat, warmup)
    # arrays of sizes not seen before (a few KB smaller each run): the pinned pool's size classes at work
    shorter = itertools.count(1)
    out["to_host"]["dask-gpu (new sizes)"] = timed(lambda: dispatch.to_host(x[: x.size - 1024 * next(shorter)]),
                                                   sync, repeat, warmup)
    pageable = pickle.loads(pickle.dumps(copy, protocol=5))  # what the disk tier gives back
    copy = None  # its pinned block goes back to the pool
    out["to_device"]["dask-gpu (pageable)"] = timed(lambda: dispatch.to_device(pageable), sync, repeat, warmup)
    pageable = None

    # plain CuPy, pageable memory
    out["to_host"]["cupy"] = timed(lambda: cupy.asnumpy(x), sync, repeat, warmup)
    out["to_device"]["cupy"] = timed(lambda: cupy.asarray(reference), sync, repeat, warmup)

    if find_spec("dask_cuda") is not None:
        try:
            for direction, result in dask_cuda_spill(cupy, x, sync, repeat, warmup).items():
                out[direction]["dask-cuda"] = result
        except Exception as e:  # report, do not lose the other measurements
            out["dask-cuda error"] = f"{type(e).__name__}: {e}"
    else:
        out["dask-cuda error"] = "dask_cuda is not installed"

    for direction in ("to_host", "to_device"):
        for result in out[direction].values():
            result["GB/s"] = nbytes / 1e9 / result["median_s"]
    rate = {d: {k: v["GB/s"] for k, v in out[d].items()} for d in ("to_host", "to_device")}
    ratios = {}
    for direction, ours in (("to_host", "dask-gpu"), ("to_host", "dask-gpu (new sizes)"),
                            ("to_device", "dask-gpu"), ("to_device", "dask-gpu (pageable)")):
        for other in ("hardware", "cupy", "dask-cuda"):
            if other in rate[direction]:
                ratios[f"{direction}: {ours} / {other}"] = rate[direction][ours] / rate[direction][other]
    out["ratios"] = ratios
    return out


def table(results: list[dict]) -> str:
    rows = [("size", "method", "device->host GB/s", "host->device GB/s")]
    for r in results:
        for method in dict.fromkeys([*r["to_host"], *r["to_device"]]):
            cells = [f"{r[d][method]['GB/s']:.1f}" if method in r[d] else "" for d in ("to_host", "to_device")]
            rows.append((r["size"], method, *cells))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    for r in results:
        lines.append(f"\n{r['size']} ({format_bytes(r['bytes'])}) ratios (bandwidth, above 1: dask-gpu faster)")
        lines += [f"  {k}: {v:.2f}" for k, v in r["ratios"].items()]
        if "dask-cuda error" in r:
            lines.append(f"  dask-cuda: {r['dask-cuda error']}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1GB,256MB", help="array sizes, comma-separated (default 1GB,256MB)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--out", default="benchmarks/results/spill.json")
    args = parser.parse_args()

    cupy = require_gpu()
    from dask_gpu.report import machine_dict

    results = [measure(cupy, s.strip(), args.repeat, args.warmup) for s in args.sizes.split(",")]
    report = {
        "benchmark": "spill",
        "measure": "GB/s (1e9 bytes/s) of one float32 CuPy array moved device->host and host->device, "
        "median of runs after warm-up, synchronised before and after each run",
        "machine": machine_dict(),
        "cupy": cupy.__version__,
        "repeat": args.repeat,
        "warmup": args.warmup,
        "results": results,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(table(results))
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
