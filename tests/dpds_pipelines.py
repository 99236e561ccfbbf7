"""The preparation pipelines of the DPDS evaluation (census / adult income, COMPAS recidivism,
German credit), written once for pandas and once for PySpark with the same operations, on
generated data with the datasets' columns and value vocabularies (no download: the tests run
offline).

Each pipeline uses the DPDS operator kinds its dataset's preparation needs: value
replacement and imputation, instance drops by predicate and by nulls, value transformations
(label binarisation, indicator columns as comparisons), feature selection, and a join that
augments features from a second table. Every frame carries ``rid``, the record id (equal to
the input row position), so the two engines' outputs can be lined up row by row.
"""

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

Gen = np.random.Generator


def _pick(rng: Gen, values: list[Any], n: int, null: float = 0.0) -> list[Any]:
    out = [values[i] for i in rng.integers(0, len(values), n)]
    return [None if rng.random() < null else v for v in out]


# ---------------------------------------------------------------- census (adult income)


def census_frames(n: int, seed: int = 0) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    people = pd.DataFrame(
        {
            "rid": np.arange(n, dtype=np.int64),
            "age": rng.integers(15, 80, n).astype(np.int64),
            "workclass": _pick(rng, ["Private", "Self-emp", "State-gov", "?"], n),
            "education": _pick(rng, ["Bachelors", "HS-grad", "Masters", "Doctorate"], n),
            "occupation": _pick(rng, ["Sales", "Tech-support", "Craft-repair", "?"], n),
            "sex": _pick(rng, ["Male", "Female"], n),
            "hours": rng.integers(10, 70, n).astype(np.int64),
            "income": _pick(rng, ["<=50K", ">50K"], n),
        }
    )
    levels = pd.DataFrame(
        {
            "education": ["Bachelors", "HS-grad", "Masters", "Doctorate"],
            "edu_num": np.array([13, 9, 14, 16], dtype=np.int64),
        }
    )
    return {"people": people, "levels": levels}


def census_pandas(people: pd.DataFrame, levels: pd.DataFrame) -> pd.DataFrame:
    df = people.replace("?", None)  # missing values as nulls
    df = df.dropna(subset=["workclass", "occupation"])  # instance drop
    df = df[df["age"] >= 18]  # instance drop by predicate
    df = df.merge(levels, on="education", how="left")  # feature augmentation (join)
    df = df.assign(
        label=(df["income"] == ">50K").astype("int64"),  # label binarisation
        is_male=(df["sex"] == "Male").astype("int64"),  # indicator column
    )
    return df[["rid", "age", "workclass", "occupation", "edu_num", "hours", "is_male", "label"]]


def census_spark(people: Any, levels: Any) -> Any:
    from pyspark.sql import functions as F

    df = people.replace("?", None)
    df = df.dropna(subset=["workclass", "occupation"])
    df = df.filter(F.col("age") >= 18)
    df = df.join(levels, on="education", how="left")
    df = df.withColumn("label", (F.col("income") == ">50K").cast("long"))
    df = df.withColumn("is_male", (F.col("sex") == "Male").cast("long"))
    return df.select(
        "rid", "age", "workclass", "occupation", "edu_num", "hours", "is_male", "label"
    )


# ---------------------------------------------------------------- COMPAS


def compas_frames(n: int, seed: int = 1) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    people = pd.DataFrame(
        {
            "rid": np.arange(n, dtype=np.int64),
            "age": rng.integers(18, 70, n).astype(np.int64),
            "c_charge_degree": _pick(rng, ["F", "M", "O"], n),
            "race": _pick(rng, ["African-American", "Caucasian", "Hispanic", "Other"], n),
            "priors_count": rng.integers(0, 12, n).astype(np.int64),
            "days_b_screening_arrest": rng.integers(-60, 60, n).astype(np.int64),
            "is_recid": _pick(rng, [-1, 0, 1], n),
            "score_text": _pick(rng, ["Low", "Medium", "High", "N/A"], n),
            "two_year_recid": rng.integers(0, 2, n).astype(np.int64),
        }
    )
    people["is_recid"] = people["is_recid"].astype("int64")
    return {"people": people}


