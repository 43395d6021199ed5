"""What the spill files' checksum costs: a value written to disk and read back by distributed's SpillBuffer,
with dask-gpu's checksummed files (dask_gpu.memory.checksum) and with distributed's own, alternating.

For a NumPy array of --size bytes, the median of --repeat runs of each: spilling it (pickle, write, and for
dask-gpu the checksum), and reading it back (read, check, unpickle). The directory is the temporary one, so
on most machines the page cache: the cost of the checksum against the fastest disk there is.

    python benchmarks/spill_checksum.py [--size 100MB] [--repeat 7] [--out benchmarks/results/spill-checksum.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from importlib.util import find_spec

import numpy as np
from dask.utils import parse_bytes
from distributed.spill import SpillBuffer

from dask_gpu.memory import checksum
from dask_gpu.report import machine_dict


CHECKSUMS = {"distributed": None, "dask-gpu, CRC-32": checksum._CRC32, "dask-gpu, XXH3-64": checksum._XXH3}


def one_run(value, tag) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as directory:
        buffer = SpillBuffer(directory, target=0)  # everything goes to disk
        if tag:
            checksum.install(buffer).tag = tag
        copy = value.copy()
        start = time.perf_counter()
        buffer["x"] = copy
        written = time.perf_counter()
        del copy  # nothing else holds it: the read goes to disk, not to zict's cache
        back = buffer["x"]
        read = time.perf_counter()
        assert np.array_equal(back, value)
        return written - start, read - written


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="100MB")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--out")
    args = parser.parse_args()
    value = np.random.default_rng(0).integers(0, 256, parse_bytes(args.size), dtype="uint8")
    names = [name for name, tag in CHECKSUMS.items() if tag != checksum._XXH3 or find_spec("xxhash")]
    runs = {name: [] for name in names}
    for _ in range(args.repeat):
        for name in names:
            runs[name].append(one_run(value, CHECKSUMS[name]))
    result = {"size": value.nbytes, "repeat": args.repeat, "machine": machine_dict()}
    for name, times in runs.items():
        result[name] = {"write_s": statistics.median(w for w, _ in times),
                        "read_s": statistics.median(r for _, r in times)}
        if name != "distributed":
            result[name].update({f"{step[:-2]}_overhead": result[name][step] / result["distributed"][step] - 1
                                 for step in ("write_s", "read_s")})
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
