"""Calibrate the drift thresholds (docs/drift.md): false alarms on resamples, and planted shifts.

For each family, a synthetic dataset of N records (N = 1,000 and 10,000) is profiled as scrub
profiles it (`scrub.profile.sketches.Numeric`, sampled as a scan samples: rows and
the images' levels of a large dataset by index; 101 quantiles, exact counts), then compared
(`scrub.profile.drift.compare`, the default thresholds) with the profile of:

* a bootstrap resample of it (the same data; what must raise nothing, of any id): R times;
* two bootstrap resamples of it against each other ("two nights" of the same source): R times;
* the same data with a shift planted (a class removed, a class share moved 30%, a feature's mean
  moved by two standard deviations, images resized to half, token lengths doubled, the most
  frequent ids changed, a third of the records gone): R/10 times each.

It also measures, over the numeric features of the resamples, the distributions of the
Jensen-Shannon distance and of PSI on 10 and on 100 equiprobable bins, without the sampling
floor: what decided JS over PSI and deciles over percentiles.

    python benchmarks/calibrate_drift.py [--resamples 300] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from scrub.profile.collect import ProfileSettings
from scrub.profile.drift import DriftThresholds, bin_masses, compare, js_distance, psi
from scrub.profile.sketches import Numeric


def numeric(values: np.ndarray, stride: int = 1) -> dict[str, Any]:
    """A Numeric as a scan's profile states it (`scrub.profile.sketches.Numeric`: exact
    quantiles up to 8,192 values, a KLL sketch beyond), of every ``stride``-th value by index
    (the scan's sample: `ProfileSettings`)."""
    numeric = Numeric()
    numeric.add(np.asarray(values)[::stride])
    return numeric.to_dict()


def sampling(n: int) -> ProfileSettings:
    """How a scan samples a dataset of ``n`` records (rows, sequences, images' levels)."""
    return ProfileSettings.of(n, None, False)


def histogram(values: np.ndarray) -> dict[str, int]:
    names, counts = np.unique(values, return_counts=True)
    return {str(name): int(count) for name, count in zip(names.tolist(), counts.tolist())}


# ---- the synthetic datasets: (make(n, rng) -> data, profile(data) -> dict, resample(data, idx) -> data)


def make_labels(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    shares = np.array([0.3, 0.2, 0.15, 0.1, 0.08, 0.06, 0.05, 0.03, 0.02, 0.01])
    classes = rng.choice(len(shares), size=n, p=shares)
    labelled = rng.random(n) > 0.01
    return {"classes": classes, "labelled": labelled}


def profile_labels(data: dict[str, np.ndarray]) -> dict[str, Any]:
    labelled = data["labelled"]
    n = len(labelled)
    return {
        "version": 1,
        "records": n,
        "labels": {
            "kind": "class",
            "labelled": int(labelled.sum()),
            "missing": int(n - labelled.sum()),
            "classes": histogram(data["classes"][labelled]),
        },
    }


def make_arrays(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    columns = [
        *(rng.normal(i, 1 + i, n) for i in range(4)),
        *(rng.lognormal(0, 1, n) for _ in range(4)),
        *(rng.integers(0, 6, n).astype(float) for _ in range(4)),
        *(np.where(rng.random(n) < 0.9, 0.0, rng.normal(0, 1, n)) for _ in range(2)),
        *(rng.uniform(-1, 1, n) for _ in range(2)),
    ]
    return {"rows": np.stack(columns, axis=1).astype(np.float32)}


def profile_arrays(data: dict[str, np.ndarray]) -> dict[str, Any]:
    rows = data["rows"]
    n, width = rows.shape
    return {
        "version": 1,
        "records": n,
        "arrays": {
            str(width): {
                "records": n,
                "dtypes": {str(rows.dtype): n},
                "row": numeric(rows[:: sampling(n).stride].ravel()),
                "features": {str(i): numeric(rows[:, i], sampling(n).stride) for i in range(width)},
                "positions": width,
            }
        },
    }


def make_images(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    common = rng.random(n) < 0.5
    width = np.where(common, 640, rng.integers(100, 1000, n))
    height = np.where(common, 480, rng.integers(100, 1000, n))
    modes = rng.choice(np.array(["RGB", "L", "RGBA"]), size=n, p=[0.95, 0.04, 0.01])
    brightness = np.clip(rng.normal(120, 40, n), 0, 255)
    contrast = rng.gamma(4, 12, n)
    return {"width": width, "height": height, "modes": modes, "brightness": brightness, "contrast": contrast}


def profile_images(data: dict[str, np.ndarray]) -> dict[str, Any]:
    n = len(data["width"])
    return {
        "version": 1,
        "records": n,
        "images": {
            "records": n,
            "width": numeric(data["width"]),
            "height": numeric(data["height"]),
            "modes": histogram(data["modes"]),
            "formats": {"JPEG": n},
            "brightness": numeric(data["brightness"], sampling(n).image_stride),
            "contrast": numeric(data["contrast"], sampling(n).image_stride),
        },
    }


VOCABULARY, TRACKED = 50_000, 256


def make_tokens(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    lengths = np.maximum(1, rng.lognormal(5, 0.6, n).astype(int))
    supervised = np.where(rng.random(n) < 0.2, 1.0, rng.beta(2, 5, n))
    # each sequence's counts of the TRACKED most frequent ids of a Zipf vocabulary (the rest are
    # rare: they never reach the top 64)
    weights = 1.0 / np.arange(1, VOCABULARY + 1) ** 1.1
    weights /= weights.sum()
    counts = rng.binomial(lengths[:, None], weights[None, :TRACKED])
    return {"lengths": lengths, "supervised": supervised, "counts": counts, "ids": np.arange(TRACKED)}


def profile_tokens(data: dict[str, np.ndarray]) -> dict[str, Any]:
    n = len(data["lengths"])
    totals = data["counts"].sum(axis=0)
    top = np.argsort(-totals, kind="stable")[:64]
    return {
        "version": 1,
        "records": n,
        "tokens": {
            "records": n,
            "length": numeric(data["lengths"]),
            "supervised": numeric(data["supervised"]),
            "top_ids": [[int(data["ids"][i]), int(totals[i])] for i in top],
            "max_id": VOCABULARY - 1,
        },
    }


def resample(data: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    return {name: (values if name == "ids" else values[rows]) for name, values in data.items()}


# ---- the planted shifts: data -> data


def class_removed(data, rng):
    keep = data["classes"] != 5  # 6% of the records
    return resample(data, np.flatnonzero(keep))


def class_share_moved(data, rng):
    # class 0's share moved by 30% (0.30 -> ~0.21): drop 38% of its records
    drop = (data["classes"] == 0) & (rng.random(len(data["classes"])) < 0.38)
    return resample(data, np.flatnonzero(~drop))


def mean_moved(data, rng):
    rows = data["rows"].copy()
    rows[:, 0] += 2 * rows[:, 0].std()
    return {"rows": rows}


def all_zeros(data, rng):
    rows = data["rows"].copy()
    rows[:, 4] = 0
    return {"rows": rows}


def resized(data, rng):
    return {**data, "width": data["width"] // 2, "height": data["height"] // 2}


def lengths_doubled(data, rng):
    return {**data, "lengths": data["lengths"] * 2, "counts": data["counts"] * 2}


def ids_changed(data, rng):
    return {**data, "ids": data["ids"] + 1000}  # a different tokenizer: the same counts, other ids


def third_gone(data, rng):
    n = len(next(iter(data.values())))
    return resample(data, np.arange(n - n // 3))


FAMILIES: dict[str, tuple[Callable, Callable, list[tuple[str, Callable]]]] = {
    "label": (
        make_labels,
        profile_labels,
        [("a class removed (6%)", class_removed), ("a class share moved 30%", class_share_moved)],
    ),
    "value": (
        make_arrays,
        profile_arrays,
        [("a feature's mean moved 2 sd", mean_moved), ("a feature all zeros", all_zeros)],
    ),
    "size": (make_images, profile_images, [("images resized to half", resized)]),
    "length": (make_tokens, profile_tokens, [("token lengths doubled", lengths_doubled)]),
    "token": (make_tokens, profile_tokens, [("other token ids", ids_changed)]),
    "records": (make_labels, profile_labels, [("a third of the records gone", third_gone)]),
}


def raised(findings, family: str) -> list:
    """The findings of ``family``'s own ids (a planted shift may move others too)."""
    from scrub.profile.drift import FAMILY_CHECKS

    wanted = {FAMILY_CHECKS[family], "dtype-change"}
    return [f for f in findings if f.check in wanted]


def calibrate(resamples: int, sizes: list[int], seed: int) -> dict[str, Any]:
    thresholds = DriftThresholds()
    results: dict[str, Any] = {}
    for number, (family, (make, profile, shifts)) in enumerate(FAMILIES.items()):
        for n in sizes:
            rng = np.random.default_rng([seed, number])  # each family its own data and resamples
            data = make(n, rng)
            baseline = profile(data)
            alarms = pairs = 0
            worst: dict[str, int] = {}
            for _ in range(resamples):
                tonight = profile(resample(data, rng.integers(0, n, n)))
                found = compare(baseline, tonight, thresholds)  # any id is a false alarm
                alarms += bool(found)
                other = profile(resample(data, rng.integers(0, n, n)))
                pair = compare(other, tonight, thresholds)
                pairs += bool(pair)
                for finding in [*found, *pair]:
                    worst[finding.feature] = worst.get(finding.feature, 0) + 1
            caught = {}
            for name, shift in shifts:
                hits = 0
                tries = max(5, resamples // 10)
                for _ in range(tries):
                    shifted = profile(shift(resample(data, rng.integers(0, n, n)), rng))
                    hits += bool(raised(compare(baseline, shifted, thresholds), family))
                caught[name] = hits / tries
            results[f"{family}/{n}"] = {
                "resamples": resamples,
                "false_alarms": alarms / resamples,
                "false_alarms_two_nights": pairs / resamples,
                "alarmed_features": worst,
                "caught": caught,
            }
            print(
                f"{family:8} N={n:>6,}: false alarms {alarms}/{resamples} (resample vs data), "
                f"{pairs}/{resamples} (two resamples); caught: "
                + ", ".join(f"{name} {rate:.0%}" for name, rate in caught.items()),
                flush=True,
            )
    return results


def methods(resamples: int, sizes: list[int], seed: int) -> dict[str, Any]:
    """The null distributions of JS and PSI over 10 and 100 bins, and their value on a 2 sd and a
    0.5 sd mean shift, over the 16 array features (no sampling floor, no threshold)."""
    found: dict[str, Any] = {}
    edges = {"10 bins": tuple(range(0, 101, 10)), "100 bins": tuple(range(101))}
    for n in sizes:
        rng = np.random.default_rng(seed + 1)
        data = make_arrays(n, rng)
        baseline = profile_arrays(data)["arrays"]["16"]["features"]
        null: dict[str, list[float]] = {}
        for _ in range(resamples):
            tonight = profile_arrays(resample(data, rng.integers(0, n, n)))["arrays"]["16"]["features"]
            for label, edge in edges.items():
                for position, feature in baseline.items():
                    p, q = bin_masses(feature["quantiles"], tonight[position]["quantiles"], edge)
                    null.setdefault(f"JS {label}", []).append(js_distance(p, q))
                    null.setdefault(f"PSI {label}", []).append(psi(p, q))
        shifted_values: dict[str, dict[str, float]] = {}
        for shift in (0.5, 2.0):
            rows = data["rows"].copy()
            rows[:, 0] += shift * rows[:, 0].std()
            moved = profile_arrays({"rows": rows})["arrays"]["16"]["features"]["0"]
            for label, edge in edges.items():
                p, q = bin_masses(baseline["0"]["quantiles"], moved["quantiles"], edge)
                shifted_values.setdefault(f"JS {label}", {})[f"{shift} sd"] = js_distance(p, q)
                shifted_values.setdefault(f"PSI {label}", {})[f"{shift} sd"] = psi(p, q)
        for metric, values in null.items():
            array = np.asarray(values)
            found[f"{metric}/{n}"] = {
                "null_p99": float(np.quantile(array, 0.99)),
                "null_p999": float(np.quantile(array, 0.999)),
                "null_max": float(array.max()),
                **shifted_values[metric],
            }
            row = found[f"{metric}/{n}"]
            print(
                f"{metric:13} N={n:>6,}: resamples p99 {row['null_p99']:.3f}, p99.9 {row['null_p999']:.3f}, "
                f"max {row['null_max']:.3f}; mean +0.5 sd {row['0.5 sd']:.3f}, +2 sd {row['2.0 sd']:.3f}",
                flush=True,
            )
    return found


def sketch_noise(repeats: int, seed: int) -> dict[str, Any]:
    """How far two KLL sketches (k=200) of the same values differ over the deciles, as the record
    count of two samples that differ as much (`scrub.profile.drift.SKETCH_RECORDS`)."""
    import math

    rng = np.random.default_rng(seed + 2)
    found = {}
    for n in (20_000, 200_000):
        values = rng.normal(size=n)
        distances = np.asarray(
            [
                js_distance(
                    *bin_masses(
                        numeric(rng.permutation(values))["quantiles"],
                        numeric(rng.permutation(values))["quantiles"],
                    )
                )
                for _ in range(repeats)
            ]
        )
        nats = float(np.mean(distances**2)) * math.log(2)
        equivalent = 2 * 9 / (8 * nats)  # E[JS divergence] = (bins - 1)(1/n + 1/m)/8 nats
        found[str(n)] = {
            "mean": float(distances.mean()),
            "max": float(distances.max()),
            "records": equivalent,
        }
        print(
            f"sketch noise, {n:,} values sketched twice: JS mean {distances.mean():.3f}, max "
            f"{distances.max():.3f}: as two samples of {equivalent:,.0f} values",
            flush=True,
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--resamples", type=int, default=300)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the results here")
    arguments = parser.parse_args()
    started = time.perf_counter()
    results = {
        "thresholds": dataclasses.asdict(DriftThresholds()),
        "sketch": sketch_noise(max(20, arguments.resamples // 5), arguments.seed),
        "families": calibrate(arguments.resamples, arguments.sizes, arguments.seed),
        "methods": methods(max(20, arguments.resamples // 5), arguments.sizes, arguments.seed),
    }
    print(f"{time.perf_counter() - started:.0f} s")
    if arguments.json:
        with open(arguments.json, "w") as file:
            json.dump(results, file, indent=2)


if __name__ == "__main__":
    main()
