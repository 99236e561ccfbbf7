"""Missing-parameter discovery on the example project's steps (issue 27 item 4): the Config
fields of ``thresholded`` (sigmas) and ``hotspots`` (tile), the refusals, and ``dslog discover``."""

import json
import sys
from pathlib import Path

import dagster as dg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "example_project"))

from hotspots.assets import calibrated, dark_frame, hotspots, raw_frame, smoothed, thresholded

from dslog_dagster import DSLogIOManager, DSLogResource
from dslog_dagster.cli import main
from dslog_dagster.core.query import CellSet
from dslog_dagster.core.store import LineageStore
from dslog_dagster.discovery import config_fields, discover_parameters
from dslog_dagster.errors import ConfigurationError, DiscoveryError

SMALL = {"config": {"size": 64, "seed": 3, "blobs": 3}}
TRUE = {"sigmas": 2.0, "tile": 8}


@pytest.fixture(scope="module")
def materialized(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, LineageStore, DSLogIOManager]:
    """The hotspot steps run once with sigmas=2.0 and tile=8 (the "lost" config)."""
    base = tmp_path_factory.mktemp("discover")
    dslog = DSLogResource(store_dir=str(base / "store"))
    io = DSLogIOManager(dslog=dslog, base_dir=str(base / "values"))
    config = {
        "ops": {
            "raw_frame": SMALL,
            "dark_frame": SMALL,
            "thresholded": {"config": {"sigmas": TRUE["sigmas"]}},
            "hotspots": {"config": {"tile": TRUE["tile"]}},
        },
        "loggers": {"console": {"config": {"log_level": "ERROR"}}},
    }
    with dg.instance_for_test() as instance:
        res = dg.materialize(
            [raw_frame, dark_frame, calibrated, smoothed, thresholded, hotspots],
            resources={"dslog": dslog, "io_manager": io},
            instance=instance,
            run_config=config,
        )
    assert res.success
    return base, dslog.session().store, io


def test_threshold_factor_is_found(materialized: tuple[Path, LineageStore, DSLogIOManager]) -> None:
    _, store, io = materialized
    space = {"sigmas": [1.0, 1.5, 2.0, 2.5, 3.0]}
    found = discover_parameters(thresholded, store, io.value_loader(), space)
    assert found.matches == ({"sigmas": 2.0},)
    # the level is a statistic of the whole frame: no part of it decides, and it says so
    assert found.how == "whole input"


def test_tile_size_is_found_from_a_few_tiles(
    materialized: tuple[Path, LineageStore, DSLogIOManager],
) -> None:
    _, store, io = materialized
    hot = store.get_array("hotspots")
    cells = CellSet.from_mask(io.value_loader()(hot) > 0)  # the hot tiles
    found = discover_parameters(
        hotspots, store, io.value_loader(), {"tile": [4, 8, 16]}, cells=cells
    )
    assert found.matches == ({"tile": 8},)


def test_space_outside_the_config_fields_is_refused(
    materialized: tuple[Path, LineageStore, DSLogIOManager],
) -> None:
    _, store, io = materialized
    assert config_fields(thresholded) == {"sigmas": 2.5}
    with pytest.raises(
        ConfigurationError, match=r"\['sigma'\] is not a field of `ThresholdConfig`"
    ):
        discover_parameters(thresholded, store, io.value_loader(), {"sigma": [2.0]})
    with pytest.raises(ConfigurationError, match="is not a valid `TileConfig`"):
        discover_parameters(hotspots, store, io.value_loader(), {"tile": ["big"]})
    with pytest.raises(DiscoveryError, match="No candidate of the 2"):
        discover_parameters(thresholded, store, io.value_loader(), {"sigmas": [1.0, 3.0]})


def test_cli_discover(
    materialized: tuple[Path, LineageStore, DSLogIOManager], capsys: pytest.CaptureFixture[str]
) -> None:
    base, _, _ = materialized
    args = [
        "discover", str(base / "store"), "thresholded", "--import", "hotspots.assets",
        "--values", str(base / "values"), "--space", "sigmas=1.0:3.01:0.5", "--format", "json",
    ]  # fmt: skip
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == [{"sigmas": 2.0}]
    assert "1 of 5 candidate(s)" in err
    assert main([*args[:-4], "--space", "sigmas=two"]) == 2
    assert "`two` is not a number" in capsys.readouterr().err
