"""The Dagster UI shows cell-level lineage: a real webserver, a real run, a real browser.

Starts ``dagster-webserver`` on 127.0.0.1 with a temporary DAGSTER_HOME (telemetry off,
``DefaultRunCoordinator`` so launched runs start without a daemon), materializes the pipeline
and a saved lineage query over GraphQL, then opens the asset pages in headless Debian Chromium
(Playwright's Python API) and checks what a person sees:

* every materialized asset's latest run succeeded, and its lineage checks passed (GraphQL);
* the lean metadata (five ``dslog/*`` keys, none of the old ones) and no long float on the page
  (numbers are formatted: ``50,210×``, 2 significant digits);
* the pictures: each data-URI PNG on the page is drawn into a canvas *in the browser* and its
  pixels sampled: a tracked asset's pictures show several highlight colours in the grid and a
  solid legend swatch in each, the query's picture its selection in red with its swatch.

Every request the page makes must stay on loopback. Screenshots are kept in
``test-artifacts/`` (git-ignored).

To point this test at another project, change only the constants below.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
# --- what to serve and what to look at (the example project) -------
WEBSERVER_TARGET = ["-m", "hotspots.definitions"]
PYTHONPATH = [str(ROOT / "example_project"), str(ROOT)]
MATERIALIZE = [
    [k]
    for k in (
        "raw_frame",
        "dark_frame",
        "calibrated",
        "smoothed",
        "thresholded",
        "hotspots",
        "top_hotspots",
        "peak_stats",
        "hotspot_coords",
        "hotspot_windows",
        "window_summary",
        "hotspot_origin",
    )
]
# (asset key path as in the URL, tab, texts that must be shown, must show a data-URI picture)
PAGES = [
    (
        "smoothed",
        "events",
        ["dslog/lineage", "dslog/record", "dslog/obtained", "dslog/op_id", "dslog/shape"],
        True,
    ),
    (
        "hotspot_origin",
        "events",
        ["dslog/result_cells", "dslog/result_picture", "dslog/result_preview", "dslog/query"],
        True,
    ),
    (
        "smoothed",
        "checks",
        ["dslog_lineage_readable", "dslog_lineage_shape", "dslog_lineage_coverage"],
        False,
    ),
]
# keys of earlier versions that the lean metadata folded into dslog/record
OLD_KEYS = [
    "dslog/compression_ratio",
    "dslog/capture_s",
    "dslog/raw_rows",
    "dslog/signature",
    "dslog/capture_share",
    "dslog/status",
]
# assets that carry lineage checks in the example
CHECKED = {"calibrated", "smoothed"}
# the highlight colours of dslog_dagster.pictures.HIGHLIGHT_RGB (red, orange, green, ...)
HIGHLIGHTS = [
    [214, 39, 40],
    [255, 127, 14],
    [44, 160, 44],
    [227, 82, 194],
    [148, 103, 189],
    [140, 86, 75],
    [23, 190, 207],
    [188, 189, 34],
]
# -----------------------------------------------------------------------------------------
CHROMIUM = os.environ.get("DSLOG_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
STARTUP_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 60.0
PAGE_TIMEOUT_MS = 20_000

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _default_signals() -> None:
    # children of a shell that ignores SIGINT inherit SIG_IGN and would not stop on SIGINT
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class Server:
    """A dagster-webserver in its own process group, stopped with SIGINT then SIGKILL."""

    def __init__(self, home: Path, store: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = home / "webserver.log"
        (home / "dagster.yaml").write_text(
            "telemetry:\n  enabled: false\n"
            "run_coordinator:\n  module: dagster.core.run_coordinator\n"
            "  class: DefaultRunCoordinator\n"
        )
        env = {
            **os.environ,
            "DAGSTER_HOME": str(home),
            "DSLOG_STORE": str(store),
            "PYTHONPATH": os.pathsep.join([*PYTHONPATH, os.environ.get("PYTHONPATH", "")]),
        }
        exe = Path(sys.executable).with_name("dagster-webserver")
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [str(exe), "-h", "127.0.0.1", "-p", str(self.port), *WEBSERVER_TARGET],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_default_signals,
        )

    def logs(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-6000:]

    def wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"dagster-webserver exited early:\n{self.logs()}")
            try:
                with urllib.request.urlopen(f"{self.url}/server_info", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        pytest.fail(f"dagster-webserver not up in {STARTUP_TIMEOUT_S}s:\n{self.logs()}")

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        req = urllib.request.Request(
            f"{self.url}/graphql", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            out: dict[str, Any] = json.loads(r.read())
        if out.get("errors"):
            pytest.fail(f"GraphQL errors: {out['errors']}\n{self.logs()}")
        return out["data"]

    def stop(self) -> None:
        try:
            pgid = os.getpgid(self.proc.pid)
        except ProcessLookupError:
            pgid = None
        if pgid is not None:
            try:
                os.killpg(pgid, signal.SIGINT)
                self.proc.wait(timeout=15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
            # the lazily started code server may outlive the webserver: end our group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("dagster_home")
    srv = Server(home, tmp_path_factory.mktemp("ui_store") / "store")
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchPipelineExecution(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""
LOCATIONS = """
{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }"""
STATUS = "query S($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"


CHECKS = """
{ assetNodes { assetKey { path }
  assetChecksOrError { ... on AssetChecks { checks { name
    executionForLatestMaterialization { status } } } } } }"""


def _check_statuses(server: Server) -> dict[tuple[str, str], str]:
    """(asset, check) -> the status of the check's execution for the latest materialization."""
    out = {}
    for node in server.graphql(CHECKS)["assetNodes"]:
        checks = (node.get("assetChecksOrError") or {}).get("checks") or []
        for c in checks:
            ex = c.get("executionForLatestMaterialization") or {}
            out[("/".join(node["assetKey"]["path"]), c["name"])] = ex.get("status", "NONE")
    return out


