"""The package's shape, read from its source: short functions."""

import ast
import pathlib

import dask_gpu

LONGEST = 50  # lines a function may take, its signature and docstring included


def test_no_function_is_longer_than_fifty_lines():
    root = pathlib.Path(dask_gpu.__file__).parent
    long = [f"{path.relative_to(root)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in sorted(root.rglob("*.py"))
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= LONGEST]
    assert not long, long