def compas_pandas(people: pd.DataFrame) -> pd.DataFrame:
    df = people[  # feature selection
        ["rid", "age", "c_charge_degree", "race", "priors_count", "days_b_screening_arrest",
         "is_recid", "score_text", "two_year_recid"]
    ]  # fmt: skip
    df = df[df["days_b_screening_arrest"] <= 30]  # the ProPublica filters: instance drops
    df = df[df["days_b_screening_arrest"] >= -30]
    df = df[df["is_recid"] != -1]
    df = df[df["c_charge_degree"] != "O"]
    df = df[df["score_text"] != "N/A"]
    df = df.assign(
        young=(df["age"] < 25).astype("int64"),  # value transformations
        felony=(df["c_charge_degree"] == "F").astype("int64"),
        high_risk=(df["score_text"] != "Low").astype("int64"),
    )
    return df.drop(columns=["c_charge_degree", "score_text", "days_b_screening_arrest"])


def compas_spark(people: Any) -> Any:
    from pyspark.sql import functions as F

    df = people.select(
        "rid", "age", "c_charge_degree", "race", "priors_count", "days_b_screening_arrest",
        "is_recid", "score_text", "two_year_recid",
    )  # fmt: skip
    df = df.filter(F.col("days_b_screening_arrest") <= 30)
    df = df.filter(F.col("days_b_screening_arrest") >= -30)
    df = df.filter(F.col("is_recid") != -1)
    df = df.filter(F.col("c_charge_degree") != "O")
    df = df.filter(F.col("score_text") != "N/A")
    df = df.withColumn("young", (F.col("age") < 25).cast("long"))
    df = df.withColumn("felony", (F.col("c_charge_degree") == "F").cast("long"))
    df = df.withColumn("high_risk", (F.col("score_text") != "Low").cast("long"))
    return df.drop("c_charge_degree", "score_text", "days_b_screening_arrest")


# ---------------------------------------------------------------- German credit


STATUS = {"A11": "<0", "A12": "0-200", "A13": ">=200", "A14": "none"}


def german_frames(n: int, seed: int = 2) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    people = pd.DataFrame(
        {
            "rid": np.arange(n, dtype=np.int64),
            "status": _pick(rng, list(STATUS), n),
            "duration": rng.integers(4, 72, n).astype(np.int64),
            "purpose": _pick(rng, ["A40", "A41", "A42", "A43"], n),
            "amount": rng.integers(250, 18000, n).astype(np.int64),
            "savings": _pick(rng, ["A61", "A62", "A65"], n, null=0.3),
            "personal_status": _pick(rng, ["A91", "A92", "A93", "A95"], n),
            "age": rng.integers(19, 75, n).astype(np.int64),
            "credit_risk": rng.integers(1, 3, n).astype(np.int64),
        }
    )
    return {"people": people}


def german_pandas(people: pd.DataFrame) -> pd.DataFrame:
    df = people.replace({"status": STATUS})  # value transformation (code book)
    df = df.fillna({"savings": "unknown"})  # imputation
    df = df.assign(
        female=df["personal_status"].isin(["A92", "A95"]).astype("int64"),  # feature augmentation
        good=(df["credit_risk"] == 1).astype("int64"),  # label binarisation
        monthly=df["amount"] / df["duration"],  # space transformation
    )
    df = df[df["age"] >= 21]  # instance drop
    return df.drop(columns=["personal_status", "credit_risk"])  # feature selection


def german_spark(people: Any) -> Any:
    from pyspark.sql import functions as F

    df = people.replace(STATUS, subset=["status"])
    df = df.fillna({"savings": "unknown"})
    df = df.withColumn("female", F.col("personal_status").isin("A92", "A95").cast("long"))
    df = df.withColumn("good", (F.col("credit_risk") == 1).cast("long"))
    df = df.withColumn("monthly", F.col("amount") / F.col("duration"))
    df = df.filter(F.col("age") >= 21)
    return df.drop("personal_status", "credit_risk")


PIPELINES: dict[
    str, tuple[Callable[..., dict[str, pd.DataFrame]], Callable[..., Any], Callable[..., Any]]
] = {
    "census": (census_frames, census_pandas, census_spark),
    "compas": (compas_frames, compas_pandas, compas_spark),
    "german": (german_frames, german_pandas, german_spark),
}
"""name -> (data generator, pandas pipeline, PySpark pipeline)."""
