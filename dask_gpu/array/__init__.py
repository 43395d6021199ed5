"""GPU arrays: the ``gpu`` backend, counter-based random numbers, GPU-aware graph optimization."""


def optimize(dsk, keys, **kwargs):
    """dask.array's optimization, then dask-gpu's (:mod:`dask_gpu.array.optimization`, imported on first use)."""
    from dask_gpu.array.optimization import optimize

    return optimize(dsk, keys, **kwargs)


def install() -> None:
    """Make dask.array optimize with :func:`optimize`, unless another optimizer is configured."""
    import dask

    if dask.config.get("array_optimize", None) in (None, optimize):
        dask.config.set(array_optimize=optimize)
