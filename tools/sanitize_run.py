"""Run pytest with the native extensions of a sanitizer build in place of the normal ones.

``make sanitize`` builds ``_annotator`` and ``_native`` with ``-fsanitize=address,undefined``
into their own build directory and runs this script under ``LD_PRELOAD=libasan.so`` (the
interpreter itself is not instrumented, so the ASan runtime must be loaded first, with
libstdc++ so that ASan can intercept C++ throws of modules loaded later). The
editable install maps ``dslog_dagster._annotator`` to the normal build; a finder put in front
of it here loads the sanitized files instead, and the run fails unless they are the ones in
use. Nothing of this reaches the library: it is test tooling only.

Usage: ``python tools/sanitize_run.py BUILD_DIR -- [pytest arguments]``.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

MODULES = ("_annotator", "_native")


class SanitizedExtensions(importlib.abc.MetaPathFinder):
    """Finds ``dslog_dagster._annotator`` and ``dslog_dagster._native`` in ``build_dir``."""

    def __init__(self, build_dir: Path) -> None:
        self.paths: dict[str, Path] = {}
        for name in MODULES:
            found = sorted(build_dir.rglob(f"{name}.*.so"))
            if not found:
                msg = f"no sanitized {name} extension under {build_dir}; run `make sanitize`"
                raise SystemExit(msg)
            self.paths[f"dslog_dagster.{name}"] = found[0]

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        where = self.paths.get(fullname)
        if where is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(where))
        return importlib.util.spec_from_file_location(fullname, where, loader=loader)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] != "--":
        raise SystemExit(__doc__)
    finder = SanitizedExtensions(Path(argv[0]).resolve())
    sys.meta_path.insert(0, finder)
    import pytest

    from dslog_dagster import _annotator, _native

    for mod in (_annotator, _native):
        if Path(str(mod.__file__)).resolve() != finder.paths[mod.__name__].resolve():
            msg = f"{mod.__name__} was loaded from {mod.__file__}, not sanitized"
            raise SystemExit(msg)
        sys.stdout.write(f"sanitized: {mod.__name__} <- {mod.__file__}\n")
    return int(pytest.main(argv[2:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
