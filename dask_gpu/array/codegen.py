"""CUDA kernels written by tracing Python: random draws and fused elementwise-slice-reduce chains.

A :class:`Sym` stands for one value of an array inside a kernel. Running a distribution of
:mod:`~dask_gpu.array.distributions`, or a chain of NumPy ufuncs and operators, on Syms writes
one C statement per operation in the order Python runs them, so the kernel computes what
NumPy computes, operation for operation. Kernels are compiled without FMA contraction: that,
and IEEE-exact operations, make random values bit-identical to the NumPy path.

One kernel template serves both uses: each thread walks output elements, reads each input
through its own strides (a strided view costs nothing) or draws it from its counter, and
either stores the value or accumulates it; blocks then combine in registers and shared memory.
"""

from __future__ import annotations

import functools
import math
import types

import numpy as np

from dask_gpu.array import distributions

CTYPES = {
    "float64": "double", "float32": "float", "int64": "long long", "int32": "int", "int16": "short",
    "int8": "signed char", "uint64": "unsigned long long", "uint32": "unsigned int", "uint16": "unsigned short",
    "uint8": "unsigned char", "bool": "bool",
}
BINARY = {"add": "+", "subtract": "-", "multiply": "*", "true_divide": "/", "divide": "/"}
COMPARISONS = {"less": "<", "less_equal": "<=", "greater": ">", "greater_equal": ">=", "equal": "==", "not_equal": "!="}
CALLS = {
    "sqrt": "sqrt", "exp": "exp", "log": "log", "sin": "sin", "cos": "cos", "tan": "tan", "tanh": "tanh",
    "exp2": "exp2", "log2": "log2", "log10": "log10", "expm1": "expm1", "log1p": "log1p", "floor": "floor",
    "ceil": "ceil", "arctan": "atan", "sinh": "sinh", "cosh": "cosh", "power": "pow",
}


class Unsupported(Exception):
    """The operation has no kernel form here; the caller falls back to CuPy."""


def ctype(dtype) -> str:
    try:
        return CTYPES[np.dtype(dtype).name]
    except KeyError:
        raise Unsupported(f"no kernel type for {dtype}") from None


def literal(value) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return f"{int(value)}LL"
    return f"({float(value).hex()})" if math.isfinite(value) else f"({'-' if value < 0 else ''}CUDART_INF)"


class Builder:
    """Statements of a kernel body, one variable per operation."""

    def __init__(self):
        self.lines: list[str] = []
        self.count = 0

    def let(self, dtype, expression: str) -> Sym:
        name = f"v{self.count}"
        self.count += 1
        self.lines.append(f"{ctype(dtype)} {name} = {expression};")
        return Sym(self, name, np.dtype(dtype))


def _dummy(x):
    return np.zeros(1, x.dtype) if isinstance(x, Sym) else x


def _text(x, dtype) -> str:
    return f"(({ctype(dtype)}){x.name if isinstance(x, Sym) else literal(x)})"


class Sym:
    """One element of an array in a kernel; NumPy's ufuncs and operators write C for it."""

    __array_priority__ = 1000

    def __init__(self, builder: Builder, name: str, dtype):
        self.builder, self.name, self.dtype = builder, name, np.dtype(dtype)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs or ufunc.nout != 1:
            raise Unsupported(f"{ufunc.__name__}.{method}")
        with np.errstate(all="ignore"):
            dtype = ufunc(*map(_dummy, inputs)).dtype
        args = [_text(x, dtype) for x in inputs]
        name = ufunc.__name__
        if name in BINARY:
            return self.builder.let(dtype, f"{args[0]} {BINARY[name]} {args[1]}")
        if name in CALLS:
            return self.builder.let(dtype, f"{CALLS[name]}({', '.join(args)})")
        if name == "negative":
            return self.builder.let(dtype, f"-{args[0]}")
        if name == "positive":
            return self.builder.let(dtype, args[0])
        if name == "square":
            return self.builder.let(dtype, f"{args[0]} * {args[0]}")
        if name == "absolute":
            return self.builder.let(dtype, f"({args[0]} < 0 ? -{args[0]} : {args[0]})")
        if name in ("maximum", "minimum"):  # NaN wins, as in NumPy
            a, b = args
            pick = ">" if name == "maximum" else "<"
            return self.builder.let(dtype, f"(({a} {pick} {b} || {a} != {a}) ? {a} : {b})")
        if name in COMPARISONS:
            ops = COMPARISONS
            common = np.result_type(*map(_dummy, inputs))
            a, b = (_text(x, common) for x in inputs)
            return self.builder.let(dtype, f"{a} {ops[name]} {b}")
        raise Unsupported(name)

    def astype(self, dtype):
        return self.builder.let(dtype, _text(self, dtype))

    def _binary(ufunc, swap=False):
        def method(self, other):
            return ufunc(other, self) if swap else ufunc(self, other)

        return method

    __add__, __radd__ = _binary(np.add), _binary(np.add, True)
    __sub__, __rsub__ = _binary(np.subtract), _binary(np.subtract, True)
    __mul__, __rmul__ = _binary(np.multiply), _binary(np.multiply, True)
    __truediv__, __rtruediv__ = _binary(np.true_divide), _binary(np.true_divide, True)
    __pow__, __rpow__ = _binary(np.power), _binary(np.power, True)
    __lt__, __le__ = _binary(np.less), _binary(np.less_equal)
    __gt__, __ge__ = _binary(np.greater), _binary(np.greater_equal)
    __eq__, __ne__ = _binary(np.equal), _binary(np.not_equal)
    __hash__ = object.__hash__
    __neg__ = lambda self: np.negative(self)  # noqa: E731
    __pos__ = lambda self: np.positive(self)  # noqa: E731
    __abs__ = lambda self: np.absolute(self)  # noqa: E731


