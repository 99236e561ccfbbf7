"""tools/ensure-chromium.sh: a no-op when Chromium is there, a clear failure when it cannot
install it (the install itself runs in CI on a clean machine, as part of `make test`)."""

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "ensure-chromium.sh"


def _run(tmp_path: Path, chromium: Path, path: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DSLOG_CHROMIUM": str(chromium), "PATH": path}
    return subprocess.run(
        ["/bin/bash", str(SCRIPT)], env=env, capture_output=True, text=True, check=False
    )


def test_present_chromium_is_left_alone(tmp_path: Path) -> None:
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    res = _run(tmp_path, fake, "/usr/bin:/bin")
    assert res.returncode == 0
    assert res.stderr == ""


def test_missing_chromium_without_a_way_to_install_it_fails_clearly(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    for tool in ("id",):  # the script needs `id`; nothing else, and no apt-get
        (empty / tool).symlink_to(f"/usr/bin/{tool}")
    res = _run(tmp_path, tmp_path / "no-chromium", str(empty))
    assert res.returncode == 1
    if os.geteuid() == 0:
        assert "there is no apt-get" in res.stderr
    else:
        assert "not root" in res.stderr
    assert str(tmp_path / "no-chromium") in res.stderr