def _materialize(server: Server) -> str:
    (repo,) = server.graphql(LOCATIONS)["repositoriesOrError"]["nodes"]
    params = {
        "selector": {
            "repositoryLocationName": repo["location"]["name"],
            "repositoryName": repo["name"],
            "pipelineName": "__ASSET_JOB",
            "assetSelection": [{"path": p} for p in MATERIALIZE],
        },
        "runConfigData": {},
    }
    res = server.graphql(LAUNCH, {"params": params})["launchPipelineExecution"]
    if res["__typename"] != "LaunchRunSuccess":
        pytest.fail(f"launch failed: {res}\n{server.logs()}")
    run_id: str = res["run"]["runId"]
    deadline = time.monotonic() + RUN_TIMEOUT_S
    status = ""
    while time.monotonic() < deadline:
        status = server.graphql(STATUS, {"id": run_id})["runOrError"].get("status", "")
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            break
        time.sleep(0.5)
    assert status == "SUCCESS", f"run {run_id} ended {status!r}\n{server.logs()}"
    return run_id


SAMPLE_JS = """
(colours) => [...document.querySelectorAll("img[src^='data:image/png']")].map(img => {
  const c = document.createElement("canvas");
  c.width = img.naturalWidth; c.height = img.naturalHeight;
  const g = c.getContext("2d");
  g.drawImage(img, 0, 0);
  const d = g.getImageData(0, 0, c.width, c.height).data;
  const grid = colours.map(() => 0), swatch = colours.map(() => 0);
  for (let i = 0; i < d.length; i += 4) {
    const x = (i / 4) % c.width;
    for (let k = 0; k < colours.length; k++) {
      const [r, gg, b] = colours[k];
      if (d[i] === r && d[i + 1] === gg && d[i + 2] === b) {
        if (x >= 4 && x < 14) swatch[k]++; else if (x >= 20) grid[k]++;
      }
    }
  }
  return {alt: img.alt, width: c.width, height: c.height, grid, swatch};
})
"""


def _sample_pictures(page: Any) -> list[dict[str, Any]]:
    """Each data-URI picture's pixels counted per highlight colour, in the grid (x >= 20) and in
    the legend's swatch column (x in 4..13), by the browser itself."""
    samples: list[dict[str, Any]] = page.evaluate(SAMPLE_JS, HIGHLIGHTS)
    return samples


def _assert_highlighted(samples: list[dict[str, Any]], at_least: int) -> None:
    """Every picture shows ``at_least`` highlight colours in its grid, each with its legend
    swatch (a solid 10 x 10 square: 100 pixels)."""
    assert samples, "no picture"
    for s in samples:
        shown = [k for k, n in enumerate(s["grid"]) if n > 0]
        assert len(shown) >= at_least, s
        for k in shown:
            assert s["swatch"][k] >= 100, (k, s)


