"""Tokens that dask's optimizer asks for while it plans, made without the work dask and cuDF do for them.

dask names each expression it makes by tokenizing its type and operands, a few hundred expressions a query:

- **Classes.** dask tokenizes a class by pickling it, twice, and unpickling it, to make sure the bytes are
  stable: a tenth of the client's planning. A class that its module gives back by its name pickles as that
  name, so that name is its token. Classes of ``__main__``, which may be defined again under the same name,
  and those no module gives back are tokenized as dask does.
- **Empty cuDF frames.** Some expressions hold a meta among their operands (a tree reduction's). cuDF
  tokenizes a frame by hashing its rows on the GPU and copying the hashes back, and a MultiIndex by making a
  pandas copy of it. An empty frame's token is its kind (:func:`.meta.meta_kind`: its type, columns, dtypes and
  index), which says all of it. Frames with rows, and those with categories, are tokenized as cuDF does.
"""

from __future__ import annotations

import sys

from dask.tokenize import normalize_object, normalize_token

from dask_gpu.dataframe.meta import meta_kind


def register() -> None:
    """Both tokens from now on (idempotent); those of cuDF frames where cuDF is installed."""
    normalize_token.register(type, class_token)
    try:
        from cudf.core.frame import Frame
    except ImportError:
        return
    normalize_token.register(Frame, empty_frame_token)


def class_token(cls) -> tuple:
    """A class's module and qualified name, where its module gives it back by them; dask's token otherwise."""
    if cls.__module__ != "__main__":
        found = sys.modules.get(cls.__module__)
        for name in cls.__qualname__.split("."):
            found = getattr(found, name, None)
        if found is cls:
            return "class", cls.__module__, cls.__qualname__
    return normalize_object(cls)


def empty_frame_token(frame):
    """An empty frame's kind, with no categories in it; the frame's own token otherwise."""
    if len(frame) == 0:
        try:
            kind = meta_kind(frame)
        except TypeError:
            kind = None
        if kind is not None and not _categorical(kind):
            return "empty", kind
    return normalize_object(frame)


def _categorical(kind) -> bool:
    """Whether a dtype in ``kind`` has categories (whose values its kind leaves out)."""
    if isinstance(kind, tuple):
        return any(_categorical(part) for part in kind)
    return getattr(kind, "name", None) == "category"
