"""Before measuring a cluster: wait for its GPU workers, and open every connection between them once.

Benchmarks and tests call these so that the first timed step pays for neither a worker that has
not joined yet nor the connections (UCX endpoints, TLS handshakes) that the first transfers make.
"""

from __future__ import annotations

from distributed import wait

from dask_gpu import devices


def wait_workers(client, min_timeout=10, seconds_per_gpu=2, n_gpus=None, timeout_callback=None) -> bool:
    """Wait until ``n_gpus`` workers (default: one per visible GPU) joined; False (and
    ``timeout_callback()``) if they did not within ``max(min_timeout, seconds_per_gpu * n_gpus)`` seconds."""
    n_gpus = n_gpus or len(devices.select(devices.discover()))
    try:
        client.wait_for_workers(n_gpus, timeout=max(min_timeout, seconds_per_gpu * n_gpus))
    except TimeoutError:
        if callable(timeout_callback):
            timeout_callback()
        return False
    return True


def all_to_all(client) -> None:
    """Make every worker fetch a byte from every worker, so that each pair has connected once."""
    return client.sync(_all_to_all, client)


async def _all_to_all(client) -> None:
    workers = list((await client.scheduler.identity(n_workers=-1))["workers"])
    pieces = [client.submit(bytes, 1, workers=[w], allow_other_workers=False, pure=False) for w in workers]
    await wait(pieces)
    reads = [client.submit(len, piece, workers=[w], allow_other_workers=False, pure=False)
             for w in workers for piece in pieces]
    await wait(reads)
