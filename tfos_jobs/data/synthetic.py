"""The embedded default data: a seeded, census-like warehouse of three related tables.

`people` has the UCI Adult columns with realistic marginals (and missing values where the real data has "?"), and an
income label drawn from a logistic model of them, so a model can beat the base rate clearly. `regions` maps each country
to attributes; `events` is an activity log of impressions and clicks (each on a page), ~`events_per_person` per person,
and of searches (their text in `query`), that carries a little signal too.

Rows are generated in fixed-size chunks, each from its own seed, so the data is identical whatever the number of Spark
partitions or executors."""
from __future__ import annotations

import datetime as dt
from functools import partial
from typing import Iterator

import numpy as np
import pandas as pd
from tfos_jobs import sessions

CHUNK = 25_000
WINDOW_DAYS = 90

WORKCLASS = {
    "Private": 0.738, "Self-emp-not-inc": 0.083, "Local-gov": 0.068, "State-gov": 0.042,
    "Self-emp-inc": 0.036, "Federal-gov": 0.031, "Without-pay": 0.0015, "Never-worked": 0.0005,
}
EDUCATION = {  # value: (share, education_num)
    "HS-grad": (0.323, 9), "Some-college": (0.224, 10), "Bachelors": (0.164, 13), "Masters": (0.053, 14),
    "Assoc-voc": (0.042, 11), "11th": (0.036, 7), "Assoc-acdm": (0.033, 12), "10th": (0.029, 6),
    "7th-8th": (0.020, 4), "Prof-school": (0.018, 15), "9th": (0.016, 5), "12th": (0.013, 8),
    "Doctorate": (0.013, 16), "5th-6th": (0.010, 3), "1st-4th": (0.005, 2), "Preschool": (0.001, 1),
}
OCCUPATION = {  # value: (share, how the share moves with education, income effect)
    "Prof-specialty": (0.135, 0.40, 0.65), "Craft-repair": (0.133, -0.10, 0.05),
    "Exec-managerial": (0.132, 0.30, 0.85), "Adm-clerical": (0.123, 0.00, -0.25),
    "Sales": (0.119, 0.05, 0.30), "Other-service": (0.107, -0.25, -1.00),
    "Machine-op-inspct": (0.065, -0.25, -0.45), "Transport-moving": (0.052, -0.20, -0.10),
    "Handlers-cleaners": (0.045, -0.30, -0.80), "Farming-fishing": (0.033, -0.25, -0.90),
    "Tech-support": (0.030, 0.20, 0.40), "Protective-serv": (0.021, 0.00, 0.35),
    "Priv-house-serv": (0.005, -0.40, -2.00), "Armed-Forces": (0.0003, 0.00, 0.00),
}
RACE = {"White": 0.854, "Black": 0.096, "Asian-Pac-Islander": 0.032, "Amer-Indian-Eskimo": 0.010, "Other": 0.008}
MARITAL_BY_AGE = {  # age band upper bound: shares in MARITAL order
    25: (0.12, 0.82, 0.03, 0.02, 0.00, 0.01, 0.0007),
    35: (0.45, 0.40, 0.10, 0.035, 0.002, 0.013, 0.0007),
    55: (0.60, 0.13, 0.18, 0.04, 0.03, 0.015, 0.0007),
    200: (0.58, 0.06, 0.15, 0.025, 0.17, 0.015, 0.0003),
}
MARITAL = ("Married-civ-spouse", "Never-married", "Divorced", "Separated", "Widowed",
           "Married-spouse-absent", "Married-AF-spouse")
