"""Fixtures shared by the unit tests."""

import os

import pytest


@pytest.fixture
def fsync_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The file descriptors ``os.fsync`` is called with from now on (calls still flush)."""
    synced: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return synced
