"""Positional lineage: integer results that name positions of tracked arrays, and indexing
with them.

``np.argwhere``, ``nonzero``, one-argument ``where``, ``flatnonzero``, ``argsort``,
``argpartition``, ``argmax``/``argmin``, ``searchsorted`` and ``unravel_index`` return integers
that *name* cells; they are no arithmetic of the cells' values, so the value rules of the
annotator (docs: `docs/concepts/capture.md`, "Positions") give them no lineage. The rule here:

* an integer naming a position carries, as *contributing*, the lineage of the cell(s) it names
  (``argwhere`` row k, both columns <- the input cell at that coordinate; ``argmax`` along an
  axis <- the lane's cell it picked; ``argsort[j]`` <- the cell sorted to place j;
  ``searchsorted`` <- the searched value and the one or two cells bounding its insertion point,
  the two comparisons that decide it in a sorted array);
* and as *considered* (``Capture(mode="considered")``) the cells compared to choose it: the
  whole lane for ``argmax``/``argmin``/``argsort``/``argpartition`` along an axis (the whole
  array without one), every tested cell for ``argwhere``/``nonzero``/``where``, the whole
  searched array for ``searchsorted`` (a binary search reads implementation-dependent cells;
  all of them is the bound that does not depend on NumPy's algorithm);
* ``astype`` of a tracked array to an integer dtype gives positions, each carrying its own
  cell's lineage (a position that went through a float64 asset comes back as one);
* indexing with such an index (``x[idx]``, ``x.take(idx)``, ``np.take_along_axis``,
  ``x[rows, cols]``) or with a ``tracked_float`` index of integral values (a position carried
  through a Dagster asset arrives as one) passes the indexed cells' lineage as contributing,
  as any fancy index does, and adds the index's whole lineage as considered.

Why an int subclass and not a tracked int dtype: the values must stay NumPy's own integers
(dtype and bits, so ``x[idx]`` indexes as NumPy does), and a second custom dtype would need
every ufunc loop again. A :class:`Positions` array is an ``int64`` ndarray (``intp``, NumPy's
index type) that keeps beside it one ``tracked_float`` array of its shape, its *lineage
carrier*: the carrier's values are the positions (exact up to 2**53) and its annotations are
the positions' lineage, built by NumPy operations on tracked arrays plus one native primitive
(``_annotator.positional``: union of the named cells' sets, and in considered mode the compared
cells' sets as considered). So nothing here loops over cells in Python, the memory is the
capture's own arena (16 bytes a position, big sets shared), and the extraction of a returned
position array is that of its carrier.

Operations on position arrays run twice: on the plain integers for the values (NumPy's result,
exactly) and on the carriers for the lineage (the annotator's rules: arithmetic unions, a pick
passes the picked cell). A NumPy operation the carriers cannot follow raises
:class:`~dslog_dagster.errors.LineageLostError`; a position array derived by an ndarray method
this module does not mirror has no carrier and raises when returned or used as an index. In
considered mode a position used as a Python integer (a slice bound) would drop its considered
lineage, so ``__index__`` raises there; in contributing mode it is control, as a Python
comparison of a tracked scalar is.

The hook points: during a capture, the native module routes ``ndarray.nonzero``, ``argmax``,
``argmin``, ``argsort``, ``argpartition``, ``searchsorted``, ``take`` and ndarray's subscript
here when a tracked array or a position array is involved (``native/src/tracked_float.cpp``,
"Positions"); everything else goes to NumPy unchanged. ``np.argwhere`` and ``np.where`` are
replaced once, at import, by wrappers that take this path for a tracked argument during a
capture and call NumPy's own function otherwise: NumPy builds ``argwhere`` by stacking
``nonzero``'s tuple, which no array hook sees, and one-argument ``where`` calls C ``nonzero``
directly.
"""

import functools
import operator
import threading
import weakref
from collections.abc import Callable
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt

from dslog_dagster.core.native import annotator as _annotator
from dslog_dagster.errors import LineageLostError

__all__ = ["Positions", "carrier_of", "is_positions"]

TRACKED: np.dtype[Any] = _annotator.dtype
_INDEX_ERROR = (
    "arrays used as indices must be of integer (or boolean) type; a tracked_float index must "
    "hold integral values"
)


