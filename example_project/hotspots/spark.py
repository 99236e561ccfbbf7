"""Spark steps of the example project: the ICDE relational pipeline as tracked Spark assets.

``title_basics`` and ``title_episodes`` (generated IMDB-like tables) -> ``titles_joined``
(inner join on ``tconst``) -> ``titles_clean`` (drop rows with nulls) -> ``titles_summed``
(add ``seasonNumber + episodeNumber``) -> ``titles_encoded`` (one-hot ``genres``) ->
``titles_final`` (``runtimeMinutes + 10``), all PySpark DataFrames stored by
:class:`~dslog_dagster.DSLogIOManager` as Parquet with row ids; every step runs under the
relational capture, so each cell of each frame has cell-level lineage. Then the pipeline
crosses into NumPy: ``title_features`` is ``as_array(titles_final, columns)`` (the frame's
numeric columns as a matrix, same lineage) and ``genre_runtime`` the total runtime per genre,
computed with NumPy under the annotator. One lineage query path thus runs from a NumPy result
back to cells of the Spark source tables (the saved query ``genre_origin``).

The step functions are the plain PySpark ones of ``relational_pipeline.py``. All Spark steps
share one SparkSession (``SparkSessionResource``, ``local[*]``): ``titles_job`` uses the
in-process executor, since a JVM per step would pay the JVM start and Spark's first-job
warm-up in every step. ``make_defs(spark_master=..., shared_driver=True,
executor=dg.multiprocess_executor)`` runs it with a process per step instead (on a cluster,
say), every step attaching to one shared driver JVM.
"""

from typing import Any

import dagster as dg
import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from relational_pipeline import (
    GENRES,
    add_columns,
    add_constant,
    drop_nulls,
    join_titles,
    make_tables,
    one_hot,
)

from dslog_dagster import tracked_asset
from dslog_dagster.spark import as_array
from dslog_dagster.spark.resource import SparkSessionResource
from dslog_dagster.spark.session import FAST_START_JAVA_OPTIONS

GROUP = "titles"
SPARK = {"spark"}


class TitlesConfig(dg.Config):
    """The generated `title.basics`/`title.episode` tables."""

    n_titles: int = 300
    seed: int = 0


@tracked_asset(group_name=GROUP, kinds=SPARK, code_version="1")
def title_basics(config: TitlesConfig, spark: SparkSessionResource) -> DataFrame:
    """IMDB-like `title.basics` (source)."""
    return make_tables(spark.get_session(), config.n_titles, config.seed)[0]


@tracked_asset(group_name=GROUP, kinds=SPARK, code_version="1")
def title_episodes(config: TitlesConfig, spark: SparkSessionResource) -> DataFrame:
    """IMDB-like `title.episode` (source)."""
    return make_tables(spark.get_session(), config.n_titles, config.seed)[1]


@tracked_asset(group_name=GROUP, kinds=SPARK, code_version="1")
def titles_joined(title_basics: DataFrame, title_episodes: DataFrame) -> DataFrame:
    """Step 1: inner join on `tconst` (each row keeps both sides' rows)."""
    return join_titles(title_basics, title_episodes)


@tracked_asset(group_name=GROUP, kinds=SPARK, code_version="1")
def titles_clean(titles_joined: DataFrame) -> DataFrame:
    """Step 2: drop rows with a null in any column."""
    return drop_nulls(titles_joined)


@tracked_asset(group_name=GROUP, kinds=SPARK, code_version="1")
def titles_summed(titles_clean: DataFrame) -> DataFrame:
    """Step 3: `seasonEpisode = seasonNumber + episodeNumber`."""
    return add_columns(titles_clean)


@tracked_asset(group_name=GROUP, kinds=SPARK, code_version="1")
def titles_encoded(titles_summed: DataFrame) -> DataFrame:
    """Step 4: one 0/1 column per genre."""
    return one_hot(titles_summed)


@tracked_asset(group_name=GROUP, kinds=SPARK, code_version="1")
def titles_final(titles_encoded: DataFrame) -> DataFrame:
    """Step 5: add a constant to `runtimeMinutes`."""
    return add_constant(titles_encoded)


