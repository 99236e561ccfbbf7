"""``SparkSessionResource``: a Dagster resource giving the process's SparkSession.

The session starts on first use (``get_session()``), not when Dagster builds the resource,
so steps that never touch Spark never pay the ~8 s JVM start; once started it is reused by every
step in the process (Spark allows one SparkContext per JVM). Defaults keep Spark loopback-only
(:data:`~dslog_dagster.spark.session.DEFAULT_CONF`); ``master`` and ``conf`` accept anything
Spark does (``local[*]``, ``spark://host:7077``, ``yarn``, ``k8s://...``). With
``shared_driver=True`` each step process attaches to one driver JVM per machine instead of
starting its own (:mod:`dslog_dagster.spark.driver`): Dagster's multiprocess executor then
pays the JVM start once, not once per step.

Examples:
    >>> import dagster as dg
    >>> defs = dg.Definitions(  # the session starts on the first get_session()
    ...     resources={"spark": SparkSessionResource(master="local[2]")},
    ... )
"""

from typing import Any

import dagster as dg
from pydantic import Field, PrivateAttr

from dslog_dagster.spark.session import get_session

__all__ = ["SparkSessionResource"]


class SparkSessionResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """A lazily started SparkSession shared by every step of the process."""

    master: str = Field(
        default="local[*]", description="Spark master URL (local[*], spark://..., yarn, ...)."
    )
    conf: dict[str, str] = Field(
        default_factory=dict,
        description="Spark conf; overrides the loopback-only defaults key by key.",
    )
    app_name: str = Field(default="dslog-dagster", description="Spark application name.")
    shared_driver: bool = Field(
        default=False,
        description=(
            "Attach to the machine's shared Spark driver (started by the first step that asks, "
            "stopped when idle) instead of starting a JVM in each step's process: for "
            "Dagster's multiprocess executor. See dslog_dagster.spark.driver."
        ),
    )
    idle_timeout_s: float = Field(
        default=300.0,
        description="Seconds the shared driver outlives its last attached step process.",
    )
    _session: Any = PrivateAttr(default=None)

    def get_session(self) -> Any:
        """The SparkSession (started on first call, then reused)."""
        if self._session is None:
            self._session = get_session(
                self.master,
                self.conf,
                self.app_name,
                shared=self.shared_driver,
                idle_timeout=self.idle_timeout_s,
            )
        return self._session

    @property
    def spark_session(self) -> Any:
        """Alias of :meth:`get_session` (the name dagster-pyspark uses)."""
        return self.get_session()