# country: (share of people, region, income group, GDP per capita in thousands of USD)
COUNTRIES = {
    "United-States": (0.9125, "North-America", "High", 65.0), "Mexico": (0.0200, "Latin-America", "Upper-middle", 10.0),
    "Philippines": (0.0061, "Asia", "Lower-middle", 3.3), "Germany": (0.0042, "Europe", "High", 46.0),
    "Canada": (0.0037, "North-America", "High", 46.0), "Puerto-Rico": (0.0035, "Latin-America", "High", 32.0),
    "El-Salvador": (0.0033, "Latin-America", "Lower-middle", 4.0), "India": (0.0031, "Asia", "Lower-middle", 2.0),
    "Cuba": (0.0029, "Latin-America", "Upper-middle", 9.0), "England": (0.0028, "Europe", "High", 42.0),
    "Jamaica": (0.0025, "Latin-America", "Upper-middle", 5.0), "South": (0.0025, "Asia", "High", 31.0),
    "China": (0.0023, "Asia", "Upper-middle", 10.0), "Italy": (0.0022, "Europe", "High", 33.0),
    "Dominican-Republic": (0.0021, "Latin-America", "Upper-middle", 8.0), "Vietnam": (0.0021, "Asia", "Lower-middle", 2.7),
    "Guatemala": (0.0019, "Latin-America", "Upper-middle", 4.6), "Japan": (0.0019, "Asia", "High", 40.0),
    "Poland": (0.0018, "Europe", "High", 15.0), "Columbia": (0.0018, "Latin-America", "Upper-middle", 6.0),
    "Taiwan": (0.0016, "Asia", "High", 28.0), "Haiti": (0.0014, "Latin-America", "Low", 1.3),
    "Iran": (0.0013, "Middle-East", "Upper-middle", 5.5), "Portugal": (0.0011, "Europe", "High", 23.0),
    "Nicaragua": (0.0010, "Latin-America", "Lower-middle", 2.0), "Peru": (0.0010, "Latin-America", "Upper-middle", 6.7),
    "France": (0.0009, "Europe", "High", 40.0), "Greece": (0.0009, "Europe", "High", 19.0),
    "Ecuador": (0.0009, "Latin-America", "Upper-middle", 6.0), "Ireland": (0.0007, "Europe", "High", 78.0),
    "Hong": (0.0006, "Asia", "High", 46.0), "Cambodia": (0.0006, "Asia", "Lower-middle", 1.5),
    "Trinadad&Tobago": (0.0006, "Latin-America", "High", 16.0), "Laos": (0.0005, "Asia", "Lower-middle", 2.5),
    "Thailand": (0.0005, "Asia", "Upper-middle", 7.0), "Yugoslavia": (0.0005, "Europe", "Upper-middle", 7.0),
    "Outlying-US(Guam-USVI-etc)": (0.0004, "North-America", "High", 35.0), "Honduras": (0.0004, "Latin-America", "Lower-middle", 2.5),
    "Hungary": (0.0004, "Europe", "High", 16.0), "Scotland": (0.0004, "Europe", "High", 42.0),
    "Holand-Netherlands": (0.0001, "Europe", "High", 52.0),
}
REGION_EFFECT = {"North-America": 0.0, "Europe": 0.25, "Asia": 0.10, "Middle-East": 0.0, "Latin-America": -0.70}
WORKCLASS_EFFECT = {"Self-emp-inc": 0.75, "Federal-gov": 0.60, "Local-gov": 0.10, "Self-emp-not-inc": -0.30,
                    "Without-pay": -3.0, "Never-worked": -3.0}
MISSING_WORK = 0.056  # share of rows whose workclass and occupation are unknown ("?" in UCI Adult)
MISSING_COUNTRY = 0.018

# Pages people visit and the words they search for: value: (share, lean), the lean tilting the share by each person's
# taste level (-TASTE_LEVELS..TASTE_LEVELS), which leans on income a little.
TASTE_LEVELS = 4
SEARCH_SHARE = 0.25  # searches per person, as a share of events_per_person
SEARCH_PAGE = "/search"
PAGES = {
    "/home": (0.20, 0.0), "/news": (0.12, 0.1), "/sports": (0.08, -0.2), "/weather": (0.07, -0.1),
    "/jobs/search": (0.07, -0.5), "/deals/coupons": (0.07, -0.6), "/games": (0.06, -0.5), "/recipes": (0.04, -0.1),
    "/health": (0.04, 0.0), "/cars/used": (0.04, -0.3), "/realestate/rent": (0.04, -0.4),
    "/education/courses": (0.03, 0.2), "/finance/markets": (0.05, 0.9), "/finance/retirement": (0.04, 0.8),
    "/travel/flights": (0.05, 0.6), "/travel/hotels": (0.04, 0.5), "/cars/new": (0.03, 0.6),
    "/realestate/buy": (0.03, 0.8), "/shopping/luxury": (0.02, 1.0), "/careers/executive": (0.02, 1.2),
}
QUERY_WORDS = {
    "cheap": (0.05, -0.8), "free": (0.05, -0.7), "coupon": (0.03, -0.9), "jobs": (0.04, -0.6), "hiring": (0.03, -0.5),
    "near": (0.06, -0.2), "me": (0.06, -0.2), "best": (0.06, 0.1), "how": (0.05, 0.0), "to": (0.05, 0.0),
    "weather": (0.03, 0.0), "news": (0.03, 0.0), "recipe": (0.03, -0.1), "used": (0.02, -0.5), "car": (0.03, 0.0),
    "rent": (0.02, -0.5), "apartment": (0.02, -0.3), "mortgage": (0.02, 0.6), "rates": (0.02, 0.5),
    "stocks": (0.02, 0.9), "index": (0.02, 0.7), "fund": (0.02, 0.8), "retirement": (0.02, 0.8), "tax": (0.02, 0.5),
    "planning": (0.02, 0.5), "luxury": (0.01, 1.0), "hotel": (0.02, 0.5), "flights": (0.02, 0.6),
    "business": (0.02, 0.7), "wine": (0.01, 0.6), "golf": (0.01, 0.9), "kids": (0.03, 0.0), "school": (0.03, 0.1),
    "football": (0.03, -0.2), "scores": (0.02, -0.2), "lottery": (0.02, -0.9), "payday": (0.01, -1.2),
    "loan": (0.02, -0.6), "insurance": (0.02, 0.3),
}

