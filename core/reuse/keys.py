"""Reuse keys: what identifies an operation call for lineage reuse.

Three keys of decreasing specificity (ICDE sec. VI, thesis ch. 5), each a hex digest:

* :func:`base_sig` — code identity, mode, arguments and the *content* of every input: the same
  call on the same data (exact-input reuse; the only kind that is safe for data-dependent ops).
* :func:`dim_sig` — code identity, mode, arguments and the input *shapes*.
* :func:`gen_sig` — code identity, mode, arguments and the *shape class* of the call
  (:func:`shape_class`): which extents are small literals, which are equal to each other, and
  where each extent lies relative to the integer arguments. Calls in one class differ only in
  the values of their symbolic extents, which the generalised view (:mod:`.views`) takes as
  parameters.

The operation's **code identity** (:func:`code_identity`) is part of every key, so editing a
function invalidates its views: for a Python function it hashes the bytecode, constants,
names, defaults and closure contents (and, one level deep, the Python functions of the same
module it calls); for NumPy ufuncs and C functions the qualified name and the NumPy version;
a ``code_version`` string given by the caller replaces all of that.

Arguments are turned into canonical tokens (:func:`arg_token`). A value without a stable
token (an object whose ``repr`` is an address) makes the call unsignable, and such calls are
simply captured.

:class:`Call` gathers what the registry keys one call by (code identity, key mode, argument
tokens, input shapes and, lazily, input contents).
"""

import dis
import functools
import hashlib
import math
import types
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xxhash

from dslog_dagster._version import __version__ as dslog_version
from dslog_dagster.core.capture import func_name

__all__ = [
    "Call",
    "ShapeClass",
    "Unsignable",
    "arg_token",
    "args_token",
    "base_sig",
    "code_identity",
    "content_hash",
    "digest",
    "dim_sig",
    "dim_sig_cached",
    "gen_sig",
    "helper_functions",
    "shape_class",
    "shapes_of",
]

Shape = tuple[int, ...]

# Bumped when the meaning of a key changes, so old views are simply never found again. The
# NumPy and dslog versions are part of it too: NumPy's code and the annotator's rules decide
# the lineage of what runs.
_SIG_VERSION = f"1;numpy={np.__version__};dslog={dslog_version}"
_CODE_CACHE_MAX = 4096
_code_cache: "OrderedDict[Any, str]" = OrderedDict()


class Unsignable(Exception):
    """Internal: a value has no stable token, so the call cannot be signed (it is captured)."""


def digest(*parts: str) -> str:
    """BLAKE2b-128 hex digest of ``parts`` (each NUL-terminated): the hash of every key."""
    m = hashlib.blake2b(digest_size=16)
    for p in parts:
        m.update(p.encode("utf-8", "surrogatepass"))
        m.update(b"\x00")
    return m.hexdigest()


# --------------------------------------------------------------------------- tokens


def arg_token(value: Any, _depth: int = 0) -> str:
    """A canonical string for an argument value (equal values, equal tokens).

    Raises:
        Unsignable: the value has no stable token (e.g. an arbitrary object).
    """
    if _depth > 20:
        msg = "nested too deeply"
        raise Unsignable(msg)
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int | np.integer):
        return f"i{int(value)}"
    if isinstance(value, float | np.floating):
        f = float(value)
        return f"f{f.hex()}" if math.isfinite(f) else f"f{f!r}"
    if isinstance(value, complex | np.complexfloating):
        return f"c{complex(value)!r}"
    if isinstance(value, str):
        return f"s{value!r}"
    if isinstance(value, bytes):
        return f"b{hashlib.blake2b(value, digest_size=16).hexdigest()}"
    if value is Ellipsis:
        return "..."
    if isinstance(value, slice):
        parts = (arg_token(v, _depth + 1) for v in (value.start, value.stop, value.step))
        return "slice(" + ",".join(parts) + ")"
    if isinstance(value, tuple | list):
        inner = ",".join(arg_token(v, _depth + 1) for v in value)
        return ("T(" if isinstance(value, tuple) else "L(") + inner + ")"
    if isinstance(value, Mapping):
        items = sorted(
            (arg_token(k, _depth + 1), arg_token(v, _depth + 1)) for k, v in value.items()
        )
        return "D(" + ",".join(f"{k}:{v}" for k, v in items) + ")"
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return "A(" + ",".join(arg_token(v, _depth + 1) for v in value.ravel()) + ")"
        return f"nd{value.dtype.str}{value.shape}{content_hash(value)}"
    if isinstance(value, np.dtype):
        return f"dt{value.str}"
    if isinstance(value, type):
        return f"ty{value.__module__}.{value.__qualname__}"
    if callable(value):
        return "fn" + code_identity(value)
    raise Unsignable(type(value).__name__)


