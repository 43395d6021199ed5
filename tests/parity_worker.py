"""Worker classes for the dask-cuda parity tests, importable by name (``--worker-class parity_worker.TaggedWorker``)."""

from distributed import Nanny, Worker


class TaggedWorker(Worker):
    """A Worker subclass, as a dask-cuda user's ``worker_class`` would be."""


class TaggedNanny(Nanny):
    """A Nanny subclass: runs in place of Nanny."""