PEOPLE_SCHEMA = (
    "person_id BIGINT, age INT, workclass STRING, fnlwgt INT, education STRING, education_num INT, "
    "marital_status STRING, occupation STRING, relationship STRING, race STRING, sex STRING, "
    "capital_gain INT, capital_loss INT, hours_per_week INT, native_country STRING, income STRING"
)
EVENTS_SCHEMA = "person_id BIGINT, ts TIMESTAMP, event_type STRING, page STRING, query STRING"
REGIONS_SCHEMA = "country STRING, region STRING, income_group STRING, gdp_per_capita DOUBLE"


def _choice(rng: np.random.Generator, values: list[str], shares, n: int) -> np.ndarray:
    p = np.asarray(shares, dtype=float)
    return np.asarray(values, dtype=object)[rng.choice(len(values), size=n, p=p / p.sum())]


def _row_choice(rng: np.random.Generator, weights: np.ndarray) -> np.ndarray:
    """One index per row, drawn from that row's (unnormalised) weights."""
    cum = np.cumsum(weights, axis=1)
    u = rng.random(weights.shape[0]) * cum[:, -1]
    return (cum < u[:, None]).sum(axis=1)


def people_chunk(chunk: int, n_people: int, seed: int) -> pd.DataFrame:
    """People [chunk*CHUNK, ...) as a DataFrame; the same chunk and seed always give the same rows."""
    start = chunk * CHUNK
    n = min(CHUNK, n_people - start)
    rng = np.random.default_rng([seed, chunk])
    age = np.clip(17 + rng.gamma(2.3, 9.3, n), 17, 90).astype(np.int32)
    sex = _choice(rng, ["Male", "Female"], [0.669, 0.331], n)
    edu_share, edu_num = map(np.array, zip(*EDUCATION.values()))  # the table's columns
    edu_idx = rng.choice(len(EDUCATION), size=n, p=edu_share / edu_share.sum())
    education = np.asarray(list(EDUCATION), dtype=object)[edu_idx]
    education_num = edu_num.astype(np.int32)[edu_idx]
    degree = education_num >= 13

    bands = np.array(list(MARITAL_BY_AGE))
    band = np.searchsorted(bands, age, side="left")
    marital_w = np.array(list(MARITAL_BY_AGE.values()))[band]
    marital = np.asarray(MARITAL, dtype=object)[_row_choice(rng, marital_w)]
    married = np.isin(marital, ["Married-civ-spouse", "Married-AF-spouse"])

    rel = np.where(sex == "Male", "Husband", "Wife").astype(object)
    single_young = (~married) & (age < 25)
    rel_single = _choice(rng, ["Own-child", "Not-in-family", "Other-relative", "Unmarried"], [0.6, 0.3, 0.05, 0.05], n)
    rel_other = _choice(rng, ["Not-in-family", "Unmarried", "Own-child", "Other-relative"], [0.55, 0.35, 0.05, 0.05], n)
    relationship = np.where(married, rel, np.where(single_young, rel_single, rel_other))

    occ_share, occ_slope, occ_effect = map(np.array, zip(*OCCUPATION.values()))
    occ_idx = _row_choice(rng, occ_share * np.exp(occ_slope * (education_num - 10)[:, None]))
    occupation = np.asarray(list(OCCUPATION), dtype=object)[occ_idx]
    workclass = _choice(rng, list(WORKCLASS), list(WORKCLASS.values()), n)
    race = _choice(rng, list(RACE), list(RACE.values()), n)
    country = _choice(rng, list(COUNTRIES), [v[0] for v in COUNTRIES.values()], n)

    has_gain = rng.random(n) < 0.035 + 0.05 * degree + 0.03 * (age > 40)
    gain = np.clip(np.exp(rng.normal(np.log(7000), 0.9, n)), 114, 99999).astype(np.int32)
    gain = np.where(rng.random(n) < 0.006, 99999, gain)
    capital_gain = np.where(has_gain, gain, 0).astype(np.int32)
    has_loss = rng.random(n) < 0.047
    capital_loss = np.where(has_loss, np.clip(rng.normal(1870, 360, n), 155, 4356), 0).astype(np.int32)
    hours = np.clip(np.round(rng.normal(40 + 3 * (sex == "Male") + 2 * degree, 11, n)), 1, 99)
    hours_per_week = np.where(rng.random(n) < 0.47, 40, hours).astype(np.int32)
    fnlwgt = np.clip(np.round(np.exp(rng.normal(12.0, 0.5, n))), 12285, 1484705).astype(np.int32)

    region_effect = np.array([REGION_EFFECT[COUNTRIES[c][1]] for c in country])
    work_effect = np.array([WORKCLASS_EFFECT.get(w, 0.0) for w in workclass])
    z = (
        -9.25
        + 0.065 * np.minimum(age, 50) - 0.035 * np.maximum(age - 58, 0)
        + 0.36 * education_num
        + 2.1 * married
        + 0.35 * (sex == "Male")
        + 0.035 * (hours_per_week - 40)
        + np.where(capital_gain >= 99999, 5.0, np.where(capital_gain > 5000, 2.8, 0.8 * (capital_gain > 0)))
        + 1.3 * (capital_loss > 1800)
        + occ_effect[occ_idx] + region_effect + work_effect
    )
    label = rng.random(n) < 1.0 / (1.0 + np.exp(-z))

    unknown_work = rng.random(n) < MISSING_WORK
    # None is a valid (object) scalar, which numpy's stubs do not accept
    workclass = np.where(unknown_work, None, workclass)  # type: ignore[call-overload]
    occupation = np.where(unknown_work, None, occupation)
    country = np.where(rng.random(n) < MISSING_COUNTRY, None, country)  # type: ignore[call-overload]
    return pd.DataFrame({
        "person_id": np.arange(start + 1, start + n + 1, dtype=np.int64),
        "age": age, "workclass": workclass, "fnlwgt": fnlwgt, "education": education,
        "education_num": education_num, "marital_status": marital, "occupation": occupation,
        "relationship": relationship, "race": race, "sex": sex, "capital_gain": capital_gain,
        "capital_loss": capital_loss, "hours_per_week": hours_per_week, "native_country": country,
        "income": np.where(label, ">50K", "<=50K"),
    })


