"""What the GPU page shows, from the scheduler's view of its workers; plain data, no Bokeh.

Each GPU worker's heartbeat carries ``metrics["gpu-memory"]`` (:func:`dask_gpu.memory.stats.export`),
which the scheduler keeps as ``WorkerState.metrics["gpu-memory"]`` until the next heartbeat; on a
real GPU, distributed's NVML monitor adds ``gpu_utilization``, ``gpu_memory_used`` and
``gpu-memory-total`` beside it. Spill rates are differences of the cumulative counters between
heartbeats, kept by :class:`SpillHistory` on the scheduler.
"""

from __future__ import annotations

import math
from collections import deque
from types import SimpleNamespace

from dask.utils import format_bytes

METRIC = "gpu-memory"  # the key dask-gpu's workers report under
SPILLED, UNSPILLED = "device-to-host-bytes", "host-to-device-bytes"
HITS = "kernel-cache-hits"  # shown only once a worker reports it
NA = "n/a"
COLORS = ("#76B900", "#1f77b4", "#ff7f0e", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
          "#bcbd22", "#17becf")  # NVIDIA green first, then Category10


def reporting(workers) -> list:
    """The workers with device-memory (dask-gpu) or NVML (distributed) figures, by name."""
    chosen = [ws for ws in workers if METRIC in ws.metrics or "gpu_utilization" in ws.metrics]
    return sorted(chosen, key=lambda ws: str(ws.name))


def worker_rows(workers) -> dict[str, list]:
    """One row per GPU worker (each has one GPU), as the columns of the page's data source."""
    chosen = reporting(workers)
    rows = [_row(ws) for ws in chosen]
    if any(HITS in (ws.metrics.get(METRIC) or {}) for ws in chosen):  # the metric does not exist yet
        for row, ws in zip(rows, chosen):
            hits = (ws.metrics.get(METRIC) or {}).get(HITS)
            row[HITS] = NA if hits is None else f"{int(hits):,}"
    columns = rows[0] if rows else _row(_NOBODY)
    return {column: [row[column] for row in rows] for column in columns}


_NOBODY = SimpleNamespace(name="", address="", metrics={})  # gives the columns of an empty table


def _row(ws) -> dict:
    memory = ws.metrics.get(METRIC) or {}
    nvml = ws.metrics
    device = int(memory.get("device-bytes", 0))
    limit = memory.get("device-limit")
    utilization = nvml.get("gpu_utilization")
    return {
        "worker": str(ws.name),
        "address": ws.address,
        "device": device,
        "limit": int(limit) if limit else 0,  # 0: no device tier
        "unused": max(int(limit) - device, 0) if limit else 0,
        "host": int(memory.get("host-bytes", 0)),
        "disk": int(memory.get("disk-bytes", 0)),
        "spilled": int(memory.get(SPILLED, 0)),
        "unspilled": int(memory.get(UNSPILLED, 0)),
        "utilization": float(utilization) if utilization is not None else 0.0,
        "device-text": _used_text(device, limit),
        "limit-text": format_bytes(int(limit)) if limit else NA,
        "host-text": format_bytes(int(memory.get("host-bytes", 0))),
        "disk-text": format_bytes(int(memory.get("disk-bytes", 0))),
        "spilled-text": format_bytes(int(memory.get(SPILLED, 0))),
        "unspilled-text": format_bytes(int(memory.get(UNSPILLED, 0))),
        "utilization-text": f"{utilization:.0f} %" if utilization is not None else NA,
        "nvml-memory-text": _nvml_memory(nvml),
    }


def _used_text(device: int, limit) -> str:
    if not limit:
        return f"{format_bytes(device)} (no device tier)"
    return f"{format_bytes(device)} / {format_bytes(int(limit))} ({100 * device / int(limit):.0f} %)"


def _nvml_memory(metrics: dict) -> str:
    used, total = metrics.get("gpu_memory_used"), metrics.get("gpu-memory-total")
    if used is None:
        return NA
    return f"{format_bytes(int(used))} / {format_bytes(int(total))}" if total else format_bytes(int(used))


class SpillHistory:
    """The cumulative spill counters of each GPU worker at each heartbeat, kept on the scheduler so that
    the page shows the rates from before it was opened. ``length`` samples per worker (at a heartbeat
    each half second, ten minutes by default)."""

    def __init__(self, length: int = 1200):
        self.length = length
        self.samples: dict[str, deque] = {}  # address -> (time, spilled bytes, unspilled bytes)
        self.names: dict[str, str] = {}

    def sample(self, workers) -> None:
        """Add each worker's counters if a heartbeat came since the last sample; forget workers that left."""
        present = set()
        for ws in workers:
            memory = ws.metrics.get(METRIC) or {}
            if SPILLED not in memory:
                continue
            present.add(ws.address)
            self.names[ws.address] = str(ws.name)
            samples = self.samples.setdefault(ws.address, deque(maxlen=self.length))
            if not samples or ws.last_seen > samples[-1][0]:  # last_seen: when the metrics arrived
                samples.append((ws.last_seen, memory[SPILLED], memory.get(UNSPILLED, 0)))
        for address in set(self.samples) - present:
            del self.samples[address], self.names[address]

    def series(self) -> dict[str, list]:
        """One line per worker: times (ms since the epoch, for Bokeh) and rates in bytes per second."""
        out = {"worker": [], "color": [], "time": [], "spill": [], "unspill": []}
        by_name = sorted(self.samples, key=self.names.get)
        for i, address in enumerate(by_name):
            times, spill, unspill = rates(self.samples[address])
            out["worker"].append(self.names[address])
            out["color"].append(COLORS[i % len(COLORS)])
            out["time"].append(times)
            out["spill"].append(spill)
            out["unspill"].append(unspill)
        return out


def rates(samples) -> tuple[list, list, list]:
    """Times (ms) and device-to-host, host-to-device bytes per second between successive samples."""
    times, spill, unspill = [], [], []
    for (t0, s0, u0), (t1, s1, u1) in zip(samples, list(samples)[1:]):
        elapsed = t1 - t0
        if elapsed <= 0 or not math.isfinite(elapsed):
            continue
        times.append(t1 * 1000)
        spill.append(max(s1 - s0, 0) / elapsed)  # a counter never goes back; a restart is a new worker
        unspill.append(max(u1 - u0, 0) / elapsed)
    return times, spill, unspill
