"""The one module that imports the compiled extensions.

``dslog_dagster._native`` holds the ProvRC and query kernels, ``dslog_dagster._annotator`` the
``tracked_float`` dtype and its annotation arena. Everything else in the package reaches them
through this module, so a missing or stale build fails in one place with one message, and the
typed stubs (``_native.pyi``, ``_annotator.pyi``) describe the whole native surface.
"""

from dslog_dagster import _annotator as annotator
from dslog_dagster import _native as kernels

__all__ = ["annotator", "kernels"]