def args_token(args: Mapping[str, Any], drop: frozenset[str] = frozenset()) -> str:
    """Canonical token of keyword arguments, without the names in ``drop`` (irrelevant)."""
    return "{" + ",".join(f"{k}={arg_token(args[k])}" for k in sorted(args) if k not in drop) + "}"


def content_hash(array: np.ndarray[Any, Any]) -> str:
    """Digest of an array's dtype, shape and bytes (the input identity of :func:`base_sig`).

    XXH3-128, not a cryptographic hash: it runs at memory speed (~1.4 ms for a 2048 x 2048
    float64 array, where BLAKE2b took ~17-45 ms and dominated a served "base" step). Inputs
    are the pipeline's own data, not an adversary's, and 128 bits make an accidental
    collision (the only way a base view could serve the wrong lineage) negligible. The
    ``"x3:"`` prefix keeps these keys apart from the BLAKE2b keys of older stores, whose base
    views are simply learnt again.
    """
    a = np.ascontiguousarray(array)
    m = xxhash.xxh3_128()
    m.update(f"{a.dtype.str}{a.shape}".encode())
    m.update(a.data.cast("B") if a.size else b"")
    return "x3:" + m.hexdigest()


# --------------------------------------------------------------------------- code identity


def _code_parts(code: types.CodeType, out: list[str], seen: set[int]) -> None:
    if id(code) in seen:
        return
    seen.add(id(code))
    out.append(code.co_code.hex())
    out.append(repr(code.co_names))
    out.append(repr(code.co_varnames))
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _code_parts(c, out, seen)
        else:
            out.append(repr(c))


_global_names: dict[types.CodeType, tuple[str, ...]] = {}


def _names_loaded(code: types.CodeType) -> tuple[str, ...]:
    """Global names a code object loads (cached per code object)."""
    names = _global_names.get(code)
    if names is None:
        found = []
        for ins in dis.get_instructions(code):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str):
                found.append(ins.argval)
        names = tuple(dict.fromkeys(found))
        if len(_global_names) < _CODE_CACHE_MAX:
            _global_names[code] = names
    return names


def helper_functions(func: types.FunctionType) -> list[types.FunctionType]:
    """Python functions of the same module that ``func`` references as globals, as they are
    bound *now* (a helper redefined in a notebook changes the identity of its callers)."""
    found = []
    for name in _names_loaded(func.__code__):
        g = func.__globals__.get(name)
        if isinstance(g, types.FunctionType) and g.__module__ == func.__module__ and g is not func:
            found.append(g)
    return found


# Identity of stateless callables (ufuncs, C functions), by object; holds a strong reference so
# an id is never reused for another object while cached.
_static_cache: dict[int, tuple[Any, str]] = {}


def _remember(func: Any, found: str) -> str:
    if len(_static_cache) < _CODE_CACHE_MAX:
        _static_cache[id(func)] = (func, found)
    return found


def _python_code_hash(func: types.FunctionType) -> str:
    helpers = helper_functions(func)  # one level: a helper edited in the same module counts
    key = ("py", func.__code__, tuple(g.__code__ for g in helpers))
    cached = _code_cache.get(key)
    if cached is not None:
        _code_cache.move_to_end(key)
        return cached
    parts = [func.__module__ or "", func.__qualname__]
    seen: set[int] = set()
    _code_parts(func.__code__, parts, seen)
    for g in helpers:
        parts.append(g.__qualname__)
        _code_parts(g.__code__, parts, seen)
    found = digest(*parts)
    _code_cache[key] = found
    if len(_code_cache) > _CODE_CACHE_MAX:
        _code_cache.popitem(last=False)
    return found


