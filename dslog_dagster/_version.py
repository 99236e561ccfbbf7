"""The package version, in a module of its own so the engine can read it without importing the
plugin facade (``dslog_dagster/__init__`` imports the Dagster side; ``core`` must not)."""

__version__ = "0.1.0"