class COps:
    """``ops`` for the distributions, writing C (all float64)."""

    def __init__(self, builder: Builder):
        self.b = builder

    def sqrt(self, x):
        return self.b.let("float64", f"sqrt({x.name})")

    def floor(self, x):
        return self.b.let("float64", f"floor({x.name})")

    def frexp(self, x):
        exponent = f"e{self.b.count}"
        self.b.lines.append(f"int {exponent};")
        mantissa = self.b.let("float64", f"frexp({x.name}, &{exponent})")
        return mantissa, self.b.let("float64", f"(double){exponent}")

    def ldexp(self, m, e):
        return self.b.let("float64", f"ldexp({m.name}, (int){e.name})")

    def where(self, cond, then, otherwise, x):
        out = self.b.let("float64", "0.0")
        for head, branch in ((f"if ({cond.name}) {{", then), ("} else {", otherwise)):
            self.b.lines.append(head)
            self.b.lines.append(f"{out.name} = {branch(x).name};")
        self.b.lines.append("}")
        return out


PHILOX = r"""
__device__ __forceinline__ unsigned long long philox_u64(unsigned long long n, unsigned int c2, unsigned int c3,
                                                         unsigned int k0, unsigned int k1) {
  unsigned int c0 = (unsigned int)n, c1 = (unsigned int)(n >> 32);
  #pragma unroll
  for (int r = 0; r < 10; r++) {
    if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
    unsigned int hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    unsigned int hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
  }
  return ((unsigned long long)c0 << 32) | c1;
}
"""


def param_types(method: str, nparams: int) -> tuple[str, ...]:
    """C types of a draw's parameters: integers take (low, high - low), the others doubles."""
    return ("long long", "unsigned long long") if method == distributions.INTEGER else ("double",) * nparams


def draw_source(method: str, nparams: int, dtype, name: str) -> str:
    """A device function ``name(n, stream, key, params)`` giving the value at counter ``n``."""
    params = "".join(f", {t} p{i}" for i, t in enumerate(param_types(method, nparams)))
    head = (f"__device__ {ctype(dtype)} {name}(unsigned long long n, unsigned int s0, unsigned int s1, "
            f"unsigned int k0, unsigned int k1{params}) {{\n"
            "  unsigned long long bits = philox_u64(n, s0, s1, k0, k1);\n")
    if method == distributions.INTEGER:
        return head + f"  return ({ctype(dtype)})(p0 + (long long)__umul64hi(bits, p1));\n}}\n"
    b = Builder()
    ops = COps(b)
    u, v = distributions.uniforms(ops, b.let("float64", "(double)(bits >> 11)"))
    args = [Sym(b, f"p{i}", np.float64) for i in range(nparams)]
    result = distributions.DISTRIBUTIONS[method][0](ops, u, v, *args)
    body = "\n".join("  " + line for line in b.lines)
    return head + body + f"\n  return ({ctype(dtype)}){result.name};\n}}\n"


# --- the kernel -----------------------------------------------------------------------------

