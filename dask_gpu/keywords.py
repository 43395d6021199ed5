"""Keywords bound for distributed's Nanny and Worker, checked in this process before anything starts.

LocalCUDACluster and CUDAWorker give each keyword they do not know to every Nanny, which gives the
ones it does not know to its Worker. A keyword that neither takes would fail in every worker process
("Nanny failed to start", one long trace each); here it is one line, naming the keyword, what to use
instead (for keywords of older dask-cuda versions and of LocalCluster) and the closest keyword that exists.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Iterable

from distributed import Nanny, Worker
from distributed.utils import import_term

# Keywords of older dask-cuda versions, and of LocalCluster, that dask-gpu does not take: what to do instead.
RETIRED = {
    "jit_unspill": "dask-cuda's JIT-unspilling (proxy objects) is gone from dask-cuda 26.10 too, and dask-gpu "
                   "needs none: its device tier moves device objects to host and back, and spills when an "
                   "allocation fails. Drop it",
    "shared_filesystem": "it told JIT-unspilling whether local_directory is shared; dask-gpu has no JIT-unspilling. "
                         "Drop it",
    "ucx_net_devices": "UCX picks its network devices itself; to choose, set UCX_NET_DEVICES in the workers' "
                       "environment (env={'UCX_NET_DEVICES': 'mlx5_0:1'}). Drop it",
    "ip": "LocalCluster's old name for the host: use host=",
    "diagnostics_port": "LocalCluster's old name for the dashboard's address: use dashboard_address=",
    "worker_services": "dask-gpu's workers run no extra services; use scheduler_kwargs={'services': ...} for the "
                       "scheduler's",
    "service_kwargs": "use scheduler_kwargs={'service_kwargs': ...}",
    "start": "the cluster starts when it is made (asynchronous=True: when it is awaited). Drop it",
}

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
_INTERNAL = {"self", "scheduler_ip", "scheduler_port", "nanny", "WorkerStateClass"}  # set by distributed itself


def named_parameters(*classes: type) -> set[str]:
    """The keywords that ``classes`` and their base classes take by name in ``__init__``, ``self`` aside."""
    return {
        p.name
        for cls in classes
        for klass in cls.__mro__
        if "__init__" in vars(klass)
        for p in inspect.signature(vars(klass)["__init__"]).parameters.values()
        if p.kind in _NAMED
    } - {"self"}


def accepted(worker_class: type | None = None) -> set[str]:
    """The keywords a Nanny, its Worker (or ``worker_class``) and their base classes take by name."""
    return named_parameters(Nanny, Worker, *([worker_class] if worker_class is not None else [])) - _INTERNAL


def check(given: Iterable[str], owner: str, own: Iterable[str], worker_class: type | None = None) -> None:
    """TypeError, one line, for the first of ``given`` that no worker takes; ``own``: the owner's keywords."""
    known = accepted(worker_class)
    for key in given:
        if key not in known:
            raise TypeError(_unknown(key, owner, known | set(own)))


def _unknown(key: str, owner: str, valid: set[str]) -> str:
    """The error line: the keyword, what to use instead, and the closest valid keyword."""
    lowered = {name.lower(): name for name in valid}
    close = difflib.get_close_matches(key.lower(), lowered, n=1)
    hint = f"; did you mean {lowered[close[0]]!r}?" if close else ""
    if key in RETIRED:  # the advice says what to use instead
        return f"{owner}: {key!r} is not a keyword of dask-gpu: {RETIRED[key]}"
    return (f"{owner}: unknown keyword {key!r}: neither {owner} nor distributed's Nanny and Worker take it "
            f"(docs/migrating-from-dask-cuda.md lists what does){hint}")


def parse_worker_class(value) -> type | None:
    """A Worker or Nanny subclass, from the class or its dotted name (``--worker-class pkg.MyWorker``)."""
    if value is None:
        return None
    cls = value
    if isinstance(value, str):
        try:
            cls = import_term(value)
        except (ImportError, AttributeError, ValueError) as e:
            raise ValueError(f"worker_class {value!r} cannot be imported: {e}") from None
    if not (isinstance(cls, type) and issubclass(cls, (Worker, Nanny))):
        raise ValueError(f"worker_class must be a subclass of distributed.Worker or distributed.Nanny "
                         f"(or its dotted name), not {value!r}")
    return cls