def code_identity(func: Callable[..., Any], code_version: str | None = None) -> str:
    """A digest that changes when the operation's code changes.

    Args:
        func: the operation (Python function, lambda, ``functools.partial``, NumPy ufunc or
            C function, or any callable object).
        code_version: when given, the identity is this string (plus the function's name):
            use it for code the hash cannot see (a C extension, a model file).

    Raises:
        Unsignable: the callable's state has no stable token.
    """
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    if code_version is not None:
        return digest("version", str(name), code_version)
    static = _static_cache.get(id(func))
    if static is not None and static[0] is func:
        return static[1]
    if isinstance(func, functools.partial):
        return digest(
            "partial",
            code_identity(func.func),
            arg_token(tuple(func.args)),
            arg_token(dict(func.keywords)),
        )
    if isinstance(func, types.MethodType):
        return digest("method", code_identity(func.__func__), arg_token(func.__self__))
    if isinstance(func, types.FunctionType):
        dyn = [
            arg_token(func.__defaults__ or ()),
            arg_token(func.__kwdefaults__ or {}),
        ]
        for cell in func.__closure__ or ():
            try:
                dyn.append(arg_token(cell.cell_contents))
            except ValueError:  # an empty cell
                dyn.append("<empty>")
        return digest("function", _python_code_hash(func), *dyn)
    if isinstance(func, np.ufunc):
        return _remember(func, digest("ufunc", func.__name__, np.__version__))
    if isinstance(func, types.BuiltinFunctionType) or type(func).__name__ in (
        "_ArrayFunctionDispatcher",
        "builtin_function_or_method",
    ):
        mod = getattr(func, "__module__", "") or ""
        return _remember(func, digest("builtin", mod, str(name), np.__version__))
    call = type(func).__dict__.get("__call__")
    if isinstance(call, types.FunctionType):
        # A callable object: its class's code plus its (tokenised) state.
        state = getattr(func, "__dict__", {})
        return digest("object", _python_code_hash(call), arg_token(dict(state)))
    msg = f"callable of type {type(func).__name__}"
    raise Unsignable(msg)


# --------------------------------------------------------------------------- keys


def base_sig(code: str, mode: str, args: str, contents: Sequence[str]) -> str:
    """Exact-input key: code identity, mode, argument token and input content digests."""
    return "b" + digest(_SIG_VERSION, "base", code, mode, args, *contents)


def dim_sig(code: str, mode: str, args: str, shapes: Sequence[Shape]) -> str:
    """Shape key: code identity, mode, argument token and input shapes."""
    return "d" + digest(_SIG_VERSION, "dim", code, mode, args, repr([tuple(s) for s in shapes]))


def gen_sig(code: str, mode: str, args: str, klass: str) -> str:
    """Generalised key: code identity, mode, argument token and shape class token."""
    return "g" + digest(_SIG_VERSION, "gen", code, mode, args, klass)


@dataclass(frozen=True, slots=True)
class ShapeClass:
    """The shape class of a call and the values of its symbols.

    ``token`` describes, for every axis of every input and output, either its literal extent
    (below ``literal_below``) or the symbol it is bound to; axes of equal extent share a
    symbol. ``values[k]`` is the extent of symbol ``k``.
    """

    token: str
    values: tuple[int, ...]
    # (side, array index, axis) of every axis bound to each symbol, in symbol order.
    bindings: tuple[tuple[tuple[str, int, int], ...], ...]


def _int_thresholds(args: Mapping[str, Any]) -> list[int]:
    out: set[int] = set()

    def walk(v: Any, depth: int = 0) -> None:
        if depth > 6:
            return
        if isinstance(v, bool):
            return
        if isinstance(v, int | np.integer):
            out.add(abs(int(v)))
        elif isinstance(v, tuple | list):
            for x in v:
                walk(x, depth + 1)
        elif isinstance(v, slice):
            for x in (v.start, v.stop, v.step):
                walk(x, depth + 1)
        elif isinstance(v, np.ndarray) and v.dtype.kind in "iu" and v.size <= 64:
            for x in v.ravel():
                walk(x, depth + 1)

    for v in args.values():
        walk(v)
    return sorted(out)


def shape_class(
    in_shapes: Sequence[Shape],
    out_shapes: Sequence[Shape],
    args: Mapping[str, Any],
    literal_below: int,
) -> ShapeClass:
    """The class of a call for :func:`gen_sig` (see :class:`ShapeClass`).

    Extents below ``literal_below`` stay literal: lineage on axes of length 1, 2 or 3 is
    structurally different (broadcasting, ``cross`` on 2- vs 3-vectors), so such calls never
    share a generalised view with longer axes. Axes of equal extent share a symbol, and every
    symbol records how many integer arguments are smaller than its extent, so ``roll(shift=10)``
    on 8 cells and on 80 cells are different classes (``shift mod D`` is not affine in ``D``).
    """
    thresholds = [t for t in _int_thresholds(args) if t >= literal_below]
    by_value: dict[int, int] = {}
    values: list[int] = []
    bindings: list[list[tuple[str, int, int]]] = []
    parts: list[str] = []
    for side, shapes in (("i", in_shapes), ("o", out_shapes)):
        arrays = []
        for idx, shape in enumerate(shapes):
            axes = []
            for ax, d in enumerate(shape):
                d = int(d)
                if d < literal_below:
                    axes.append(str(d))
                    continue
                k = by_value.get(d)
                if k is None:
                    k = by_value[d] = len(values)
                    values.append(d)
                    bindings.append([])
                bindings[k].append((side, idx, ax))
                regime = sum(1 for t in thresholds if t < d)
                axes.append(f"s{k}r{regime}")
            arrays.append("(" + ",".join(axes) + ")")
        parts.append(side + ":" + ";".join(arrays))
    return ShapeClass("|".join(parts), tuple(values), tuple(tuple(b) for b in bindings))