def _fail(what: str, cause: BaseException | None = None) -> NoReturn:
    """Raise :class:`LineageLostError`: ``what`` cannot carry positional lineage."""
    msg = (
        f"{what}: the positional lineage cannot be followed there, so it would be lost. Use "
        "NumPy functions on the position array (indexing, arithmetic, stacking, `take`, "
        "`unravel_index`), or declare the step's lineage yourself (`lineage=` on a tracked "
        "Dagster step)."
    )
    raise LineageLostError(msg) from cause


class Positions(np.ndarray):
    """An ``intp`` array of positions with its lineage carrier (see the module docstring).

    Attributes:
        carrier: the ``tracked_float`` array of the same shape whose annotations are the
            positions' lineage, or None when an unmirrored ndarray method derived this array
            (its lineage is unknown: returning or indexing with it raises).
        scalar: NumPy would have returned a scalar here (``argmax()`` without an axis); a
            capture returns it as one.
    """

    carrier: npt.NDArray[Any] | None
    scalar: bool

    def __array_finalize__(self, obj: Any) -> None:
        self.carrier = None
        self.scalar = False

    # ---- values and lineage of every operation -------------------------------------------
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        what = f"`{ufunc.__name__}.{method}`"
        if not _annotator.active():  # after the capture: plain integers
            return getattr(ufunc, method)(*_plain(inputs), **_plain(kwargs))
        if method not in ("__call__", "reduce", "accumulate"):
            _fail(f"{what} on a position array")
        out = kwargs.pop("out", None)
        if out is None:
            plain = getattr(ufunc, method)(*_plain(inputs), **kwargs)
            return _wrap(plain, getattr(ufunc, method)(*_carriers(inputs, what), **kwargs), what)
        outs = out if isinstance(out, tuple) else (out,)
        if not all(isinstance(o, Positions) for o in outs) or len(outs) != 1:
            _fail(f"{what} with `out=` other than one position array")
        (target,) = outs
        plain = getattr(ufunc, method)(*_plain(inputs), **kwargs)
        lin = getattr(ufunc, method)(*_carriers(inputs, what), **kwargs)
        result = _wrap(plain, lin, what)
        if not isinstance(result, Positions) or result.shape != target.shape:
            _fail(f"{what} with `out=` a position array")
        np.asarray(target).view(np.ndarray)[...] = np.asarray(result).view(np.ndarray)
        target.carrier = result.carrier
        return target

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        name = f"`np.{getattr(func, '__name__', func)}`"
        if not _annotator.active():  # after the capture: plain integers
            return func(*_plain(args), **_plain(kwargs))
        method = _METHODS.get(func)
        if method is not None and args and isinstance(args[0], Positions):
            return getattr(args[0], method)(*args[1:], **kwargs)
        at = _INDEX_ARG.get(func)
        if at is not None and len(args) > at:  # positions used as an index, not as data
            data = [a for i, a in enumerate(args) if i != at]
            if not any(isinstance(a, Positions) for a in data):
                return func._implementation(  # noqa: SLF001 (NumPy's undispatched function)
                    *args, **kwargs
                )  # the hooked subscript does it
            plain = func(*_plain(args), **_plain(kwargs))
            lin_args = [a if i == at else _carriers(a, name) for i, a in enumerate(args)]
            return _wrap(
                plain,
                func._implementation(  # noqa: SLF001 (NumPy's undispatched function)
                    *lin_args, **kwargs
                ),
                name,
            )
        if func is np.unravel_index:
            return _unravel(*args, **kwargs)
        if func is np.ravel_multi_index:
            return _ravel_multi(*args, **kwargs)
        plain = func(*_plain(args), **_plain(kwargs))
        try:
            lineage = func(*_carriers(args, name), **_carriers(kwargs, name))
        except LineageLostError:
            raise
        except (TypeError, ValueError) as e:
            _fail(f"{name} on a position array ({e})", e)
        return _wrap(plain, lineage, name)

    def __getitem__(self, key: Any) -> Any:
        plain = np.asarray(self).view(np.ndarray)[_plain(key)]
        if not _annotator.active():
            return plain
        if self.carrier is None:
            _fail("Indexing a position array of unknown lineage")
        lineage = self.carrier[key]
        return _wrap(plain, lineage, "indexing")

    def __iter__(self) -> Any:
        if self.ndim == 0:
            msg = "iteration over a 0-d array"
            raise TypeError(msg)
        return (self[i] for i in range(len(self)))

    def __index__(self) -> int:
        # A Python integer is control, as a Python comparison of a tracked scalar is.
        return operator.index(np.asarray(self).view(np.ndarray)[()])

    __int__ = __index__

    def __repr__(self) -> str:
        return f"Positions({np.asarray(self).view(np.ndarray)!r})"

    def tolist(self) -> Any:
        """NumPy's ``tolist`` of the integers (Python integers are control)."""
        return np.asarray(self).view(np.ndarray).tolist()

    # ---- ndarray methods mirrored on the carrier -------------------------------------------
    def _mirror(self, name: str, *args: Any, **kwargs: Any) -> Any:
        plain = getattr(np.asarray(self), name)(*_plain(args), **_plain(kwargs))
        if self.carrier is None:
            _fail(f"`{name}` of a position array of unknown lineage")
        lineage = getattr(self.carrier, name)(*_carriers(args, name), **_carriers(kwargs, name))
        return _wrap(plain, lineage, f"`{name}`")

    def reshape(self, *a: Any, **k: Any) -> Any:
        return self._mirror("reshape", *a, **k)

    def ravel(self, *a: Any, **k: Any) -> Any:
        return self._mirror("ravel", *a, **k)

    def flatten(self, *a: Any, **k: Any) -> Any:
        return self._mirror("flatten", *a, **k)

    def copy(self, *a: Any, **k: Any) -> Any:
        return self._mirror("copy", *a, **k)

    def transpose(self, *a: Any) -> Any:
        return self._mirror("transpose", *a)

    @property
    def T(self) -> Any:
        return self._mirror("transpose")

    def squeeze(self, *a: Any, **k: Any) -> Any:
        return self._mirror("squeeze", *a, **k)

    def swapaxes(self, *a: Any, **k: Any) -> Any:
        return self._mirror("swapaxes", *a, **k)

    def astype(self, dtype: Any, *a: Any, **k: Any) -> Any:
        if not np.issubdtype(np.dtype(dtype), np.integer):
            _fail(f"`astype({np.dtype(dtype)})` of a position array")
        if np.dtype(dtype) != self.dtype:
            _fail(f"`astype({np.dtype(dtype)})` of a position array (keep `intp`)")
        return self._mirror("copy")

    def take(self, *a: Any, **k: Any) -> Any:
        return _take(self, *a, **k)

    def argmax(self, *a: Any, **k: Any) -> Any:
        return _arg_pick(self, "argmax", *a, **k)

    def argmin(self, *a: Any, **k: Any) -> Any:
        return _arg_pick(self, "argmin", *a, **k)

    def argsort(self, *a: Any, **k: Any) -> Any:
        return _arrange(self, "argsort", *a, **k)

    def nonzero(self) -> Any:
        return _nonzero(self)

    def searchsorted(self, *a: Any, **k: Any) -> Any:
        return _searchsorted(self, *a, **k)


