"""Type stub for the compiled ProvRC kernels (native/src/bindings.cpp)."""

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]

def sort_unique(cols: Sequence[I64], l: int) -> tuple[I64, int]: ...
def sort_runs_unique(mat: I64) -> int: ...
def repeat_into(out: I64, values: I64, counts: I64) -> None: ...
def constant_columns(cols: Sequence[I64]) -> list[bool]: ...
def compress(
    cols: Sequence[I64],
    l: int,
    relative: bool = ...,
    mirrored: bool = ...,
    progression: bool = ...,
    abort_ratio: float = ...,
    threads: int = ...,
    sample_windows: int = ...,
) -> dict[str, Any]: ...
def decompress(
    l: int,
    m: int,
    rows: int,
    out_lo: I64,
    out_hi: I64,
    in_ref: I64,
    in_q: I64,
    in_r: I64,
    in_mult: I64,
    in_lo: I64,
    in_hi: I64,
) -> tuple[I64, int]: ...

class PreparedTable:
    def __init__(
        self,
        l: int,
        m: int,
        rows: int,
        out_lo: I64,
        out_hi: I64,
        in_ref: I64,
        in_q: I64,
        in_r: I64,
        in_mult: I64,
        in_lo: I64,
        in_hi: I64,
    ) -> None: ...
    def hop(self, lo: I64, hi: I64, forward: bool) -> tuple[I64, I64]: ...

def normalize_boxes(lo: I64, hi: I64, dense: bool = ...) -> tuple[I64, I64]: ...
def boxes_to_flat(lo: I64, hi: I64, shape: Sequence[int]) -> I64: ...
def flat_to_boxes(flat: I64, shape: Sequence[int]) -> tuple[I64, I64]: ...
def fill_mask(lo: I64, hi: I64, mask: npt.NDArray[np.uint8]) -> None: ...
def run_hops(
    tables: Sequence[PreparedTable], forwards: Sequence[bool], lo: I64, hi: I64
) -> tuple[I64, I64]: ...
def subdir_mtimes(path: str) -> tuple[list[str], I64]: ...