# --------------------------------------------------------------------------- calls

# Memoised dim signatures kept (hashing is most of a served hit).
_SIG_MEMO = 65536
_SIG_CACHE: "OrderedDict[tuple[str, str, str, tuple[Shape, ...]], str]" = OrderedDict()


def dim_sig_cached(code: str, mode: str, tok: str, shapes: Sequence[Shape]) -> str:
    """:func:`dim_sig`, memoised (hashing is most of a served hit)."""
    key = (code, mode, tok, tuple(shapes))
    sig = _SIG_CACHE.get(key)
    if sig is None:
        sig = _SIG_CACHE[key] = str(dim_sig(code, mode, tok, shapes))
        if len(_SIG_CACHE) > _SIG_MEMO:
            _SIG_CACHE.popitem(last=False)
    return sig


def shapes_of(arrays: Sequence[Any]) -> list[Shape]:
    """The shapes of ``arrays`` as tuples of ints."""
    return [tuple(int(d) for d in np.shape(a)) for a in arrays]


@dataclass
class Call:
    """What the registry needs to know about one call to key it.

    Attributes:
        op: the operation's name (for view records).
        code: its code identity (:func:`code_identity`, or a declared operation's digest).
        mode: the key mode (``"contributing"``, ``"considered"``, ``"considered-only"`` or
            ``"declared"``).
        args: the keyword arguments; ``arg_tokens`` their canonical tokens.
        in_shapes: the input shapes.
        contents: the identity of the input data for base keys (called only when a base key
            is needed); it returns None when the content is unknown.
        fast_key: the key of the registry's repeat-hit cache, when the call qualifies.
    """

    op: str
    code: str
    mode: str
    args: Mapping[str, Any]
    arg_tokens: dict[str, str]
    in_shapes: list[Shape]
    contents: Callable[[], list[str] | None]
    fast_key: Any = field(default=None, init=False)

    def token(self, drop: frozenset[str]) -> str:
        """The argument token without the (irrelevant) arguments in ``drop``."""
        return (
            "{"
            + ",".join(
                f"{k}={self.arg_tokens[k]}" for k in sorted(self.arg_tokens) if k not in drop
            )
            + "}"
        )

    @classmethod
    def of(
        cls,
        func: Callable[..., Any],
        code_version: str | None,
        mode: str,
        kwargs: Mapping[str, Any],
        inputs: Sequence[np.ndarray[Any, Any]],
    ) -> "Call":
        """The call ``func(*inputs, **kwargs)`` keyed in ``mode``.

        Raises:
            Unsignable: the function or an argument has no stable token.
        """
        code = code_identity(func, code_version)
        tokens = {str(k): arg_token(v) for k, v in kwargs.items()}
        return cls(
            op=func_name(func),
            code=code,
            mode=mode,
            args=kwargs,
            arg_tokens=tokens,
            in_shapes=shapes_of(inputs),
            contents=lambda: [content_hash(a) for a in inputs],
        )

    @classmethod
    def declared(
        cls,
        op_name: str,
        code_version: str | None,
        args: Mapping[str, Any] | None,
        in_ids: Sequence[str] | None,
        in_shapes: Sequence[Shape],
    ) -> "Call":
        """A declared operation's call (no function: its name and ``code_version`` are its
        code identity; ``in_ids``, when known, identify the input data for base keys).

        Raises:
            Unsignable: an argument has no stable token.
        """
        args = dict(args or {})
        ids = None if in_ids is None else list(in_ids)
        code = digest("declared", op_name, code_version or "")
        return cls(
            op=op_name,
            code=code,
            mode="declared",
            args=args,
            arg_tokens={str(k): arg_token(v) for k, v in args.items()},
            in_shapes=[tuple(s) for s in in_shapes],
            contents=lambda: ids,
        )

    @property
    def exact_key(self) -> str:
        """The dim signature with every argument: what a verification was made on."""
        return dim_sig_cached(self.code, self.mode, self.token(frozenset()), self.in_shapes)
