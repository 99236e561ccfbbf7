"""The lean ``dslog/*`` metadata: at most five entries, figures with units, no machine paths."""

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dslog_dagster.io_managers import metadata as m


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0 B"), (96, "96 B"), (999, "999 B"), (1234, "1.2 kB"), (4_200_000, "4.2 MB"),
     (19_456_000, "19 MB"), (3.1e9, "3.1 GB")],
)  # fmt: skip
def test_bytes_have_units(n: float, text: str) -> None:
    assert m.format_bytes(n) == text


@pytest.mark.parametrize(
    ("r", "text"), [(50210.408602150535, "50,210×"), (57.4, "57×"), (3.44, "3.4×")]
)
def test_ratio_is_a_readable_multiple(r: float, text: str) -> None:
    assert m.format_ratio(r) == text


@given(st.floats(min_value=1e-6, max_value=1e6))
def test_seconds_have_two_significant_digits(s: float) -> None:
    text = m.format_seconds(s)
    assert text.endswith(" s")
    digits = text[:-2].replace(",", "").replace(".", "").lstrip("0")
    value = float(text[:-2].replace(",", ""))
    assert len(digits.rstrip("0")) <= 2  # no 15-decimal floats
    assert math.isclose(value, s, rel_tol=0.05 + 1e-9)


def _recorded(**kw: object) -> m.LineageMetadata:
    base = dict(
        obtained="captured",
        policy="capture",
        mode="contributing",
        array="smoothed",
        version="run-1",
        op_id="abc",
        op_name="smoothed@1",
        store="/srv/data/.dslog",
        base_dir="/srv/data",
        inputs={"calibrated": {"array": "calibrated", "version": "run-1"}},
        raw_rows=586_756,
        raw_bytes=586_756 * 4 * 8,
        stored_rows=9,
        stored_bytes=98,
        capture_s=0.2912,
        write_s=0.10456,
        step_s=0.4142280369999298,
        lineage_md="![p](data:image/png;base64,AAAA)",
        signature="d76af0f9032a5901ffff",
    )
    base.update(kw)
    return m.LineageMetadata(**base)  # type: ignore[arg-type]


def test_a_recorded_output_has_at_most_five_entries_with_formatted_figures() -> None:
    md = _recorded().to_metadata()
    assert set(md) == {m.OBTAINED, m.OP_ID, m.RECORD, m.LINEAGE}  # + dslog/shape: five
    record = md[m.RECORD].value
    figures = m.record_figures(record)
    assert figures == {
        "policy, mode": "`capture`, `contributing`",
        "lineage pairs": "586,756 (19 MB as int64 columns)",
        "stored": "9 rows, 98 B, ratio 191,594×",
        "seconds": "capture 0.29 s, write 0.10 s, 96% of the step",
        "reuse signature": "`d76af0f9032a5901`",
        "store": "`.dslog`",
    }
    assert "/srv" not in record  # no machine path
    assert not re.search(r"\d\.\d{6,}", record)  # no long floats


def test_flagged_outputs_say_so_in_obtained_and_record() -> None:
    md = _recorded(flagged=True, flag_reason="`np.argwhere` returned int64").to_metadata()
    assert md[m.OBTAINED].value == m.ALL_TO_ALL
    assert "**Flagged**" in md[m.RECORD].value
    assert "`np.argwhere` returned int64" in md[m.RECORD].value


def test_store_outside_the_value_directory_shows_its_name_only() -> None:
    record = _recorded(store="/mnt/shared/lineage", base_dir="/srv/data").record_markdown()
    assert m.record_figures(record)["store"] == "`lineage`"
    assert "/mnt" not in record


def test_nothing_recorded_says_why_in_two_entries() -> None:
    md = m.LineageMetadata(
        obtained="none", policy="reuse_only", mode="contributing", status="no confirmed view"
    ).to_metadata()
    assert set(md) == {m.OBTAINED, m.RECORD}
    assert "no confirmed view" in md[m.RECORD].value
    assert "`reuse_only`" in md[m.RECORD].value


def test_no_signature_row_without_a_signature() -> None:
    # Spark steps have no reuse signature: no `none` placeholder
    record = _recorded(signature=None).record_markdown()
    assert "reuse signature" not in m.record_figures(record)
    assert "none" not in record
