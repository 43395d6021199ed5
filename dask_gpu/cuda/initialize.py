"""``dask_cuda.initialize``: dask_gpu.ucx's ``initialize`` (distributed-ucxx settings for this process, and a
CUDA context where asked), and the ``dask_setup`` preload hook, so ``--preload dask_gpu.cuda.initialize
--create-cuda-context`` works where ``dask_cuda.initialize`` did (``utils.get_preload_options`` gives it)."""

import click

from dask_gpu.ucx import initialize
from dask_gpu.ucx import make_cuda_context as _create_cuda_context

__all__ = ["dask_setup", "initialize"]


@click.command()
@click.option("--create-cuda-context/--no-create-cuda-context", default=False, help="Make a CUDA context at start.")
@click.option("--enable-tcp-over-ucx/--disable-tcp-over-ucx", default=None, help="UCX over TCP.")
@click.option("--enable-infiniband/--disable-infiniband", default=None, help="UCX over InfiniBand.")
@click.option("--enable-nvlink/--disable-nvlink", default=None, help="UCX over NVLink.")
@click.option("--enable-rdmacm/--disable-rdmacm", default=None, help="RDMA connection manager.")
def dask_setup(worker, create_cuda_context, enable_tcp_over_ucx=None, enable_infiniband=None, enable_nvlink=None,
               enable_rdmacm=None):
    """This worker process's UCX transports, where named, and its CUDA context before the first task, where
    asked (found by its dask-cuda name, as dask-cuda's is)."""
    transports = dict(enable_tcp_over_ucx=enable_tcp_over_ucx, enable_infiniband=enable_infiniband,
                      enable_nvlink=enable_nvlink, enable_rdmacm=enable_rdmacm)
    if any(value is not None for value in transports.values()):
        initialize(create_cuda_context=False, **transports)
    if create_cuda_context:
        _create_cuda_context()
