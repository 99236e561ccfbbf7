"""Epochs never alias: a tracked array kept from any earlier capture is refused, however many
captures came between, and the counter refuses captures rather than wrap.

The epoch (which capture issued a handle) had 13 bits and wrapped after 8,191 captures, so a
kept tracked array was then accepted with wrong lineage. It now has 19 bits
(``_annotator.handle_layout``; the widths are justified in ``native/include/dslog/
annotations.hpp``), epochs are issued once per process, and exhaustion is a CaptureError.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dslog_dagster import _annotator
from dslog_dagster.core import Capture, capture
from dslog_dagster.errors import CaptureError, StaleLineageError

LAYOUT = _annotator.handle_layout


def test_layout_leaves_nineteen_bits_to_the_epoch() -> None:
    assert LAYOUT["payload_bits"] == 34
    assert LAYOUT["est_shift"] == 34
    assert LAYOUT["kind_shift"] == 42
    assert LAYOUT["epoch_shift"] == 45
    assert LAYOUT["max_epoch"] == (1 << 19) - 1


def test_kept_array_is_refused_across_more_than_two_to_the_fourteen_captures() -> None:
    """2^14 + 5 real captures in this process (the 13-bit counter wrapped twice on the way):
    after every one, a tracked array kept from the first capture is refused, and each
    epoch is issued once."""
    kept: list[np.ndarray] = []
    x = np.arange(4.0)

    def keep(a: np.ndarray) -> np.ndarray:
        kept.append(a)
        return a + 1.0

    capture(keep, x)
    first = _annotator.last_epoch()
    old = kept[0]
    uses_old = Capture().run
    # the captures in between only have to issue their epochs: the cheapest real capture is
    # of one cell annotated from the start (a deferred one costs ~4x as much)
    between, cell = Capture(defer=False).run, np.zeros(1)
    n = (1 << 14) + 5
    refused = 0
    for k in range(n):
        if k % 1024 == 0 or k >= n - 3 or (k + first) % 8191 in (0, 1):
            # At the captures whose epoch the old 13-bit counter would have reissued to
            # `old`, and regularly in between: the kept array is refused.
            with pytest.raises(StaleLineageError):
                uses_old(lambda a: a + old, x)
            refused += 1
        else:
            between(np.negative, cell)
    assert _annotator.last_epoch() == first + n
    assert refused >= 18
    # The same kept array, the last word: its lineage is never read.
    with pytest.raises(StaleLineageError):
        capture(lambda a: np.concatenate([a, old]), x)


def test_exhausted_counter_refuses_captures_instead_of_wrapping() -> None:
    """Run in a child process: a process whose counter is exhausted can never capture again,
    which is the point."""
    code = textwrap.dedent(
        """
        import numpy as np
        from dslog_dagster import _annotator
        from dslog_dagster.core import capture
        from dslog_dagster.errors import CaptureError, StaleLineageError

        kept = []
        capture(lambda a: kept.append(a) or a * 2.0, np.ones(3))
        top = _annotator.handle_layout["max_epoch"]
        _annotator._skip_epochs(top - 2)
        assert capture(np.negative, np.ones(3)).relation().n == 3  # epoch top - 1
        try:
            capture(lambda a: a + kept[0], np.ones(3))  # epoch top, the last one
        except StaleLineageError:
            pass
        else:
            raise SystemExit("a stale array was accepted at the last epoch")
        assert _annotator.last_epoch() == top
        for _ in range(3):
            try:
                capture(np.negative, np.ones(3))
            except CaptureError as e:
                assert "new process" in str(e), e
                assert not _annotator.active()
            else:
                raise SystemExit("a capture started after the last epoch")
        try:
            _annotator._skip_epochs(1)
        except ValueError:
            pass
        else:
            raise SystemExit("the epoch counter went back")
        print("refused")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "refused"


def test_skip_epochs_is_forward_only() -> None:
    capture(np.negative, np.ones(1))  # an epoch to go back from, whatever ran before
    last = _annotator.last_epoch()
    with pytest.raises(ValueError, match="forward"):
        _annotator._skip_epochs(last - 1)
    with pytest.raises(ValueError, match="forward"):
        _annotator._skip_epochs(LAYOUT["max_epoch"] + 1)
    assert issubclass(StaleLineageError, CaptureError)
