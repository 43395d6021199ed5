"""``dask_cuda.explicit_comms``: dask-gpu has none. dask's own shuffles run on the device."""

raise ImportError(
    "dask_cuda.explicit_comms has no dask-gpu equivalent: dask-gpu runs dask's own shuffles (df.shuffle(on=...), hash "
    "joins, sort_values, split_out group-bys) on the GPUs through its device shuffle (the gpu.shuffle setting), so "
    "write df.shuffle(on=...) where dask-cuda code calls explicit_comms' shuffle")
