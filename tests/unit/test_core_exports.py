"""``dslog_dagster.core``'s exports load on first use and are the objects their modules define."""

import importlib
import subprocess
import sys

import dslog_dagster.core as core


def test_every_export_resolves_to_its_modules_object() -> None:
    assert set(core.__all__) == {*core._EXPORTS, "capture"}
    for name, (module, attr) in core._EXPORTS.items():
        assert getattr(core, name) is getattr(importlib.import_module(module), attr), name
    assert core.capture is importlib.import_module("dslog_dagster.core.capture").capture
    assert callable(core.capture)  # the function, not its submodule of the same name
    assert set(core.__all__) <= set(dir(core))


def test_a_core_module_imports_without_the_whole_engine() -> None:
    code = (
        "import sys, dslog_dagster.core.combine, dslog_dagster.core.format.blob;"
        "print(sorted(m for m in ('dslog_dagster.core.store', 'dslog_dagster.core.change',"
        " 'dslog_dagster.core.reuse') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
