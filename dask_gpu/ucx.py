"""Protocols and UCX: dask-cuda's transport keywords as distributed-ucxx configuration.

``enable_tcp_over_ucx``, ``enable_nvlink``, ``enable_infiniband`` and ``enable_rdmacm`` (None: UCX
chooses) become distributed-ucxx's ``tcp``, ``nvlink``, ``infiniband`` and ``rdmacm`` settings, by
dask-cuda's rules, for the workers (through their spec) and for this process (:func:`initialize`).
Nothing here imports ucxx, or touches CUDA unless asked to make a context.
"""

from __future__ import annotations

import importlib.util
import logging
import warnings
from collections.abc import Mapping

import dask

logger = logging.getLogger("dask_gpu")

UCX_PROTOCOLS = ("ucx", "ucxx")

# dask-cuda's keywords for choosing UCX transports -> distributed-ucxx's configuration keys
UCX_TRANSPORTS = {
    "enable_tcp_over_ucx": "tcp",
    "enable_nvlink": "nvlink",
    "enable_infiniband": "infiniband",
    "enable_rdmacm": "rdmacm",
}


def parse_ucx(protocol: str | None, transports: Mapping[str, bool]) -> dict:
    """The distributed-ucxx settings for the transports chosen (distributed-ucxx keys -> bool).

    They need UCX: a protocol named and not UCX is an error; None (a worker that takes its
    scheduler's protocol) keeps them for when that is UCX. Disabling a transport and enabling
    none turns on the others left unset, since distributed-ucxx applies its settings only when
    one is on; turning one on turns on cuda-copy, without which GPU buffers cannot move.
    """
    if transports and protocol not in (None, *UCX_PROTOCOLS):
        names = ", ".join(k for k, v in UCX_TRANSPORTS.items() if v in transports)
        raise ValueError(f"{names} choose UCX transports: they need protocol='ucx', not {protocol!r}")
    chosen = dict(transports)
    if any(v is False for v in chosen.values()) and not any(chosen.values()):
        chosen = {"tcp": True, "nvlink": True, "infiniband": True, **chosen}
    if any(chosen.get(k) for k in ("tcp", "nvlink", "infiniband")):
        chosen["cuda-copy"] = True
    return chosen


def implied_protocol(protocol: str | None, transports: Mapping[str, bool]) -> str | None:
    """A cluster's protocol: UCX where a transport is turned on and no protocol is named (dask-cuda's rule)."""
    return "ucx" if protocol is None and any(transports.values()) else protocol


def usable_protocol(protocol: str | None) -> str | None:
    """``protocol``, or TCP with a warning where UCX is asked for and distributed-ucxx is missing."""
    if protocol in UCX_PROTOCOLS and importlib.util.find_spec("distributed_ucxx") is None:
        warnings.warn(
            f"protocol={protocol!r} needs the distributed-ucxx package (pip install distributed-ucxx-cu12 "
            "or distributed-ucxx-cu13); running over TCP instead",
            UserWarning,
            stacklevel=3,
        )
        return "tcp"
    return protocol


def get_ucx_config(enable_tcp_over_ucx=None, enable_infiniband=None, enable_nvlink=None, enable_rdmacm=None):
    """distributed-ucxx's configuration with these transports chosen, or None without distributed-ucxx.

    dask-cuda's ``get_ucx_config``: every transport key is present (None: UCX chooses), and a
    process that starts UCX makes its CUDA context first (``create-cuda-context``).
    """
    if importlib.util.find_spec("distributed_ucxx") is None:
        return None
    given = dict(enable_tcp_over_ucx=enable_tcp_over_ucx, enable_nvlink=enable_nvlink,
                 enable_infiniband=enable_infiniband, enable_rdmacm=enable_rdmacm)
    chosen = {UCX_TRANSPORTS[k]: v for k, v in given.items() if v is not None}
    unset = dict.fromkeys(("tcp", "infiniband", "nvlink", "rdmacm", "cuda-copy"))
    base = dask.config.get("distributed-ucxx", None) or {}
    return {**base, **unset, **parse_ucx(None, chosen), "create-cuda-context": True}


def initialize(create_cuda_context=True, enable_tcp_over_ucx=None, enable_infiniband=None, enable_nvlink=None,
               enable_rdmacm=None) -> None:
    """Prepare this process (a client, or a worker through a preload) for a UCX cluster.

    Sets distributed-ucxx's configuration for the transports chosen, so that this process's
    connections match the workers', and makes a CUDA context first where asked.
    """
    ucx = get_ucx_config(enable_tcp_over_ucx, enable_infiniband, enable_nvlink, enable_rdmacm)
    if ucx is not None:
        dask.config.set({"distributed-ucxx": ucx})
    if create_cuda_context:
        make_cuda_context()


def make_cuda_context() -> bool:
    """A CUDA context on this process's first visible device; False (and an error logged) where none can be made."""
    if dask.config.get("gpu.simulate", 0):
        logger.info("simulated devices (gpu.simulate): no CUDA context is made")
        return False
    try:
        import cupy

        cupy.cuda.runtime.free(0)  # the first runtime call makes the primary context of the current device
    except Exception as e:  # no CuPy, no driver, no device: say so, as dask-cuda does, and carry on
        logger.error("could not make a CUDA context: %s", e)
        return False
    return True