def events_chunk(chunk: int, n_people: int, seed: int, per_person: float, as_of: str) -> pd.DataFrame:
    """The activity log of one chunk of people: recency and click rate lean a little on income, and so do the pages
    people visit and the words of their searches (a share of `per_person` more events, of type "search")."""
    people = people_chunk(chunk, n_people, seed)
    rng = np.random.default_rng([seed, chunk, 1])
    rich = (people["income"] == ">50K").to_numpy()
    counts = rng.poisson(per_person, len(people))
    owner = np.repeat(np.arange(len(people)), counts)
    gap = rng.exponential(np.where(rich, 3.0, 8.0))
    ts = _times(rng, gap[owner], as_of)
    edu = people["education_num"].to_numpy()
    p_click = 1.0 / (1.0 + np.exp(-(-2.3 + 0.5 * rich[owner] + 0.05 * (edu[owner] - 10))))
    event_type = np.where(rng.random(len(owner)) < p_click, "click", "impression")
    # pages and searches from a stream of their own: the columns above stay as they were
    taste_rng = np.random.default_rng([seed, chunk, 2])
    taste = _taste(taste_rng, rich, edu)
    searcher = np.repeat(np.arange(len(people)), taste_rng.poisson(per_person * SEARCH_SHARE, len(people)))
    owners = np.concatenate([owner, searcher])
    return pd.DataFrame({
        "person_id": people["person_id"].to_numpy()[owners],
        "ts": np.concatenate([ts, _times(taste_rng, gap[searcher], as_of)]).astype("datetime64[us]"),
        "event_type": np.concatenate([event_type, np.full(len(searcher), "search", dtype=object)]),
        "page": np.concatenate([_pick(taste_rng, PAGES, taste[owner]), np.full(len(searcher), SEARCH_PAGE)]),
        "query": np.concatenate([np.full(len(owner), None), _queries(taste_rng, taste[searcher])]),
    })


