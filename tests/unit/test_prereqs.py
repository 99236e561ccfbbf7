"""`make` checks prerequisites first and says what to install instead of failing mid-build."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "check-prereqs.sh"


def _run(env_overrides: dict[str, str], python: str = sys.executable):
    env = {**os.environ, **env_overrides}
    return subprocess.run(
        ["/bin/bash", str(SCRIPT), python], capture_output=True, text=True, env=env, check=False
    )


def test_prereqs_pass_on_this_machine() -> None:
    res = _run({})
    assert res.returncode == 0, res.stderr


def test_missing_compiler_gets_a_clear_message() -> None:
    res = _run({"CXX": "/nonexistent/c++"})
    assert res.returncode == 1
    assert "C++17" in res.stderr
    assert "install" in res.stderr


def test_missing_python_gets_a_clear_message() -> None:
    res = _run({}, python="/nonexistent/python3")
    assert res.returncode == 1
    assert "Python 3.11" in res.stderr


def test_missing_java_is_reported(tmp_path: Path) -> None:
    # a PATH with the tools the script needs but no java
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("mktemp", "rm", "printf", "head", "sed", "cat"):
        for d in ("/usr/bin", "/bin"):
            if (Path(d) / tool).exists():
                (bindir / tool).symlink_to(Path(d) / tool)
                break
    cxx = subprocess.run(
        ["bash", "-c", "command -v c++ || command -v g++"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    res = _run({"PATH": str(bindir), "CXX": cxx})
    assert "Java 17" in res.stderr
