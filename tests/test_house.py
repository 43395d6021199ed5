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


LIBRARIES = ("dask", "distributed", "cudf", "dask_cudf", "pylibcudf", "rmm", "cupy", "cupyx")
PUBLIC_BY_CONVENTION = {"_make", "_fields", "_asdict", "_replace"}  # namedtuples'


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_only_the_adapter_touches_private_names_of_the_libraries():
    """No module but ``internals`` imports a private module or name of dask, distributed, cuDF or CuPy, or reads a
    private attribute that dask-gpu does not define itself (its subclasses of dask's expressions define the methods
    by which dask's optimizer asks an expression of itself, and call them)."""
    root = pathlib.Path(dask_gpu.__file__).parent
    trees = {path: ast.parse(path.read_text()) for path in sorted(root.rglob("*.py"))}
    ours = set(PUBLIC_BY_CONVENTION)
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                ours.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                ours.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                ours.add(node.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                ours.add(node.value)  # names given as text: a class's namespace, a parameter's
    found = []
    for path, tree in trees.items():
        if path.name == "internals.py":
            continue
        for node in ast.walk(tree):
            modules = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                       else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            names = [a.name for a in node.names if _private(a.name)] if isinstance(node, ast.ImportFrom) else []
            for module in modules:
                if module.split(".")[0] in LIBRARIES and (any(map(_private, module.split("."))) or names):
                    found.append(f"{path.relative_to(root)}:{node.lineno} imports {module} {names or ''}")
            if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in ours:
                found.append(f"{path.relative_to(root)}:{node.lineno} reads {node.attr}")
    assert not found, found