def is_positions(x: Any) -> bool:
    """Whether ``x`` is a position array (:class:`Positions`)."""
    return isinstance(x, Positions)


def carrier_of(p: Positions, what: str) -> npt.NDArray[Any]:
    """The lineage carrier of ``p``.

    Raises:
        LineageLostError: ``p`` was derived by an operation whose lineage is unknown.
    """
    if p.carrier is None:
        _fail(f"{what}: a position array derived by an unmirrored ndarray method")
    return p.carrier


# ---- comparison masks ---------------------------------------------------------------------------
_LOCAL = threading.local()


def _masks() -> dict[int, list[Any]]:
    """This thread's comparison masks: id -> [weakref to the mask, operands, source or None,
    the mask's bits when the comparison returned it]."""
    table: dict[int, list[Any]] | None = getattr(_LOCAL, "masks", None)
    if table is None:
        table = _LOCAL.masks = {}
    return table


def _register_mask(mask: Any, operands: tuple[Any, ...]) -> None:
    """Remember the operands of a comparison of tracked arrays (the native hook calls this);
    the entry goes when the mask does."""
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
        return
    table = _masks()
    key = id(mask)

    # The bits are kept to tell the mask from what it may become in place: NumPy writes
    # `m1 & m2` into a large temporary `m1` (temporary elision), and `m &= ...` does too.
    def forget(_: object, k: int = key, t: dict[int, list[Any]] = table) -> None:
        t.pop(k, None)

    ref = weakref.ref(mask, forget)
    table[key] = [ref, operands, None, mask.copy()]


