"""The optional dependencies, named by the extra that installs them.

``pip install dslog-dagster`` is NumPy-only: no PySpark, no pandas. Spark support needs the
``[spark]`` extra and pandas results the ``[pandas]`` extra. Nothing imports them until a
feature needs them; then :func:`require` imports the module or refuses with a
:class:`~dslog_dagster.errors.MissingExtraError` that names the extra to install, instead of a
bare ``ModuleNotFoundError`` from deep inside a step.
"""

import importlib
from types import ModuleType

from dslog_dagster.errors import MissingExtraError

__all__ = ["EXTRA_OF", "require"]

EXTRA_OF: dict[str, str] = {
    "pyspark": "spark",
    "pandas": "pandas",
    "prov": "export",
    "openlineage": "openlineage",
}
"""The extra that installs each optional top-level module."""


def require(module: str, feature: str) -> ModuleType:
    """Import ``module`` (an optional dependency) for ``feature``.

    Raises:
        MissingExtraError: it is not installed (or does not import); the message names the
            extra that installs it.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        extra = EXTRA_OF.get(top, top)
        msg = (
            f"{feature} needs `{top}`, which is not installed in this environment ({e}). "
            f"Install the extra: pip install 'dslog-dagster[{extra}]'."
        )
        raise MissingExtraError(msg) from e
