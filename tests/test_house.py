"""The package's shape, read from its source: short functions, and parsers that ask nothing of the machine."""

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


def test_the_parsers_ask_nothing_of_the_machine():
    """parse.py reads what a value says; dask_gpu.machine checks values against this machine."""
    source = pathlib.Path(dask_gpu.__file__).with_name("parse.py").read_text()
    names = {node.attr if isinstance(node, ast.Attribute) else node.id
             for node in ast.walk(ast.parse(source)) if isinstance(node, (ast.Attribute, ast.Name))}
    imported = {alias.name.split(".")[0] for node in ast.walk(ast.parse(source))
                if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    assert not names & {"open", "makedirs", "access", "isfile", "isdir", "find_spec", "getaddrinfo", "bind"}
    assert not imported & {"socket", "psutil", "importlib", "subprocess", "shutil"}