def mask_source(mask: Any) -> npt.NDArray[Any] | None:
    """The tracked array whose cells carry the lineage of a comparison's mask (the union of
    the compared cells' sets, values 0/1), or None if ``mask`` is no comparison's result of
    tracked arrays in this capture."""
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or isinstance(mask, Positions):
        return None
    entry = _masks().get(id(mask))
    if entry is None or entry[0]() is not mask or not _annotator.active():
        return None
    if mask.shape != entry[3].shape or not np.array_equal(mask, entry[3]):
        return None  # changed in place since the comparison: no longer its result
    if entry[2] is None:
        lins = [
            carrier_of(o, "a comparison") if isinstance(o, Positions) else o
            for o in entry[1]
            if _is_tracked(o) or isinstance(o, Positions)
        ]
        shape = mask.shape
        wins = [_c(np.broadcast_to(lin, shape)) for lin in lins]
        entry[2] = _annotator.positional(wins, None, mask.astype(np.float64))
    out: npt.NDArray[Any] = entry[2]
    return out


# ---- substitution --------------------------------------------------------------------------
def _plain(obj: Any) -> Any:
    """``obj`` with position arrays as plain ``intp`` arrays and tracked indices as ints."""
    if isinstance(obj, Positions):
        return np.asarray(obj).view(np.ndarray)
    if isinstance(obj, tuple):
        return tuple(_plain(o) for o in obj)
    if isinstance(obj, list):
        return [_plain(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


def _carriers(obj: Any, what: str) -> Any:
    """``obj`` with position arrays replaced by their lineage carriers."""
    if isinstance(obj, Positions):
        return carrier_of(obj, what)
    if isinstance(obj, tuple):
        return tuple(_carriers(o, what) for o in obj)
    if isinstance(obj, list):
        return [_carriers(o, what) for o in obj]
    if isinstance(obj, dict):
        return {k: _carriers(v, what) for k, v in obj.items()}
    return obj


def _c(a: Any) -> npt.NDArray[Any]:
    """``a`` as a C-contiguous array, 0-d kept (``np.ascontiguousarray`` makes it 1-d)."""
    return np.asarray(a, order="C")


def _is_tracked(x: Any) -> bool:
    return isinstance(x, np.ndarray) and x.dtype == TRACKED


def _wrap(plain: Any, lineage: Any, what: str) -> Any:
    """NumPy's result ``plain`` with the lineage of the same operation on the carriers."""
    if isinstance(plain, tuple):
        if not isinstance(lineage, tuple) or len(lineage) != len(plain):
            _fail(f"{what} on a position array")
        return tuple(_wrap(p, q, what) for p, q in zip(plain, lineage, strict=True))
    arr = np.asarray(plain)
    if arr.dtype == np.bool_:  # comparisons are control (docs, "Rules")
        return plain
    if isinstance(lineage, Positions):  # the carrier run produced positions of the carriers
        lineage = carrier_of(lineage, what)
    if not isinstance(lineage, np.ndarray | np.generic):
        return plain  # metadata (`np.shape`, `np.ndim`): no cell values
    lin = np.asarray(lineage)
    if lin.dtype != TRACKED:
        _fail(f"{what} on a position array")
    if lin.shape != arr.shape:
        _fail(f"{what} on a position array (lineage of shape {lin.shape}, not {arr.shape})")
    if np.issubdtype(arr.dtype, np.integer):
        return _positions(arr, [lin], None, scalar=not isinstance(plain, np.ndarray))
    if np.issubdtype(arr.dtype, np.floating) and arr.dtype.itemsize <= 8:
        out = _annotator.positional([_c(lin)], None, arr.astype(np.float64))
        return out if isinstance(plain, np.ndarray) else out[()]
    _fail(f"{what} gave dtype `{arr.dtype}`")


def _positions(
    values: npt.NDArray[Any],
    wins: list[npt.NDArray[Any]],
    lose: npt.NDArray[Any] | None,
    *,
    scalar: bool = False,
) -> Positions:
    """A position array of ``values`` (NumPy's integers, kept as they are) whose lineage is
    the union of ``wins`` (contributing) plus, in considered mode, ``lose`` (considered)."""
    vals = np.asarray(values)
    shape = vals.shape
    carrier = _annotator.positional(
        [_c(np.broadcast_to(w, shape)) for w in wins],
        None if lose is None else _c(np.broadcast_to(lose, shape)),
        vals.astype(np.float64),
    )
    out = vals.view(Positions)
    out.carrier = carrier
    out.scalar = scalar
    return out


# ---- the position-producing functions -------------------------------------------------------
def _source(x: Any, what: str) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """(plain values, tracked lineage source) of a tracked or position array."""
    if isinstance(x, Positions):
        return np.asarray(x).view(np.ndarray), carrier_of(x, what)
    if not _is_tracked(x):
        src = mask_source(x)
        if src is None:
            _fail(f"`{what}` of a bool array that is no comparison's result")
        return np.asarray(x), src
    return _annotator.values(x), x


def _lane_all(src: npt.NDArray[Any], axis: int | None) -> npt.NDArray[Any] | None:
    """In considered mode, a tracked array whose every cell considers the whole lane along
    ``axis`` (the whole array for None), keeping dims; None in contributing mode or when
    there is no cell to consider."""
    if not _annotator.considered() or src.size == 0:
        return None
    if src.ndim == 0:
        return src
    out: npt.NDArray[Any] = np.max(src, axis=axis, keepdims=True)  # considered: the lane
    return out


def _whole(src: npt.NDArray[Any]) -> npt.NDArray[Any] | None:
    """:func:`_lane_all` of the whole array, as a 0-d array (broadcasts to any shape)."""
    lose = _lane_all(src, None)
    return None if lose is None else lose.reshape(())


def _nonzero(x: Any) -> tuple[Positions, ...]:
    vals, src = _source(x, "nonzero")
    plain = _ORIG["nonzero"](vals)  # NumPy refuses 0-d itself
    named = src[plain]
    return tuple(_positions(p, [named], _whole(src)) for p in plain)


def argwhere(a: Any) -> Any:
    """``np.argwhere`` with positional lineage during a capture (NumPy's own otherwise)."""
    if not (_annotator.active() and _names_positions(a)):
        return _NP_ARGWHERE(a)
    if np.ndim(a) == 0:  # NumPy's own way: argwhere of the 1-d array, no columns
        base: Any = a if _is_tracked(a) or is_positions(a) else mask_source(a)
        return argwhere(np.reshape(base, (1,)))[:, :0]
    return np.stack(_nonzero(a), axis=1)  # NumPy's transpose(nonzero(a)), k x ndim


def _names_positions(a: Any) -> bool:
    """A tracked array, a position array, or a comparison's mask of tracked arrays."""
    return _is_tracked(a) or isinstance(a, Positions) or mask_source(a) is not None


def where(condition: Any, *xy: Any) -> Any:
    """``np.where``; the one-argument form of a tracked condition gives position arrays."""
    if xy or not (_annotator.active() and _names_positions(condition)):
        return _NP_WHERE(condition, *xy)
    return _nonzero(condition)


def _axis(args: tuple[Any, ...], kwargs: dict[str, Any], at: int, default: Any) -> Any:
    return kwargs["axis"] if "axis" in kwargs else (args[at] if len(args) > at else default)


def _arg_pick(x: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """argmax / argmin (axis=None, out=None, *, keepdims=False)."""
    if kwargs.get("out") is not None or (len(args) > 1 and args[1] is not None):
        _fail(f"`{name}` with `out=`")
    vals, src = _source(x, name)
    plain = _ORIG[name](vals, *args, **kwargs)
    axis = _axis(args, kwargs, 0, None)
    keep = bool(kwargs.get("keepdims", False))
    idx = np.asarray(plain)
    if axis is None:
        named = src.reshape(-1)[idx.reshape(())] if src.ndim else src
        out_lose = _whole(src)
        if keep:
            named = np.reshape(named, idx.shape)
            out_lose = None if out_lose is None else np.reshape(out_lose, idx.shape)
        return _positions(idx, [named], out_lose, scalar=not isinstance(plain, np.ndarray))
    ax = int(axis) % src.ndim
    along = idx if keep else np.expand_dims(idx, ax)
    named = np.take_along_axis(src, along, axis=ax)
    lose = _lane_all(src, ax)
    if not keep:
        named = np.squeeze(named, axis=ax)
        lose = None if lose is None else np.squeeze(lose, axis=ax)
    return _positions(idx, [named], lose, scalar=not isinstance(plain, np.ndarray))


def _arrange(x: Any, name: str, *args: Any, **kwargs: Any) -> Positions:
    """argsort (axis=-1, kind, order) / argpartition (kth, axis=-1, kind, order)."""
    vals, src = _source(x, name)
    plain = np.asarray(_ORIG[name](vals, *_plain(args), **_plain(kwargs)))
    axis = _axis(args, kwargs, 1 if name == "argpartition" else 0, -1)
    if axis is None:
        flat = src.reshape(-1)
        return _positions(plain, [flat[plain]], _whole(src))
    ax = int(axis) % max(src.ndim, 1)
    named = np.take_along_axis(src, plain, axis=ax)
    return _positions(plain, [named], _lane_all(src, ax))


def _searchsorted(a: Any, v: Any, side: str = "left", sorter: Any = None) -> Any:
    """``a.searchsorted(v, side, sorter)``: contributing <- v and the cells bounding the
    insertion point; considered <- all of ``a`` (and v)."""
    vals, src = _source(a, "searchsorted") if _is_tracked(a) or is_positions(a) else (a, None)
    v_plain = _annotator.values(v) if _is_tracked(v) else _plain(v)
    s_plain = _plain(sorter)
    plain = _ORIG["searchsorted"](np.asarray(vals), v_plain, side=side, sorter=s_plain)
    idx = np.asarray(plain)
    wins: list[npt.NDArray[Any]] = []
    lose = None
    if src is not None and src.size:
        ordered = src if sorter is None else src[s_plain]
        n = src.shape[0]
        wins += [ordered[np.clip(idx - 1, 0, n - 1)], ordered[np.clip(idx, 0, n - 1)]]
        lose = _whole(src)
    if is_positions(sorter):
        wins.append(carrier_of(sorter, "searchsorted")[np.clip(idx, 0, len(sorter) - 1)])
    if _is_tracked(v) or is_positions(v):
        wins.append(v if _is_tracked(v) else carrier_of(v, "searchsorted"))
    if not wins:
        return plain
    if lose is None and not any(_is_tracked(w) for w in wins):
        return plain
    return _positions(idx, wins, lose, scalar=not isinstance(plain, np.ndarray))


def _unravel(indices: Any, shape: Any, order: Any = "C") -> tuple[Positions, ...]:
    plain = np.unravel_index(_plain(indices), shape, order=order)
    lin = carrier_of(indices, "unravel_index")
    return tuple(_positions(p, [lin], None, scalar=np.ndim(p) == 0) for p in plain)


def _ravel_multi(multi_index: Any, dims: Any, *args: Any, **kwargs: Any) -> Any:
    plain = np.ravel_multi_index(_plain(multi_index), dims, *args, **kwargs)
    wins = [carrier_of(m, "ravel_multi_index") for m in multi_index if is_positions(m)]
    return _positions(np.asarray(plain), wins, None, scalar=np.ndim(plain) == 0)


# ---- indexing with positions ------------------------------------------------------------------
def _index_part(part: Any) -> tuple[Any, npt.NDArray[Any] | None]:
    """(plain key part, its lineage or None) of one part of an index."""
    if isinstance(part, Positions):
        return np.asarray(part).view(np.ndarray), carrier_of(part, "indexing")
    if _is_tracked(part):
        vals = _annotator.values(part)
        if not np.all(np.isfinite(vals)) or not np.array_equal(vals, np.trunc(vals)):
            raise IndexError(_INDEX_ERROR)
        return vals.astype(np.intp), part
    return part, None


def _index_lineage(key: Any, out_shape: tuple[int, ...]) -> tuple[Any, npt.NDArray[Any] | None]:
    """(plain key, the index's lineage broadcast to the result's shape or None)."""
    parts = key if isinstance(key, tuple) else (key,)
    plain_parts, lins = [], []
    for p in parts:
        q, lin = _index_part(p)
        plain_parts.append(q)
        lins.append(lin)
    plain_key = tuple(plain_parts) if isinstance(key, tuple) else plain_parts[0]
    if not any(lin is not None for lin in lins) or not _annotator.considered():
        return plain_key, None
    # Where NumPy puts the broadcast dims of the advanced indices: in place when they are
    # adjacent, else first. Ellipsis/None/slices/ints before them shift "in place".
    adv = [
        i
        for i, q in enumerate(plain_parts)
        if isinstance(q, np.ndarray | list) or (lins[i] is not None)
    ]
    if any(q is Ellipsis or q is None for q in plain_parts) or any(
        isinstance(q, np.ndarray) and q.dtype == np.bool_ for q in plain_parts
    ):
        _fail(
            "Indexing with a tracked index together with `...`, `None` or a boolean mask in "
            'mode="considered"'
        )
    ints = [i for i, q in enumerate(plain_parts) if isinstance(q, int | np.integer)]
    adv_all = sorted(set(adv) | set(ints))
    bshape = np.broadcast_shapes(*(np.shape(plain_parts[i]) for i in adv_all))
    adjacent = adv_all == list(range(adv_all[0], adv_all[-1] + 1))
    lead = sum(1 for i in range(adv_all[0]) if isinstance(plain_parts[i], slice)) if adjacent else 0
    union = _union([np.broadcast_to(lin, bshape) for lin in lins if lin is not None], bshape)
    expand = (1,) * lead + bshape + (1,) * (len(out_shape) - lead - len(bshape))
    return plain_key, np.broadcast_to(union.reshape(expand), out_shape)


def _union(arrays: list[npt.NDArray[Any]], shape: tuple[int, ...]) -> npt.NDArray[Any]:
    """One tracked array whose cells carry the union of ``arrays``' sets, as contributing."""
    return _annotator.positional([_c(a) for a in arrays], None, np.zeros(shape, dtype=np.float64))


def _consider(res: Any, index_lin: npt.NDArray[Any] | None) -> Any:
    """``res`` with ``index_lin``'s sets added to its cells' considered sets."""
    if index_lin is None:
        return res
    arr = np.asarray(res)
    win = arr if arr.dtype == TRACKED else np.zeros(arr.shape, TRACKED)
    vals = _annotator.values(arr) if arr.dtype == TRACKED else arr.astype(np.float64)
    lose = _c(index_lin)
    out = _annotator.positional([_c(win)], lose, vals)
    return out if isinstance(res, np.ndarray) else out[()]


def _getitem(x: npt.NDArray[Any], key: Any) -> Any:
    res = _NP_GETITEM(x, _index_part_key(key))
    if not _annotator.considered():
        return res  # an index's lineage is considered only
    parts = key if isinstance(key, tuple) else (key,)
    if any(mask_source(p) is not None for p in parts):
        if x.dtype != TRACKED:
            return res  # constants picked by a mask stay constants (the mask is control)
        # x[mask] is x[mask.nonzero()]: the positions of the true cells, as argwhere's
        expanded: list[Any] = []
        for p in parts:
            expanded += list(_nonzero(p)) if mask_source(p) is not None else [p]
        key = tuple(expanded)
    _, lin = _index_lineage(key, np.shape(res))
    return _consider(res, lin)


def _index_part_key(key: Any) -> Any:
    if isinstance(key, tuple):
        return tuple(_index_part(p)[0] for p in key)
    return _index_part(key)[0]


def _setitem(x: npt.NDArray[Any], key: Any, value: Any) -> None:
    if is_positions(value):  # the positions' lineage goes with their values
        if x.dtype != TRACKED:
            _fail("Assigning positions into a plain array")
        value = _wrap(np.asarray(value).view(np.ndarray).astype(np.float64), value.carrier, "=")
    plain_key = _index_part_key(key)
    _NP_SETITEM(x, plain_key, value)
    parts = key if isinstance(key, tuple) else (key,)
    if not (_annotator.considered() and x.dtype == TRACKED):
        return
    if any(_is_tracked(p) or is_positions(p) for p in parts):
        # the assigned cells (as stored: the last write of a repeated index wins) also
        # consider the index that placed them
        placed = _NP_GETITEM(x, plain_key)
        _, lin = _index_lineage(key, np.shape(placed))
        _NP_SETITEM(x, plain_key, _consider(placed, lin))


def _take(a: Any, indices: Any, axis: Any = None, out: Any = None, mode: str = "raise") -> Any:
    if out is not None:
        _fail("`take` with `out=`")
    src = carrier_of(a, "take") if is_positions(a) else a
    plain_a = np.asarray(a).view(np.ndarray) if is_positions(a) else a
    plain_idx, lin = _index_part(indices)
    res_vals = _ORIG["take"](
        _annotator.values(plain_a) if _is_tracked(plain_a) else plain_a,
        plain_idx,
        axis=axis,
        mode=mode,
    )
    res = _ORIG["take"](src, plain_idx, axis=axis, mode=mode) if _is_tracked(src) else res_vals
    if lin is not None and _annotator.considered():
        bshape = np.shape(plain_idx)
        ax = None if axis is None else int(axis) % max(np.ndim(a), 1)
        lead = 0 if ax is None else ax
        out_shape = np.shape(res_vals)
        expand = (1,) * lead + bshape + (1,) * (len(out_shape) - lead - len(bshape))
        res = _consider(res, np.broadcast_to(_union([lin], bshape).reshape(expand), out_shape))
    if is_positions(a):
        return _wrap(res_vals, res, "`take`")
    return res


def _astype(x: npt.NDArray[Any], dtype: Any, *args: Any, **kwargs: Any) -> Any:
    """``astype`` of a tracked array: to an integer dtype it gives positions (a position
    that went through a float64 asset comes back as one), each carrying its own cell's
    lineage; any other dtype is NumPy's own (which refuses the lineage-dropping casts)."""
    dt = np.dtype(dtype)
    if not np.issubdtype(dt, np.integer):
        return _ORIG["astype"](x, dtype, *args, **kwargs)
    plain = _annotator.values(x).astype(dt, *args, **kwargs)
    return _positions(plain, [x], None)


# ---- the hook the native module calls ---------------------------------------------------------
def _hook(name: str, self: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
    kw = kwargs or {}
    if name == "__getitem__":
        return _getitem(self, args[0])
    if name == "__setitem__":
        return _setitem(self, args[0], args[1])
    if name == "compare":
        return _register_mask(self, args)
    if name == "nonzero":
        if not (_is_tracked(self) or mask_source(self) is not None):
            return _ORIG["nonzero"](self)  # a bool array no comparison of ours made
        return _nonzero(self)
    if name in ("argmax", "argmin"):
        return _arg_pick(self, name, *args, **kw)
    if name in ("argsort", "argpartition"):
        return _arrange(self, name, *args, **kw)
    if name == "searchsorted":
        return _searchsorted(self, *args, **kw)
    if name == "take":
        return _take(self, *args, **kw)
    if name == "astype":
        return _astype(self, *args, **kw)
    msg = f"positions hook: unknown method {name!r}"
    raise AssertionError(msg)


_ORIG: dict[str, Callable[..., Any]] = {
    n: _annotator.original_method(n)
    for n in (
        "nonzero",
        "argmax",
        "argmin",
        "searchsorted",
        "take",
        "astype",
        "argsort",
        "argpartition",
    )
}
#: NumPy functions that call the method of the same name on their first argument.
_METHODS: dict[Any, str] = {
    np.argsort: "argsort",
    np.argmax: "argmax",
    np.argmin: "argmin",
    np.nonzero: "nonzero",
    np.searchsorted: "searchsorted",
    np.take: "take",
}
#: NumPy functions whose argument at this place is an index (the others are data).
_INDEX_ARG: dict[Any, int] = {np.take_along_axis: 1}
_NP_GETITEM: Callable[[Any, Any], Any] = np.ndarray.__getitem__
_NP_SETITEM: Callable[[Any, Any, Any], None] = np.ndarray.__setitem__
_NP_ARGWHERE: Callable[..., Any] = np.argwhere
_NP_WHERE: Callable[..., Any] = np.where


def _install() -> None:
    """Install the native hook and the ``np.argwhere`` / ``np.where`` wrappers, once."""
    _annotator.set_position_hook(_hook, Positions)
    if getattr(np.argwhere, "__wrapped__", None) is not _NP_ARGWHERE:
        np.argwhere = functools.wraps(_NP_ARGWHERE)(argwhere)
    if getattr(np.where, "__wrapped__", None) is not _NP_WHERE:
        np.where = functools.wraps(_NP_WHERE)(where)


_install()
