"""The native listing of array directories equals ``os.scandir`` + ``lstat``."""

import os
from pathlib import Path

import pytest

from dslog_dagster.core.native import kernels


def _reference(path: Path) -> dict[str, int]:
    return {
        d.name: d.stat(follow_symlinks=False).st_mtime_ns
        for d in os.scandir(path)
        if not d.name.startswith(".") and d.is_dir(follow_symlinks=False)
    }


@pytest.mark.parametrize("n", [0, 3, 9000])  # 9000: the stat calls split over threads
def test_subdir_mtimes_equal_scandir(tmp_path: Path, n: int) -> None:
    for i in range(n):
        (tmp_path / f"a{i}").mkdir()
    (tmp_path / "file").write_text("x")  # a file: not listed
    (tmp_path / ".staging").mkdir()  # a dot directory: not listed
    (tmp_path / "link").symlink_to(tmp_path / ".staging")  # a link to a directory: not listed
    odd = os.fsencode(tmp_path) + b"/caf\xe9"  # not UTF-8: named as os.scandir names it
    os.mkdir(odd)
    os.utime(odd, ns=(1, 123_456_789_012_345_678))
    names, times = kernels.subdir_mtimes(os.fspath(tmp_path))
    got = dict(zip(names, times.tolist(), strict=True))
    assert got == _reference(tmp_path)
    assert got[os.fsdecode(b"caf\xe9")] == 123_456_789_012_345_678
    assert len(got) == n + 1


def test_subdir_mtimes_raise_what_scandir_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        kernels.subdir_mtimes(os.fspath(tmp_path / "missing"))
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError):
        kernels.subdir_mtimes(os.fspath(tmp_path / "f"))