def _pictures_on(page: Any, shot: str) -> list[dict[str, Any]]:
    """Sample every picture of the page: those shown inline, and those behind "[Show
    Markdown]" (the UI shows markdown longer than 1000 characters, such as a heat map's data
    URI, in a dialog): each dialog with a picture is opened, sampled, kept as a screenshot and
    closed."""
    samples = []
    if page.locator("img[src^='data:image/png']").count():
        _assert_picture_shown(page)
        samples += _sample_pictures(page)
    buttons = page.get_by_text("[Show Markdown]", exact=True)
    for i in range(buttons.count()):
        buttons.nth(i).click()
        dialog = page.get_by_role("dialog").last
        dialog.wait_for()
        if dialog.locator("img[src^='data:image/png']").count():
            _assert_picture_shown(page)
            samples += _sample_pictures(page)
            page.screenshot(path=str(ARTIFACTS / f"{shot}_markdown_{i}.png"), full_page=True)
        page.keyboard.press("Escape")
        dialog.wait_for(state="hidden")
    return samples


def _assert_formatted(page: Any) -> None:
    """No long float on the page (the metadata used to show `50210.408602150535`)."""
    text = page.inner_text("body")
    long_floats = re.findall(r"\d\.\d{6,}", text)
    assert long_floats == [], long_floats


def _assert_picture_shown(page: Any) -> None:
    """A data-URI PNG is on the page and decoded (naturalWidth > 0)."""
    img = page.locator("img[src^='data:image/png']").first
    img.wait_for()
    img.scroll_into_view_if_needed()
    page.wait_for_function(
        "() => [...document.querySelectorAll(\"img[src^='data:image/png']\")]"
        ".some(i => i.complete && i.naturalWidth > 0)"
    )
    widths = page.eval_on_selector_all(
        "img[src^='data:image/png']", "els => els.map(e => e.naturalWidth)"
    )
    assert widths, "no data-URI picture on the page"
    assert all(w > 0 for w in widths), widths


def _dismiss_community_modal(page: Any) -> None:
    """The first visit may open "Join the Dagster community" over the page (the NUX is marked
    seen over GraphQL before, so this is a fallback): skip it if it is there."""
    skip = page.get_by_role("button", name="Skip")
    if skip.count():
        skip.first.click()


@pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason=f"{CHROMIUM} is missing; `make test` installs it (tools/ensure-chromium.sh)",
)
def test_asset_pages_show_lineage_metadata_and_picture(server: Server) -> None:
    from playwright.sync_api import sync_playwright

    _materialize(server)
    statuses = _check_statuses(server)
    assert {a for a, _ in statuses} >= CHECKED, statuses
    red = {k: st for k, st in statuses.items() if st != "SUCCEEDED"}
    assert red == {}, red  # every check green on a fresh run (source assets carry none)
    assert not {a for a, _ in statuses} & {"raw_frame", "dark_frame"}, statuses
    server.graphql("mutation { setNuxSeen }")  # no community pop-up over the screenshots
    ARTIFACTS.mkdir(exist_ok=True)
    for old in ARTIFACTS.glob("ui_*.png"):
        old.unlink()
    blocked: list[str] = []
    console_errors: list[str] = []
    profile = ARTIFACTS / ".chromium-profile"
    shutil.rmtree(profile, ignore_errors=True)

    def guard(route: Any) -> None:
        url = route.request.url
        if url.startswith("data:") or urlparse(url).hostname in ("127.0.0.1", "localhost"):
            route.continue_()
        else:
            blocked.append(url)
            route.abort()

    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1600},
        )
        try:
            page = ctx.new_page()
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            page.route("**/*", guard)
            page.on("console", lambda m: m.type == "error" and console_errors.append(m.text))

            for asset, tab, texts, picture in PAGES:
                page.goto(f"{server.url}/assets/{asset}?view={tab}", wait_until="networkidle")
                _dismiss_community_modal(page)
                for text in texts:
                    page.get_by_text(text, exact=True).first.wait_for()
                if tab == "checks":  # every check listed ran and passed
                    page.get_by_text("Succeeded").nth(len(texts) - 1).wait_for()
                    assert page.get_by_text("Failed").count() == 0
                if picture:
                    # a tracked asset: its hottest cells and the cells feeding them, several
                    # colours; the query: its selection
                    samples = _pictures_on(page, f"ui_{asset.replace('/', '_')}_{tab}")
                    _assert_highlighted(samples, 2 if asset == "smoothed" else 1)
                if tab == "events":
                    for old in OLD_KEYS:
                        assert page.get_by_text(old, exact=True).count() == 0, old
                    _assert_formatted(page)
                shot = ARTIFACTS / f"ui_{asset.replace('/', '_')}_{tab}.png"
                page.screenshot(path=str(shot), full_page=True)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "ui_failure.png"), full_page=True)
            raise
        finally:
            ctx.close()
    shutil.rmtree(profile, ignore_errors=True)
    assert blocked == [], f"the UI tried to leave loopback: {blocked}"
