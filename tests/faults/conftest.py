"""The ``fault`` fixture of tests/faults: each file-system fault of :mod:`fsfaults` (a full
disk, a read-only file system, a read-only folder) in each form (real when permitted, and
injected)."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from fsfaults import Fault, full_disk, read_only_dir, read_only_fs

FAULTS = {"full_disk": full_disk, "read_only_fs": read_only_fs, "read_only_dir": read_only_dir}


@pytest.fixture(params=[(k, f) for k in FAULTS for f in ("real", "injected")], ids="-".join)
def fault(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, Fault]]:
    """Each fault in each form: ``(kind, fault)``."""
    kind, form = request.param
    with FAULTS[kind](form, request, tmp_path, monkeypatch) as f:
        yield kind, f
