"""Sphinx configuration of the dask-gpu documentation.

Build it with ``python -m pip install ".[docs]"`` and
``python -m sphinx -W --keep-going -b html docs docs/_build/html``.
"""

import os
import sys

# The API and CLI references are generated from this working tree's package.
sys.path.insert(0, os.path.abspath(".."))

project = "dask-gpu"
author = "the dask-gpu developers"
copyright = "the dask-gpu developers, BSD-3-Clause"
import dask_gpu  # noqa: E402  (the package must import without GPU libraries; they load lazily)

release = version = dask_gpu.__version__

extensions = [
    "myst_parser",  # the pages are Markdown, readable on GitHub as they are
    "sphinx_click",  # the CLI reference, generated from dask_gpu.cli:gpu
    "sphinx.ext.autodoc",  # the API reference, generated from docstrings
    "sphinx.ext.napoleon",
]

root_doc = "index"
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
smartquotes_action = "qe"  # quotes and ellipses; "--flag" in help texts stays two hyphens

# GitHub-style anchors, so that links like memory.md#allocators work both on GitHub and here.
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_param = False  # keep "a, b: ..." entries as one item, not one copy per name

html_theme = "pydata_sphinx_theme"
html_title = f"dask-gpu {release}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_sidebars = {"**": ["globaltoc.html"]}  # every page in the left column, by section
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}

