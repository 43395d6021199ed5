"""Acting on an optional library's import without importing it.

dask-gpu prepares CuPy, RMM and cuDF (their allocator, their spilling, what CuPy compiles) in the
processes that use them, at the moment they are imported: a process that never imports one never pays
for it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import sys
import threading


def when_imported(name: str, callback) -> None:
    """Call ``callback(module)`` once module ``name`` is imported: now if it already is.

    Lets a worker prepare a library (CuPy's allocator) before its first use without
    paying for its import at start-up, when no task may ever need it.
    """
    if name in sys.modules:
        if sys.modules[name] is not None:  # None: blocked, never imported in this process
            callback(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, callback))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``callback`` as its module is executed, then leaves ``sys.meta_path``. A lookup that executes nothing
    (``importlib.util.find_spec``, as code that asks whether a library is installed does) leaves it in place."""

    def __init__(self, name: str, callback):
        self.name, self.callback = name, callback
        self._looking = threading.local()  # this thread asks the other finders: stand aside

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name or getattr(self._looking, "now", False):
            return None
        self._looking.now = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._looking.now = False
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                self._leave()
                try:
                    self.callback(module)
                except Exception:  # never break the user's import
                    logging.getLogger("dask_gpu").exception("preparing %s after its import failed", fullname)

            spec.loader.exec_module = exec_module
        return spec

    def _leave(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:  # cancelled meanwhile
            pass


def cancel(callback) -> bool:
    """Forget :func:`when_imported`'s calls of ``callback`` still waiting for their import; whether there was one."""
    pending = [f for f in sys.meta_path if isinstance(f, _AfterImport) and f.callback is callback]
    for finder in pending:
        sys.meta_path.remove(finder)
    return bool(pending)
