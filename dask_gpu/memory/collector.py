"""Python's cycle collector, paused while a graph's tasks are made by the ten thousand.

Each collection that starts on the way walks the whole heap of the process (for the 2 TB sum's
graph, a tenth of a second each time), and the task objects made then hold no cycles: what the
collector would find waits until the pause ends. Pauses nest, across threads; the collector
runs again when the last one ends, unless it was off before the first.
"""

from __future__ import annotations

import contextlib
import gc
import threading

_lock = threading.Lock()
_pauses = 0
_was_enabled = False


@contextlib.contextmanager
def collector_paused():
    global _pauses, _was_enabled
    with _lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()