def _times(rng: np.random.Generator, gap_days: np.ndarray, as_of: str) -> np.ndarray:
    """Event times in the WINDOW_DAYS before `as_of`, none later than each event's owner's gap."""
    span = np.maximum(WINDOW_DAYS - gap_days, 0.0)
    seconds = (gap_days + rng.random(len(gap_days)) * span) * 86_400.0
    return np.datetime64(dt.date.fromisoformat(as_of), "s") - np.ceil(seconds).astype("timedelta64[s]")


def _taste(rng: np.random.Generator, rich: np.ndarray, education_num: np.ndarray) -> np.ndarray:
    """Each person's lean, as one of TASTE_LEVELS levels: the label's and education's a little, mostly noise."""
    lean = 0.3 * (2.0 * rich - 1.0) + 0.05 * (education_num - 10) + rng.normal(0.0, 1.0, len(rich))
    return np.clip(np.round(lean * 2.0), -TASTE_LEVELS, TASTE_LEVELS).astype(np.int64)


def _pick(rng: np.random.Generator, table: dict[str, tuple[float, float]], taste: np.ndarray) -> np.ndarray:
    """One value of `table` (value: share, lean) per row, drawn with shares tilted by the row's taste level."""
    share, lean = map(np.array, zip(*table.values()))
    u = rng.random(len(taste))
    codes = np.empty(len(taste), dtype=np.int64)
    for level in range(-TASTE_LEVELS, TASTE_LEVELS + 1):
        rows = taste == level
        cum = np.cumsum(share * np.exp(lean * level / 2.0))
        codes[rows] = np.searchsorted(cum / cum[-1], u[rows], side="right")
    return np.asarray(list(table), dtype=object)[np.minimum(codes, len(table) - 1)]


def _queries(rng: np.random.Generator, taste: np.ndarray) -> np.ndarray:
    """A search text of 2 to 4 words per row, the words drawn as pages are."""
    words = _pick(rng, QUERY_WORDS, np.repeat(taste, 4)).reshape(-1, 4)
    lengths = rng.integers(2, 5, len(taste))
    text = words[:, 0] + " " + words[:, 1]
    for k in (2, 3):
        text = np.where(lengths > k, text + " " + words[:, k], text)
    return text


def regions_frame() -> pd.DataFrame:
    return pd.DataFrame(
        [(c, region, group, gdp) for c, (_, region, group, gdp) in COUNTRIES.items()],
        columns=["country", "region", "income_group", "gdp_per_capita"],
    )


def _map_chunks(batches: Iterator[pd.DataFrame], make) -> Iterator[pd.DataFrame]:
    """Executor side: each input row is a chunk number."""
    for batch in batches:
        for chunk in batch["id"].tolist():
            yield make(int(chunk))


def generate(spark, output: str, people: int, events_per_person: float, seed: int, as_of: str) -> dict[str, int]:
    """Write `people`, `regions` and `events` as Parquet under `output`; return their row counts."""
    chunks = (people + CHUNK - 1) // CHUNK
    parallelism = max(1, min(chunks, sessions.default_parallelism(spark) * 2))
    ids = spark.range(0, chunks, numPartitions=parallelism)
    make_people = partial(people_chunk, n_people=people, seed=seed)
    make_events = partial(events_chunk, n_people=people, seed=seed, per_person=events_per_person, as_of=as_of)
    ids.mapInPandas(partial(_map_chunks, make=make_people), PEOPLE_SCHEMA) \
        .write.mode("overwrite").parquet(f"{output}/people")
    ids.mapInPandas(partial(_map_chunks, make=make_events), EVENTS_SCHEMA) \
        .write.mode("overwrite").parquet(f"{output}/events")
    spark.createDataFrame(regions_frame(), REGIONS_SCHEMA).coalesce(1) \
        .write.mode("overwrite").parquet(f"{output}/regions")
    return {"people": people, "regions": len(COUNTRIES), "events": spark.read.parquet(f"{output}/events").count()}
