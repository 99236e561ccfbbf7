"""The lineage settings of tracked steps: one model, shared by every Dagster-facing object.

:class:`~dslog_dagster.DSLogResource` and :class:`~dslog_dagster.io_managers.DSLogIOManager`
both *are* a :class:`TrackingSettings` (they inherit its fields, so the launchpad shows the same
flat field names as before), and the decorators take its
:class:`~dslog_dagster.policy.CapturePolicy` and :class:`~dslog_dagster.policy.LineageMode`.
A setting is added here once and reaches all three.
"""

from typing import Any, Literal

import dagster as dg
from pydantic import Field, model_validator

from dslog_dagster.errors import ConfigurationError
from dslog_dagster.policy import CapturePolicy, LineageMode

__all__ = ["OpenLineageSettings", "TrackingSettings"]


class OpenLineageSettings(dg.Config):
    """Where tracked materializations send their OpenLineage run events (off by default)."""

    transport: Literal["off", "file", "http"] = Field(
        default="off",
        description=(
            "off: no events. file: append each event as one JSON line to `path`. http: POST "
            "each event to `url` (the OpenLineage HTTP API). Needs the [openlineage] extra."
        ),
    )
    path: str | None = Field(default=None, description="The file transport's JSON-lines file.")
    url: str | None = Field(
        default=None, description="The HTTP transport's server (http://host:5000)."
    )
    endpoint: str = Field(
        default="api/v1/lineage", description="The HTTP transport's path under `url`."
    )
    timeout: float = Field(default=5.0, gt=0, description="HTTP timeout in seconds.")
    api_key: str | None = Field(
        default=None, description="HTTP: sent as `Authorization: Bearer <api_key>` when set."
    )
    namespace: str = Field(default="dslog", description="Namespace of the jobs and datasets.")

    @model_validator(mode="after")
    def _target_given(self) -> "OpenLineageSettings":
        if self.transport == "file" and not self.path:
            msg = "openlineage.transport=file needs openlineage.path (the JSON-lines file)."
            raise ConfigurationError(msg)
        if self.transport == "http" and not self.url:
            msg = "openlineage.transport=http needs openlineage.url (http://host:port)."
            raise ConfigurationError(msg)
        return self


class TrackingSettings(dg.Config):
    """How tracked steps capture lineage and where it is stored (the fields, and only them).

    Subclassed by the resource and the IO manager; :meth:`tracking_settings` hands the values
    of one to the other.
    """

    store_dir: str | None = Field(
        default=None,
        description=(
            "Directory of the lineage store, shared by the IO managers, query assets and checks "
            "of this resource. Default: $DSLOG_STORE, else .dslog in the Dagster instance's "
            "storage directory."
        ),
    )
    policy: CapturePolicy = Field(
        default=CapturePolicy.capture,
        description=(
            "Capture policy for tracked steps that do not set one: capture (annotate, fail when "
            "lineage would be lost), all_to_all (annotate, record a flagged all-to-all relation "
            "where lineage would be lost), reuse_only (reuse views only; records nothing when "
            "no view matches), off (record nothing)."
        ),
    )
    mode: LineageMode = Field(
        default=LineageMode.contributing,
        description=(
            "contributing: a value picked by comparison (max, sort, where, clip...) depends on "
            "the picked cell only. considered: also on every compared cell."
        ),
    )
    picture: bool = Field(
        default=True, description="Attach a PNG of sample lineage to materialization metadata."
    )
    picture_cells: int = Field(
        default=4, ge=1, le=64, description="How many output cells the picture follows."
    )
    reuse: bool = Field(
        default=True,
        description=(
            "Serve lineage from confirmed reuse views (provenance views) instead of annotating "
            "when the same operation runs again; views are learnt from captures and verified."
        ),
    )
    confirm_after: int = Field(
        default=2, ge=1, description="Matching captures that confirm a candidate reuse view."
    )
    verify_rate: float = Field(
        default=0.05, ge=0.0, le=1.0, description="Share of reuse hits re-verified by sampling."
    )
    durable: bool = Field(
        default=True,
        description=(
            "fsync lineage files before a step succeeds (survives power loss). False keeps "
            "writes atomic but leaves flushing to the OS, like the asset values' IO manager."
        ),
    )
    group_commit: bool = Field(
        default=False,
        description=(
            "With durable: publish a step's lineage at once (readers see it) but fsync it in "
            "batches off the step's path, and at the end of the run and of the process. A "
            "killed process loses nothing; a power loss may lose lineage of the last moments "
            "(under a second), which the checksums and lineage checks then report, never "
            "taken for good lineage. Needs durable=true."
        ),
    )

    openlineage: OpenLineageSettings = Field(
        default_factory=OpenLineageSettings,
        description=(
            "OpenLineage run events (START, COMPLETE or FAIL with the column-lineage facet) "
            "per materialization of a tracked asset: transport off (default), file or http."
        ),
    )

    @model_validator(mode="after")
    def _group_commit_needs_durable(self) -> "TrackingSettings":
        if self.group_commit and not self.durable:
            msg = (
                "group_commit=true batches the fsyncs of durable lineage; with durable=false "
                "nothing is fsynced. Set durable=true or group_commit=false."
            )
            raise ConfigurationError(msg)
        return self

    def tracking_settings(self) -> dict[str, Any]:
        """The :class:`TrackingSettings` fields as keyword arguments (for another subclass)."""
        return {name: getattr(self, name) for name in TrackingSettings.model_fields}
