"""``dask_cuda.initialize``: dask_gpu.ucx's ``initialize`` (distributed-ucxx settings for this process, and a
CUDA context where asked), and the ``dask_setup`` preload hook, so ``--preload dask_gpu.cuda.initialize
--create-cuda-context`` works where ``dask_cuda.initialize`` did (``utils.get_preload_options`` gives it)."""

import click

from dask_gpu.ucx import initialize
from dask_gpu.ucx import make_cuda_context as _create_cuda_context

__all__ = ["dask_setup", "initialize"]


@click.command()
@click.option("--create-cuda-context/--no-create-cuda-context", default=False, help="Make a CUDA context at start.")
def dask_setup(worker, create_cuda_context):
    """A CUDA context before the first task, where asked (found by its dask-cuda name, as dask-cuda's is)."""
    if create_cuda_context:
        _create_cuda_context()
