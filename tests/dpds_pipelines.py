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


# ---------------------------------------------------------------- the DPDS running example
# Three frames; a left join on (key1, key2) with duplicate keys and a null key that pandas
# matches to the other side's null key; fillna with a value and with a dict; one-hot `E`.

DF_A = pd.DataFrame({"key1": ["a", "a", "b", None], "key2": [1, 1, 2, 1], "A": [10, 11, 12, 13]})
DF_B = pd.DataFrame(
    {"key1": ["a", "b", "b", None], "key2": [1, 2, 2, 1], "C": ["c0", None, "c2", "c3"]}
)
DF_C = pd.DataFrame({"key1": ["a", "b"], "key2": [1, 2], "E": ["E1", None], "F": ["f0", None]})


def running_frames() -> dict[str, pd.DataFrame]:
    return {"df_A": DF_A.copy(), "df_B": DF_B.copy(), "df_C": DF_C.copy()}


def running_pandas(df_A: pd.DataFrame, df_B: pd.DataFrame, df_C: pd.DataFrame) -> pd.DataFrame:
    df = pd.merge(df_A, df_B, on=["key1", "key2"], how="left")  # join
    df = df.fillna("imputed")  # imputation
    df = pd.merge(df, df_C, on=["key1", "key2"], how="left")  # join
    df = df.fillna(value={"E": "Ex", "F": "Fx"})  # imputation
    c = "E"
    dummies = [pd.get_dummies(df[c])]  # one-hot encoding
    df_dummies = pd.concat(dummies, axis=1)
    df = pd.concat((df, df_dummies), axis=1)
    return df.drop([c], axis=1)


def running_spark(df_A: Any, df_B: Any, df_C: Any) -> Any:
    """The same on Spark. pandas matches null keys to each other, so the first join is
    null-safe (``eqNullSafe``) and keeps ``df_A``'s key columns; Spark has no null-safe USING
    join. After ``fillna`` no key is null, and the second join is a USING join as in pandas.
    The one-hot columns are comparisons, as ``get_dummies`` computes them."""
    from pyspark.sql import functions as F

    a, b = df_A.alias("a"), df_B.alias("b")
    on = F.col("a.key1").eqNullSafe(F.col("b.key1")) & F.col("a.key2").eqNullSafe(F.col("b.key2"))
    df = a.join(b, on, "left").select("a.key1", "a.key2", "a.A", "b.C")
    df = df.fillna("imputed")
    df = df.join(df_C, ["key1", "key2"], "left")
    df = df.fillna({"E": "Ex", "F": "Fx"})
    values = sorted(r["E"] for r in df.select("E").distinct().collect())
    df = df.select("*", *[(F.col("E") == v).alias(v) for v in values])
    return df.drop("E")


PIPELINES: dict[
    str, tuple[Callable[..., dict[str, pd.DataFrame]], Callable[..., Any], Callable[..., Any]]
] = {
    "census": (census_frames, census_pandas, census_spark),
    "compas": (compas_frames, compas_pandas, compas_spark),
    "german": (german_frames, german_pandas, german_spark),
}
"""name -> (data generator, pandas pipeline, PySpark pipeline)."""