REDUCE = {  # name: (identity, combine(a, b) in C)
    "sum": ("0", "{a} + {b}"),
    "max": ("-CUDART_INF", "(({a} > {b} || {a} != {a}) ? {a} : {b})"),
    "min": ("CUDART_INF", "(({a} < {b} || {a} != {a}) ? {a} : {b})"),
}


def _identity(kind, dtype):
    if np.dtype(dtype).name not in ("float64", "float32", "int64", "int32", "uint64", "uint32"):
        raise Unsupported(f"a {kind} reduction to {dtype}")
    if kind == "sum" or np.dtype(dtype).kind == "f":
        return REDUCE[kind][0]
    info = np.iinfo(dtype)
    return f"{info.min if kind == 'max' else info.max}{'ULL' if np.dtype(dtype).kind == 'u' else 'LL'}"


@functools.lru_cache(maxsize=256)
def kernel_source(leaves: tuple, ndim: int, body, out_dtype, reduce: str | None, wide: bool = True):
    """The kernels' text (``fused``, and ``finish`` for a reduction) and the output dtype.

    ``leaves``: ("array", dtype) or ("draw", Draw); ``body(builder, syms) -> Sym`` is the
    expression; ``out_dtype`` a dtype or a function of the expression's dtype. Unless
    ``wide``, indices fit 32 bits: 64-bit division costs a GPU several times more.
    """
    index_t = "long long" if wide else "unsigned int"
    b = Builder()
    params, loads, helpers = _leaf_parameters(b, leaves, ndim)
    result = body(b, loads)
    if not isinstance(result, Sym):
        raise Unsupported("an expression of constants")
    out_dtype = np.dtype(out_dtype(result.dtype) if isinstance(out_dtype, types.FunctionType) else out_dtype)
    out_t = ctype(out_dtype)
    params += [f"long long n{k}" for k in range(ndim)] + ["long long total", f"{out_t}* __restrict__ out"]
    split = "".join(f"    {index_t} i{k} = rest % ({index_t})n{k}; rest /= ({index_t})n{k};\n"
                    for k in range(ndim - 1, 0, -1))
    split += f"    {index_t} i0 = rest;\n" if ndim else ""
    statements = "".join(f"    {line}\n" for line in b.lines)
    if reduce is None:
        work, finish = f"    out[t] = ({out_t}){result.name};\n", ""
    else:
        combine = REDUCE[reduce][1]
        identity = _identity(reduce, np.dtype(out_dtype))
        work = f"    acc = {combine.format(a='acc', b=f'({out_t}){result.name}')};\n"
        finish = _block_reduce(out_t, combine, identity) + "}\n" + _finish_kernel(out_t, combine, identity)
    source = (
        "#define CUDART_INF __longlong_as_double(0x7ff0000000000000ULL)\n"
        + PHILOX + "".join(helpers)
        + f'extern "C" __global__ void fused({", ".join(params)}) {{\n'
        + (f"  {out_t} acc = ({out_t}){identity};\n" if reduce else "")
        + "  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;"
        f" t += (long long)blockDim.x * gridDim.x) {{\n    {index_t} rest = ({index_t})t;\n"
        + split + statements + work + "  }\n" + (finish or "}\n")
    )
    return source, out_dtype


def _leaf_parameters(b, leaves, ndim: int) -> tuple[list, list, list]:
    """Each leaf's kernel parameters, the symbol of its value at the thread's element, and the helper functions
    that draws need."""
    params, loads, helpers = [], [], []
    index = " + ".join(f"i{k} * {{a}}{k}" for k in range(ndim)) or "0"
    for j, (kind, what) in enumerate(leaves):
        if kind == "array":
            params.append(f"const {ctype(what)}* __restrict__ x{j}")
            params += [f"long long x{j}s{k}" for k in range(ndim)]
            loads.append(b.let(what, f"x{j}[{index.format(a=f'x{j}s')}]"))
            continue
        nparams = len(what.params)
        helpers.append(draw_source(what.method, nparams, what.dtype, f"draw{j}"))
        params.append(f"unsigned long long d{j}, unsigned int d{j}s0, unsigned int d{j}s1, "
                      f"unsigned int d{j}k0, unsigned int d{j}k1"
                      + "".join(f", {t} d{j}p{i}" for i, t in enumerate(param_types(what.method, nparams))))
        params += [f"unsigned long long d{j}a{k}" for k in range(ndim)]
        args = ", ".join([f"d{j} + {index.format(a=f'd{j}a')}", f"d{j}s0, d{j}s1, d{j}k0, d{j}k1"]
                         + [f"d{j}p{i}" for i in range(nparams)])
        loads.append(b.let(what.dtype, f"draw{j}({args})"))
    return params, loads, helpers