FEATURES = ("runtimeMinutes", *(f"genre_{g}" for g in GENRES))


@tracked_asset(group_name=GROUP, kinds={"spark", "numpy"}, code_version="1")
def title_features(titles_final: DataFrame) -> np.ndarray:
    """Spark -> NumPy: runtime and the one-hot genre columns as a matrix (row i = frame row i);
    cell (i, j) has the lineage of frame cell (i, FEATURES[j])."""
    return as_array(titles_final, FEATURES)  # type: ignore[return-value]


@tracked_asset(group_name=GROUP, kinds={"numpy"}, code_version="1")
def genre_runtime(title_features: np.ndarray) -> np.ndarray:
    """Total runtime per genre (NumPy, under the annotator): a genre's total depends on the
    runtime and genre cells of every title."""
    return title_features[:, 1:].T @ title_features[:, 0]


ON_DEMAND_GROUP = "titles_on_demand"


@tracked_asset(group_name=ON_DEMAND_GROUP, kinds=SPARK, code_version="1", policy="on_demand")
def runtime_by_genre(title_basics: DataFrame, title_episodes: DataFrame) -> DataFrame:
    """On demand (join + groupBy): runs untracked; its lineage is reconstructed when a query
    asks, for the selected genres only (dslog trace; see docs/dagster.md)."""
    return runtime_per_genre(title_basics, title_episodes)


def runtime_per_genre(basics: DataFrame, episodes: DataFrame) -> DataFrame:
    """Total runtime and episode count per genre of the episodes."""
    return (
        join_titles(basics, episodes)
        .groupBy("genres")
        .agg(F.sum("runtimeMinutes").alias("runtime"), F.count("tconst").alias("episodes"))
    )


#: ``runtime_by_genre`` and the two tables it reads.
titles_on_demand_job = dg.define_asset_job(
    "titles_on_demand_job",
    selection=dg.AssetSelection.assets(runtime_by_genre).upstream(),
    executor_def=dg.in_process_executor,
)

spark_assets: list[dg.AssetsDefinition] = [
    title_basics,
    title_episodes,
    titles_joined,
    titles_clean,
    titles_summed,
    titles_encoded,
    titles_final,
    title_features,
    genre_runtime,
    runtime_by_genre,
]
# Small frames, short jobs: the JVM's first JIT tier only (half the JVM's CPU to start Spark
# and run the first steps; see FAST_START_JAVA_OPTIONS and docs/spark.md, "Start-up").
SPARK_CONF = {"spark.driver.extraJavaOptions": FAST_START_JAVA_OPTIONS}


def spark_resources(
    master: str = "local[*]", *, shared_driver: bool = False, conf: dict[str, str] | None = None
) -> dict[str, Any]:
    """The Spark resource of the steps: a session on ``master`` with :data:`SPARK_CONF` and
    ``conf``; with ``shared_driver`` every step process attaches to the machine's shared driver
    (one JVM for the run's processes, :mod:`dslog_dagster.spark.driver`) instead of starting
    its own."""
    merged = {**SPARK_CONF, **(conf or {})}
    return {"spark": SparkSessionResource(master=master, conf=merged, shared_driver=shared_driver)}


def titles_job_def(executor: dg.ExecutorDefinition = dg.in_process_executor) -> Any:
    """``titles_job`` on ``executor``.

    The default runs every step in one process, so one JVM and one SparkSession for the whole
    run. Dagster's multiprocess executor runs each step in a process of its own: each would
    start its own JVM and pay Spark's first-job warm-up again (30-60 s per step on a 2-core
    machine, against 3-8 s for a step after the first here; docs/spark.md, "Start-up"),
    unless the steps attach to a shared driver (``make_defs(shared_driver=True)``).
    """
    return dg.define_asset_job(
        "titles_job", selection=dg.AssetSelection.groups(GROUP), executor_def=executor
    )


titles_job = titles_job_def()

#: Array path of a backward query from a genre total to the basics table.
PATH_TO_BASICS = [
    "genre_runtime",
    "title_features",
    "titles_final",
    "titles_encoded",
    "titles_summed",
    "titles_clean",
    "titles_joined",
    "title_basics",
]
