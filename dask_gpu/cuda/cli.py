"""dask-cuda's ``dask cuda`` command: where dask-cuda is not installed, one line naming ``dask gpu`` instead.

dask loads every ``dask_cli`` entry point and, where two commands share a name, warns on every run and
keeps the one loaded last. So where another package (dask-cuda) has a ``dask cuda`` entry point, this one
gives dask a hidden command of another name, and dask-cuda's own runs untouched, without a warning.
"""

from __future__ import annotations

import shlex
import sys
from importlib.metadata import entry_points

import click

ENTRY_POINT = "dask_gpu.cuda.cli:cuda"  # pyproject.toml's, under dask_cli


@click.command(name="cuda", hidden=True, add_help_option=False,
               context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def hint(args):
    """dask-cuda's `dask cuda`, where dask-cuda is not installed: dask-gpu's equivalent is `dask gpu`."""
    if args:
        instead = f"dask-gpu's equivalent is: {shlex.join(['dask', 'gpu', *args])}"
    else:
        instead = "dask-gpu's equivalents of `dask cuda worker` and `dask cuda config` are `dask gpu worker` and " \
                  "`dask gpu config` (dask gpu --help)"
    click.echo(f"Error: dask-cuda is not installed; {instead}", err=True)
    sys.exit(2)


@click.command(name="dask-gpu-cuda-hint", hidden=True)
def standing_aside():
    """Unused: dask-cuda's own `dask cuda` is installed, and runs."""


def __getattr__(name):
    if name == "cuda":  # read as dask loads the entry point
        others = [ep for ep in entry_points(group="dask_cli") if ep.name == "cuda" and ep.value != ENTRY_POINT]
        return standing_aside if others else hint
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