def _block_reduce(out_t, combine, identity):
    # Every lane of a warp must reach each shuffle: take it before combining, never inside a branch.
    step = f"{{ {out_t} other = __shfl_down_sync(0xffffffff, acc, s); acc = {combine.format(a='acc', b='other')}; }}"
    return (
        f"  __shared__ {out_t} warps[32];\n"
        f"  for (int s = 16; s > 0; s >>= 1) {step}\n"
        "  if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = acc;\n  __syncthreads();\n"
        "  if (threadIdx.x < 32) {\n"
        f"    acc = threadIdx.x < (blockDim.x >> 5) ? warps[threadIdx.x] : ({out_t}){identity};\n"
        f"    for (int s = 16; s > 0; s >>= 1) {step}\n"
        "    if (threadIdx.x == 0) out[blockIdx.x] = acc;\n  }\n"
    )


def _finish_kernel(out_t, combine, identity):
    """One block combining the blocks' partial results, in a fixed order (deterministic)."""
    return (
        f'extern "C" __global__ void finish(const {out_t}* __restrict__ partial, int n, {out_t}* __restrict__ out) {{\n'
        f"  {out_t} acc = ({out_t}){identity};\n"
        f"  for (int i = threadIdx.x; i < n; i += blockDim.x) acc = {combine.format(a='acc', b='partial[i]')};\n"
        + _block_reduce(out_t, combine, identity) + "}\n"
    )


@functools.lru_cache(maxsize=256)
def compile_kernel(source: str, name: str = "fused"):
    import cupy

    return cupy.RawModule(code=source, options=("--fmad=false", "-std=c++17")).get_function(name)


THREADS = 256


def launch(source: str, args: list, total: int, out, blocks: int) -> None:
    compile_kernel(source)((blocks,), (THREADS,), tuple(args) + (np.int64(total), out))


def finish(source: str, partial, out) -> None:
    """``out[0]``: the blocks' ``partial`` results of a reduction kernel, combined."""
    compile_kernel(source, "finish")((1,), (THREADS,), (partial, np.int32(partial.size), out))


def blocks_for(total: int) -> int:
    return max(1, min(_multiprocessors() * 8, -(-total // THREADS)))


@functools.cache
def _multiprocessors() -> int:
    import cupy

    return cupy.cuda.Device().attributes["MultiProcessorCount"]


def leaf_args(kind, value) -> list:
    """Kernel arguments for one input: a CuPy view, or a (Draw, region) pair."""
    if kind == "array":
        x = value  # CuPy passes a view as a pointer to its first element
        if any(s % x.itemsize for s in x.strides):
            raise Unsupported("strides that are not whole elements")
        return [x] + [np.int64(s // x.itemsize) for s in x.strides]
    draw, region = value
    strides = draw.strides()
    start = sum(r.start * s for r, s in zip(region, strides))
    k0, k1 = draw.key
    if draw.method == distributions.INTEGER:
        params = [np.int64(draw.params[0]), np.uint64(draw.params[1] - draw.params[0])]
    else:
        params = [np.float64(p) for p in draw.params]
    return ([np.uint64(start), np.uint32(draw.stream & 0xFFFFFFFF), np.uint32(draw.stream >> 32),
             np.uint32(k0), np.uint32(k1)] + params
            + [np.uint64(r.step * s % 2**64) for r, s in zip(region, strides)])  # steps < 0 wrap around


def sample(draw, region):
    """The values of ``draw`` at ``region``, drawn on the GPU, as CuPy (:func:`~dask_gpu.array.plan.sample`)."""
    import cupy

    shape = tuple(len(r) for r in region)
    out = cupy.empty(shape, dtype=draw.dtype)
    if out.size:
        wide = out.size >= 2**31
        source, _ = kernel_source((("draw", _code_key(draw)),), len(shape), _first, draw.dtype, None, wide)
        args = leaf_args("draw", (draw, region)) + [np.int64(n) for n in shape]
        launch(source, args, out.size, out, blocks_for(out.size))
    return out


def _first(builder, syms):
    return syms[0]


def _code_key(draw):
    """What the kernel's text depends on: not the key, stream or parameter values."""
    return draw.__class__(key=(0, 0), stream=0, method=draw.method, params=(0.0,) * len(draw.params),
                          shape=(), dtype=draw.dtype, library="cupy")
