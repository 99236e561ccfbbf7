"""Build the installed layout of ``dslog_dagster`` as a tree of symbolic links.

The wheel maps ``core/``, ``io_managers/`` and ``assets/`` under ``dslog_dagster`` (see
``[tool.scikit-build.wheel.packages]``), but static tools (mypy, mkdocstrings' griffe) read
source folders and cannot see that mapping through the editable install's import hook.
This script lays out ``<dest>/dslog_dagster/`` exactly as the wheel does, with links back to
the repository's files, so those tools check and document every ``dslog_dagster.*`` name as
users import it. Edits stay live: the links point at the working tree.

Usage: ``python tools/package_tree.py [DEST]`` (default ``build/pkgtree``); prints DEST.
"""

import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(dest: Path) -> Path:
    """Recreate ``dest/dslog_dagster`` from the wheel mapping in ``pyproject.toml``."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["scikit-build"]["wheel"][
        "packages"
    ]
    pkg = dest / "dslog_dagster"
    if pkg.exists() or pkg.is_symlink():
        shutil.rmtree(pkg)
    pkg.mkdir(parents=True)
    nested = {target: source for target, source in mapping.items() if target != "dslog_dagster"}
    for entry in sorted((ROOT / mapping["dslog_dagster"]).iterdir()):
        if entry.name == "__pycache__":
            continue
        (pkg / entry.name).symlink_to(entry)
    for target, source in nested.items():
        (dest / target).symlink_to(ROOT / source, target_is_directory=True)
    return dest


if __name__ == "__main__":
    out = build(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build" / "pkgtree")
    sys.stdout.write(f"{out}\n")
