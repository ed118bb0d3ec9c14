"""The embeddings cache of ``uvexport calibrate --cache`` and the leave-one-source-out benchmarks
that read it (benchmarks/far_generalisation.py, far_rules.py, far_chain.py, far_centring.py)."""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.processes import run_until_stalled
from uvexport.calibrate import embed_conditions, people_folders
from uvsdk import Bundle

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "far_generalisation.py"
RULES = BENCHMARK.with_name("far_rules.py")
CENTRING = BENCHMARK.with_name("far_centring.py")
CONDITIONS = BENCHMARK.with_name("calibration_conditions.py")


def three_sources(people_dir: Path, speakers: Path) -> set[str]:
    """The test people copied under ``speakers`` as three sources of 6-7 speakers each, named
    ``<source>-<speaker>``; returns the folder names."""
    for number, person in enumerate(sorted(p for p in people_dir.iterdir() if p.is_dir())):
        shutil.copytree(person, speakers / f"{'abc'[number % 3]}-{person.name}")
    return {p.name for p in speakers.iterdir()}


def run_benchmark(
    script: Path, speakers: Path, out: Path, bundle: Path, cache: Path, extra: tuple = ()
) -> str:
    """Runs a leave-one-source-out benchmark at FAR 0.05 in two conditions; its stdout."""
    command = [sys.executable, str(script), "--speakers", str(speakers), "--out", str(out)]
    command += ["--bundle", str(bundle), "--conditions", "clean,telephone-gsm"]
    command += ["--far", "0.05", "--cache", str(cache), *extra]
    result = run_until_stalled(command, stall_seconds=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_the_embeddings_cache_is_read_back_and_keyed_by_what_made_it(
    spectral_bundle: Path, people_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = Bundle(spectral_bundle)
    people = dict(list(people_folders(people_dir).items())[:4])
    cache = tmp_path / "emb.npz"
    first = embed_conditions(bundle, people, ("clean", "telephone-gsm"), cache=cache)
    assert cache.is_file()

    import uvsdk.verifier

    def no_embedding(*args: object, **kwargs: object) -> None:
        raise AssertionError("embedded again although the cache holds these embeddings")

    monkeypatch.setattr(uvsdk.verifier.Verifier, "embed", no_embedding)
    again = embed_conditions(bundle, people, ("clean", "telephone-gsm"), cache=cache)
    for condition, by_person in first.vectors.items():
        for person, vectors in by_person.items():
            np.testing.assert_array_equal(again.vectors[condition][person], vectors)
            np.testing.assert_array_equal(
                again.seconds[condition][person], first.seconds[condition][person]
            )
    assert again.used == first.used and again.skipped == first.skipped
    # other conditions, or other files, are another key: embedded again (here: refused)
    with pytest.raises(AssertionError, match="embedded again"):
        embed_conditions(bundle, people, ("clean",), cache=cache)
    fewer = dict(list(people.items())[:3])
    with pytest.raises(AssertionError, match="embedded again"):
        embed_conditions(bundle, fewer, ("clean", "telephone-gsm"), cache=cache)


def test_a_persons_simulated_conditions_do_not_move_when_someone_joins_the_folder(
    spectral_bundle: Path, people_dir: Path
) -> None:
    """Noise and reverberation are seeded by the person's name, not their place in the folder:
    adding a source once re-seeded every later person's audio, so a re-measured FAR changed
    for people whose recordings had not."""
    bundle = Bundle(spectral_bundle)
    everyone = list(people_folders(people_dir).items())
    alone = dict(everyone[2:4])
    joined = dict(everyone[:4])  # two people now come first
    conditions = ("noise-10db",)
    before = embed_conditions(bundle, alone, conditions)
    after = embed_conditions(bundle, joined, conditions)
    for condition in conditions:
        for person in alone:
            np.testing.assert_array_equal(
                after.vectors[condition][person], before.vectors[condition][person]
            )


def test_the_benchmark_never_tests_on_what_it_calibrated_on(
    spectral_bundle: Path, people_dir: Path, tmp_path: Path
) -> None:
    speakers, out = tmp_path / "speakers", tmp_path / "eval"
    everyone = three_sources(people_dir, speakers)
    # every other person (by name) female, the rest male; one unknown
    genders = {name: ("female", "male")[n % 2] for n, name in enumerate(sorted(everyone))}
    genders[sorted(everyone)[0]] = "unknown"
    (tmp_path / "genders.json").write_text(json.dumps(genders))
    extra = ("--genders", str(tmp_path / "genders.json"))
    stdout = run_benchmark(BENCHMARK, speakers, out, spectral_bundle, tmp_path / "emb.npz", extra)
    report = json.loads((out / "report.json").read_text())
    assert [fold["source"] for fold in report["folds"]] == ["a", "b", "c"]
    assert report["impostor"] == "within_source"
    assert report["genders"]["people"] == genders
    for fold in report["folds"]:
        held_out = {name for name in everyone if name.startswith(fold["source"] + "-")}
        assert fold["speakers"] == len(held_out)
        assert set(fold["calibrated_on"]) == everyone - held_out  # disjoint, and all the rest
        assert [row["condition"] for row in fold["rows"]] == ["clean", "telephone-gsm"]
        for row in fold["rows"]:
            assert row["stated_far"] == 0.05
            assert row["ratio"] == pytest.approx(row["observed_far"] / 0.05)
            assert 0.0 <= row["observed_far"] <= 1.0 and 0.0 <= row["frr"] <= 1.0
            # every test person is enrolled here (enough clips): their pairs are all there
            classes, n = row["impostor_classes"], row["speakers"]
            assert n == len(held_out)
            within, cross = classes["within_source"], classes["cross_source"]
            assert (within["trials"], within["far"]) == (row["impostor"], row["observed_far"])
            assert within["pairs"] == n * (n - 1)
            assert cross["pairs"] == n * (len(everyone) - n)
            same = sum(
                genders[a] == genders[b] != "unknown" for a in held_out for b in held_out if a != b
            )
            assert classes["within_source_same_gender"]["pairs"] == same > 0
        assert fold["impostor_pairs"]["cross_source"] == n * (len(everyone) - n)
    summary = report["summary"]
    rows = [row for fold in report["folds"] for row in fold["rows"]]
    pooled = sum(r["observed_far"] * r["impostor"] for r in rows) / sum(r["impostor"] for r in rows)
    assert summary["pooled_far"] == pytest.approx(pooled)
    assert summary["impostor_classes"]["within_source"]["far"] == pytest.approx(pooled)
    cross = [r["impostor_classes"]["cross_source"] for r in rows]
    assert summary["impostor_classes"]["cross_source"]["far"] == pytest.approx(
        sum(c["false_accepts"] for c in cross) / sum(c["trials"] for c in cross)
    )
    assert "pooled: FAR" in stdout
    assert "pooled cross-source (calibration people): FAR" in stdout
    assert "pooled same gender within-source: FAR" in stdout
    for name in ("far.png", "frr.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the score rule as uvexport calibrate --cohort-size 0 makes it: raw cosines, so the scores
    # the rows call normalised are the raw ones (same cache: nothing embedded again)
    raw = tmp_path / "raw"
    run_benchmark(BENCHMARK, speakers, raw, spectral_bundle, tmp_path / "emb.npz", ("--cohort-size", "0"))  # fmt: skip
    report = json.loads((raw / "report.json").read_text())
    assert report["cohort_size"] == 0
    for fold in report["folds"]:
        for row in fold["rows"]:
            assert row["eer"] == row["eer_raw"]


def test_the_rules_benchmark_reproduces_todays_rule_and_the_oracle_bounds_it(
    spectral_bundle: Path, people_dir: Path, tmp_path: Path
) -> None:
    speakers, cache = tmp_path / "speakers", tmp_path / "emb.npz"
    three_sources(people_dir, speakers)
    run_benchmark(BENCHMARK, speakers, tmp_path / "today", spectral_bundle, cache)
    stdout = run_benchmark(RULES, speakers, tmp_path / "rules", spectral_bundle, cache)
    today = json.loads((tmp_path / "today" / "report.json").read_text())
    rules = json.loads((tmp_path / "rules" / "report.json").read_text())
    assert [fold["source"] for fold in rules["folds"]] == ["a", "b", "c"]
    for fold_today, fold in zip(today["folds"], rules["folds"], strict=True):
        for row_today, row in zip(fold_today["rows"], fold["rules"]["global"], strict=True):
            assert row["condition"] == row_today["condition"]
            assert row["impostor"] == row_today["impostor"]
            assert row["genuine"] == row_today["genuine"]
            assert row["observed_far"] == row_today["observed_far"]
            assert row["false_rejects"] / row["genuine"] == row_today["frr"]
    summary = rules["summary"]["global"]
    assert summary["far"] == today["summary"]["pooled_far"]
    assert summary["frr"] == today["summary"]["pooled_frr"]
    assert summary["frr_long"] == today["summary"]["pooled_frr_long"]
    assert summary["worst_ratio"] == today["summary"]["worst_ratio"]
    # the oracle's threshold gives FAR 2 x 0.05 on the test trials themselves: where today's rule
    # accepts no more impostors than that, it cannot reject fewer owners
    compared = 0
    for fold in rules["folds"]:
        for row, oracle in zip(fold["rules"]["global"], fold["rules"]["oracle"], strict=True):
            assert oracle["observed_far"] <= 2 * 0.05
            if row["observed_far"] <= oracle["observed_far"]:
                assert oracle["false_rejects"] <= row["false_rejects"]
                compared += 1
    assert compared
    # the chain rule only raises today's thresholds (to the worst calibration source's own): it
    # never accepts more impostors nor rejects fewer owners, and it is stricter somewhere here
    stricter = 0
    for fold in rules["folds"]:
        for row, chain in zip(fold["rules"]["global"], fold["rules"]["chain"], strict=True):
            assert chain["false_accepts"] <= row["false_accepts"]
            assert chain["false_rejects"] >= row["false_rejects"]
            stricter += chain["false_rejects"] > row["false_rejects"]
    assert stricter
    assert set(rules["summary"]) == {"global", "buckets", "qmf", "chain", "oracle"}
    assert "not a rule" in stdout
    assert (tmp_path / "rules" / "rules.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # far_centring.py's "as shipped" arm is this benchmark's global and chain rules and oracle
    run_benchmark(CENTRING, speakers, tmp_path / "centring", spectral_bundle, cache)
    centring = json.loads((tmp_path / "centring" / "report.json").read_text())
    assert [fold["source"] for fold in centring["folds"]] == ["a", "b", "c"]
    for fold, centred in zip(rules["folds"], centring["folds"], strict=True):
        for name in ("global", "chain", "oracle"):
            assert centred["arms"]["as shipped"][name] == fold["rules"][name]
        assert len(centred["arms"]["centred"]["global"]) == len(fold["rules"]["global"])
    assert centring["summary"]["as shipped"]["global"] == summary
    assert (tmp_path / "centring" / "centring.png").stat().st_size > 0


def test_the_deciding_condition_is_the_tables_threshold(
    spectral_bundle: Path, people_dir: Path, tmp_path: Path
) -> None:
    """calibration_conditions.py prints the table's threshold beside each condition's own: the
    table's is the worst condition's own, and no condition accepts more than the FAR at it."""
    command = [sys.executable, str(CONDITIONS), "--speakers", str(people_dir)]
    command += ["--bundle", str(spectral_bundle), "--conditions", "clean,telephone-gsm"]
    command += ["--far", "0.05", "--cache", str(tmp_path / "emb.npz")]
    result = run_until_stalled(command, stall_seconds=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    found = re.fullmatch(
        r"FAR 0.05: the table's threshold (\S+); the worst condition's own (\S+)", lines[0]
    )
    assert found, lines[0]
    table, worst = float(found[1]), float(found[2])
    assert table == pytest.approx(worst, abs=1e-3)
    rows = [line.split() for line in lines[2:]]
    assert sorted(row[0] for row in rows) == ["clean", "telephone-gsm"]
    assert max(float(row[1]) for row in rows) == pytest.approx(table, abs=1e-3)
    assert all(float(row[4]) <= 0.05 for row in rows)


CHAIN = BENCHMARK.with_name("far_chain.py")


def test_the_chain_benchmark_tests_only_people_it_never_calibrated_on(
    spectral_bundle: Path, people_dir: Path, tmp_path: Path
) -> None:
    """far_chain.py splits one source's speakers in two halves: each half is tested, both
    without any of the source calibrated on and with the other half calibrated on, on the same
    trials; the halves are disjoint and together the whole source. A source too small to split is
    refused in one line, exit code 2."""
    speakers = tmp_path / "speakers"
    everyone = three_sources(people_dir, speakers)
    members = sorted(name for name in everyone if name.startswith("a-"))
    command = [sys.executable, str(CHAIN), "--speakers", str(speakers), "--source", "a"]
    command += ["--out", str(tmp_path / "chain"), "--bundle", str(spectral_bundle)]
    command += ["--conditions", "clean,telephone-gsm", "--far", "0.05"]
    command += ["--cache", str(tmp_path / "emb.npz"), "--counts", "1"]
    result = run_until_stalled(command, stall_seconds=300)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads((tmp_path / "chain" / "report.json").read_text())
    splits = report["splits"]
    # --counts 1: the same test half, with only the first of the other half calibrated on
    for entry in splits:
        one = entry["counts"]["1"]
        assert one["calibrated_on"] == entry["calibrated_on"][:1]
        assert [r["impostor"] for r in one["rows"]] == [
            r["impostor"] for r in entry["with"]["rows"]
        ]
    curve = {point["count"]: point for point in report["curve"]}
    assert sorted(curve) == [0, 1, 3] if len(members) == 6 else sorted(curve) == [0, 1, 3, 4]
    assert curve[0]["far"] == pytest.approx(report["summary"]["without"]["far"])
    assert (tmp_path / "chain" / "chain.png").stat().st_size > 0
    assert [entry["tested"] for entry in splits] == [members[1::2], members[0::2]]
    for entry in splits:
        assert set(entry["calibrated_on"]).isdisjoint(entry["tested"])
        assert sorted(entry["calibrated_on"] + entry["tested"]) == members
        without, with_ = entry["without"]["rows"], entry["with"]["rows"]
        assert [row["condition"] for row in without] == ["clean", "telephone-gsm"]
        for row_without, row_with in zip(without, with_, strict=True):
            assert row_without["impostor"] == row_with["impostor"]
            assert row_without["genuine"] == row_with["genuine"]
    baseline = {entry["without"]["threshold"] for entry in splits}
    assert len(baseline) == 1  # the baseline calibration has none of the source, in both splits
    for arm in ("without", "with"):
        rows = [row for entry in splits for row in entry[arm]["rows"]]
        far = sum(row["false_accepts"] for row in rows) / sum(row["impostor"] for row in rows)
        assert report["summary"][arm]["far"] == pytest.approx(far)
        assert f"{arm:8s} FAR {far:.4f}" in result.stdout

    small = command[:]
    small[small.index("a")] = "nobody"
    refused = run_until_stalled(small, stall_seconds=300)
    assert refused.returncode == 2
    assert "--source nobody: 0 speakers; a split needs 4 or more" in refused.stderr


def _benchmark_module():
    """benchmarks/far_generalisation.py as a module (benchmarks/ is not a package)."""
    import importlib.util

    sys.path.insert(0, str(BENCHMARK.parent))
    spec = importlib.util.spec_from_file_location("far_generalisation", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_impostor_pairs_are_classed_and_counted_by_source_and_gender() -> None:
    """The pair classes and their counts, on pairs whose counts are written out here: a-ann and
    a-cat are women of source a, a-bob a man, a-dan unknown; b-eve and b-fay are of source b."""
    far = _benchmark_module()
    genders = {"a-ann": "female", "a-bob": "male", "a-cat": "female", "a-dan": "unknown"}
    genders |= {"b-eve": "female", "b-fay": "female"}
    both = ("within_source", "within_source_same_gender")
    assert far.pair_classes("a-ann", "a-cat", genders) == both
    assert far.pair_classes("a-ann", "a-bob", genders) == ("within_source",)
    assert far.pair_classes("a-dan", "a-ann", genders) == ("within_source",)  # unknown: no pair
    assert far.pair_classes("a-ann", "a-zed", genders) == ("within_source",)  # not labelled
    assert far.pair_classes("a-ann", "b-eve", genders) == ("cross_source",)  # same gender too

    def counts(trials: int, fa: int, long: int, long_fa: int) -> dict[str, int]:
        return {
            "trials": trials,
            "false_accepts": fa,
            "long_trials": long,
            "long_false_accepts": long_fa,
        }

    pairs = {
        ("a-ann", "a-bob"): counts(10, 1, 4, 1),
        ("a-ann", "a-cat"): counts(10, 3, 5, 2),
        ("a-cat", "a-ann"): counts(8, 2, 0, 0),
        ("a-dan", "a-ann"): counts(6, 0, 6, 0),
        ("a-ann", "b-eve"): counts(20, 1, 10, 1),
        ("a-cat", "b-fay"): counts(20, 0, 0, 0),
    }
    classes = far.class_counts(pairs, genders, stated=0.5)
    assert set(classes) == set(far.IMPOSTOR_CLASSES)
    within = classes["within_source"]
    assert (within["pairs"], within["trials"], within["false_accepts"]) == (4, 34, 6)
    assert (within["long_trials"], within["long_false_accepts"]) == (15, 3)
    assert within["far"] == pytest.approx(6 / 34) and within["far_long"] == pytest.approx(3 / 15)
    assert within["resolvable"]  # 0.5 x 34 = 17 expected false accepts
    same = classes["within_source_same_gender"]
    assert (same["pairs"], same["trials"], same["false_accepts"]) == (2, 18, 5)
    assert same["far"] == pytest.approx(5 / 18) and same["far_long"] == pytest.approx(2 / 5)
    assert not same["resolvable"]  # 0.5 x 18 = 9
    cross = classes["cross_source"]
    assert (cross["pairs"], cross["trials"], cross["false_accepts"]) == (2, 40, 1)
    assert cross["far"] == pytest.approx(0.025) and cross["far_long"] == pytest.approx(0.1)
    empty = far.class_counts({}, genders, stated=0.5)["cross_source"]
    assert empty["far"] is None and empty["far_long"] is None and empty["pairs"] == 0


def test_a_templates_impostor_trials_are_split_by_whose_clip_they_are() -> None:
    far = _benchmark_module()
    from uvsdk.measurement import enrollment_trials

    scores = np.array([0.9, 0.1, 0.6, 0.2, 0.7])
    owners = np.array(["x", "x", "y", "y", "y"], dtype=object)
    long = np.array([True, False, True, True, False])
    assert far.pair_counts(scores, owners, long, 0.5) == {
        "x": {"trials": 2, "false_accepts": 1, "long_trials": 1, "long_false_accepts": 1},
        "y": {"trials": 3, "false_accepts": 2, "long_trials": 2, "long_false_accepts": 1},
    }
    # the owners are in enrollment_trials' order: each other person's vectors in turn
    rng = np.random.default_rng(0)
    by_person = {
        "p": rng.standard_normal((2, 8)),
        "q": rng.standard_normal((3, 8)),
        "r": np.zeros((0, 8)),
        "s": rng.standard_normal((1, 8)),
    }
    assert far.trial_owners(by_person, "q").tolist() == ["p", "p", "s"]
    _, _, impostor = enrollment_trials(by_person, 2)
    from uvsdk.scoring import cosine_scores, prototype

    expected = cosine_scores(
        prototype(by_person["q"][:2]), np.concatenate([by_person["p"], by_person["s"]])
    )
    np.testing.assert_allclose(impostor["q"], expected)
    seconds = {"p": np.array([3.0, 1.0]), "s": np.array([2.0])}
    assert far.long_clips(seconds, far.trial_owners(by_person, "q")).tolist() == [True, False, True]


def test_cross_source_trials_are_normalised_as_calibration_scores_its_people() -> None:
    """A held-out person's cross-source scores are exactly what enrollment_trials gives their
    template against the calibration people's vectors when those people are in the cohort (each
    clip's statistics without its own person's cohort vectors); the cohort's owners are found."""
    far = _benchmark_module()
    from uvexport.calibrate import calibrate_vectors
    from uvsdk.measurement import enrollment_trials

    rng = np.random.default_rng(1)
    centres = rng.standard_normal((6, 16))
    calibration = {f"c-{n}": centres[n] + 0.5 * rng.standard_normal((9, 16)) for n in range(4)}
    calibrated = calibrate_vectors({"clean": calibration}, data="test", cohort_size=24, top_k=5)
    people = far.cohort_owners(calibrated, {"clean": calibration})
    rows = np.frombuffer(calibrated.cohort, "<f4").reshape(calibrated.cohort_spec.count, -1)
    for row, person in zip(rows, people, strict=True):
        assert np.any(np.all(calibration[person].astype("<f4") == row, axis=1))
    cohort = calibrated.normaliser()
    held_out = {"t-0": centres[4] + 0.5 * rng.standard_normal((7, 16)), "t-1": centres[5][None]}
    scores, owners = far.cross_source_trials(held_out, calibration, 5, cohort, people)
    assert set(scores) == {"t-0"}  # t-1 has too few vectors to enroll
    assert owners.tolist() == [f"c-{n}" for n in range(4) for _ in range(9)]
    _, _, expected = enrollment_trials(
        {"t-0": held_out["t-0"], **calibration}, 5, cohort=cohort, cohort_people=people
    )
    np.testing.assert_allclose(scores["t-0"], expected["t-0"])
    raw, _ = far.cross_source_trials(held_out, calibration, 5, None, None)
    _, _, plain = enrollment_trials({"t-0": held_out["t-0"], **calibration}, 5)
    np.testing.assert_allclose(raw["t-0"], plain["t-0"])


def test_fused_vectors_score_the_weighted_mean_of_the_two_encoders_cosines() -> None:
    """``--fuse``: one vector per clip from two encoders, whose cosine is ``w cos_a + (1 - w)
    cos_b``, so calibration, AS-norm and enrollment score the fused model unchanged; clips that
    differ between the two embeddings are refused."""
    from uvexport.calibrate import Embedded

    far = _benchmark_module()
    rng = np.random.default_rng(3)
    a = {"clean": {"x-1": rng.normal(size=(4, 5)) * 3, "x-2": rng.normal(size=(2, 5))}}
    b = {"clean": {"x-1": rng.normal(size=(4, 7)), "x-2": rng.normal(size=(2, 7)) * 0.1}}
    seconds = {"clean": {"x-1": np.array([1.0, 2, 3, 4]), "x-2": np.array([2.5, 1.5])}}
    first, second = (Embedded(v, seconds, {}, 0) for v in (a, b))
    fused = far.fuse(first, second, 0.7)["clean"]

    def cos(u: np.ndarray, v: np.ndarray) -> float:
        return float(u @ v / np.linalg.norm(u) / np.linalg.norm(v))

    assert fused["x-1"].shape == (4, 12)
    assert np.allclose(np.linalg.norm(fused["x-2"], axis=1), 1.0)
    for i, j in ((0, 1), (2, 3)):
        expected = 0.7 * cos(a["clean"]["x-1"][i], a["clean"]["x-2"][j % 2])
        expected += 0.3 * cos(b["clean"]["x-1"][i], b["clean"]["x-2"][j % 2])
        assert cos(fused["x-1"][i], fused["x-2"][j % 2]) == pytest.approx(expected)
    other = Embedded(b, {"clean": {"x-1": seconds["clean"]["x-1"] + 1, "x-2": [2.5, 1.5]}}, {}, 0)
    with pytest.raises(SystemExit, match="not the same clips"):
        far.fuse(first, other, 0.5)


def _module(name: str):
    """A benchmark script as a module (benchmarks/ is not a package)."""
    import importlib

    sys.path.insert(0, str(BENCHMARK.parent))
    return importlib.import_module(name)


def test_centring_never_scores_a_pair_with_a_mean_that_holds_either_of_them() -> None:
    centring = _module("far_centring")
    rng = np.random.default_rng(0)
    by_person = {f"a-{n}": rng.normal(size=(4, 8)).astype(np.float32) for n in "pqrs"}
    centre = centring.others_mean(by_person)
    mean = centre(("a-p", "a-q"))
    expected = np.concatenate([centring.unit(by_person[n]) for n in ("a-r", "a-s")]).mean(0)
    np.testing.assert_allclose(mean, expected)
    moved = {**by_person, "a-p": by_person["a-p"] + 5.0}  # a pair's own voices do not move it
    np.testing.assert_allclose(centring.others_mean(moved)(("a-p", "a-q")), mean)
    # a wider pool (a calibration source of two people): every other person of the condition
    pool = {**by_person, "b-t": rng.normal(size=(4, 8)).astype(np.float32)}
    wide = centring.others_mean({"b-t": pool["b-t"]}, pool)(("a-p", "b-t"))
    others = np.concatenate([centring.unit(pool[n]) for n in ("a-q", "a-r", "a-s")]).mean(0)
    np.testing.assert_allclose(wide, others)
    # every pair once, each person's genuine trials once (in the pair with the next by name)
    seen = []

    def recording(pair: tuple[str, str]) -> np.ndarray:
        seen.append(pair)
        return centre(pair)

    seconds = {name: np.full(4, 2.0) for name in by_person}
    parts = centring.pair_trials(by_person, seconds, 2, None, recording)
    assert sorted(seen) == sorted(itertools.combinations(sorted(by_person), 2))
    genuine = [person for _, keep in parts for person in keep]
    assert sorted(genuine) == sorted(by_person)
    assert sum(t.impostor.size for t, _ in parts) == 4 * 3 * 4  # every ordered pair's 4 clips
    assert sum(t.genuine.size for t, _ in parts) == 4 * 2


def test_a_federations_mean_weighs_each_person_once_and_carries_its_runs_noise() -> None:
    """``--centre-devices``: each person's mean unit vector weighs the same (a device each), and
    the noise is the federation's: z from the run's own plan (one Gaussian release at ε, by hand
    here with Balle and Wang's closed form), shares for m_min = N/2 summed over all N, over N."""
    from tests.trainer.test_privacy import _analytic_gaussian_epsilon

    centring = _module("far_centring")
    rng = np.random.default_rng(2)
    by_person = {"p": rng.normal(size=(1, 8)), "q": rng.normal(size=(9, 8))}
    expected = (centring.unit(by_person["p"])[0] + centring.unit(by_person["q"]).mean(0)) / 2
    np.testing.assert_allclose(centring.person_mean(by_person, ["p", "q"]), expected)
    for devices, epsilon in ((100, 8.0), (1000, 1.0)):
        std = centring.release_noise_std(devices, epsilon)
        z = std * devices / np.sqrt(2)  # m_min = N/2 of N
        assert _analytic_gaussian_epsilon(z, 1e-6) == pytest.approx(epsilon, rel=2e-3)


def test_the_devices_summary_reads_the_federation_runs_back(tmp_path, capsys, monkeypatch) -> None:
    """far_centring_devices.py: one line per (ε, N) with every draw, the plot written; a folder
    without a report is refused in one line."""
    summary = _module("far_centring_devices")
    folders = []
    for seed, worst in enumerate((1.3, 1.5)):
        folder = tmp_path / f"run{seed}"
        folder.mkdir()
        row = {"within_2x": 10, "worst_ratio": worst, "frr_long": 0.3 + seed / 100}
        report = {"centre_devices": 100, "centre_epsilon": 8.0, "centre_noise_std": 0.009,
                  "draw_seed": seed, "summary": {"centred": {"each chain": row}}}  # fmt: skip
        (folder / "report.json").write_text(json.dumps(report))
        folders.append(str(folder))
    monkeypatch.setattr(sys, "argv", ["x", *folders, "--out", str(tmp_path / "out")])
    assert summary.main() == 0
    out = capsys.readouterr().out
    assert (
        "8          100       0.125  10/10         1.30/1.50            0.305 (0.300-0.310)" in out
    )
    assert (tmp_path / "out" / "devices.png").stat().st_size > 10_000
    monkeypatch.setattr(sys, "argv", ["x", str(tmp_path), "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit) as caught:
        summary.main()
    assert caught.value.code == 2 and "no report.json" in capsys.readouterr().err


@pytest.mark.parametrize("score_norm", ["as-norm", "none"])
def test_taking_a_chains_mean_out_makes_its_stated_far_hold_where_it_did_not(
    score_norm: str,
) -> None:
    """Three sources of 8 people; every clip of a source carries that source's channel, and
    source c's is twice as strong as the others' and in its own direction, so the calibration
    (a and b) never saw strangers as alike as c's. As shipped, c's strangers clear the
    threshold far more often than stated; with each chain's mean out they do not (under the
    shipped AS-norm and with raw cosines)."""
    centring = _module("far_centring")
    rng = np.random.default_rng(1)
    dim, clips = 24, 12
    vectors: dict = {"clean": {}}
    seconds: dict = {"clean": {}}
    for source, strength in (("a", 1.0), ("b", 1.0), ("c", 2.0)):
        channel = strength * centring.unit(rng.normal(size=dim))
        for number in range(8):
            name = f"{source}-{number}"
            voice = 0.6 * centring.unit(rng.normal(size=dim))
            noise = 0.35 * rng.normal(size=(clips, dim)) / np.sqrt(dim)
            vectors["clean"][name] = (voice + channel + noise).astype(np.float32)
            seconds["clean"][name] = np.full(clips, 3.0)
    args = argparse.Namespace(
        far=0.05,
        enroll=5,
        impostors="chain",
        centre_people=0,
        centre_devices=0,
        score_norm=score_norm,
    )
    held_out = {name for name in vectors["clean"] if name.startswith("c-")}
    rest = set(vectors["clean"]) - held_out
    shipped = centring.shipped_fold(vectors, seconds, held_out, args)["global"][0]
    draw = np.random.default_rng(0)
    arms = centring.centred_fold(vectors, seconds, rest, held_out, args, draw)
    centred = arms["centred"]["global"][0]
    assert shipped["impostor"] == centred["impostor"] == 8 * 7 * clips
    assert shipped["observed_far"] > 4 * args.far
    assert centred["observed_far"] <= 2 * args.far
    # the product's table (uvexport calibrate --each-chain) holds it too; the calibration
    # people's own mean, in place of the chain's, does not (why the exporter ships none)
    assert arms["centred"]["each chain"][0]["observed_far"] <= 2 * args.far
    assert arms["calibration's mean"]["global"][0]["observed_far"] > 4 * args.far


DEPLOYMENT = BENCHMARK.with_name("far_deployment.py")


def test_the_deployment_benchmark_scores_as_verify_decides(
    spectral_bundle: Path, people_dir: Path, tmp_path: Path
) -> None:
    """far_deployment.py: the two bundles uvexport calibrate writes (the held-out source's mean
    in the second only), every stranger's file counted once per owner, and its shortcut (each
    file embedded once, the verifier's own scoring) deciding as ``Verifier.verify`` does."""
    from uvsdk import Verifier

    speakers, out = tmp_path / "speakers", tmp_path / "deployment"
    everyone = three_sources(people_dir, speakers)
    (speakers / "sources.json").write_text("{}")
    command = [sys.executable, str(DEPLOYMENT), "--speakers", str(speakers), "--source", "c"]
    command += ["--out", str(out), "--bundle", str(spectral_bundle), "--conditions", "clean"]
    command += ["--far", "0.05", "--each-chain"]
    result = run_until_stalled(command, stall_seconds=300)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    held_out = sorted(name for name in everyone if name.startswith("c-"))
    files = {name: sorted((speakers / name).iterdir()) for name in held_out}
    plain, centred = (Bundle(out / row["bundle"]) for row in report["bundles"])
    assert plain.centre is None and centred.manifest.score_norm.centre.people == len(held_out)
    for row in report["bundles"]:
        assert sorted(row["owners"]) == held_out
        assert row["impostor_trials"] == sum(
            sum(len(files[other]) for other in held_out if other != owner) for owner in held_out
        )
    owner = held_out[0]
    verifier = Verifier(out / "own-mean.uvb", store=tmp_path / "s", passphrase="x" * 12, far=0.05)
    verifier.enroll(files[owner][:5])
    accepted = sum(
        verifier.verify(file, backoff=False).accepted
        for other in held_out[1:]
        for file in files[other]
    )
    rejected = sum(
        not verifier.verify(file, backoff=False).accepted
        for file in files[owner][5:]
        if sf.info(file).duration >= 2.0  # every clip here is 2.5 s, trimmed a little
    )
    mine = report["bundles"][1]["owners"][owner]
    assert accepted == mine["false_accepts"] and rejected == mine["false_rejects"]
    decided = [o for row in report["bundles"] for o in row["owners"].values()]
    assert sum(o["false_accepts"] + o["false_rejects"] for o in decided)  # both outcomes seen
    assert sum(o["impostor_trials"] - o["false_accepts"] for o in decided)
    assert (out / "deployment.png").stat().st_size > 0


def _nuisance_people(rng: np.random.Generator, source: str, count: int) -> dict[str, np.ndarray]:
    """``count`` people of one source, 12 clips each: a voice in the first 8 dimensions and,
    in every clip, a large random component along dimensions 8-11 that is not the voice."""
    people = {}
    for number in range(count):
        voice = np.zeros(16)
        voice[:8] = rng.normal(size=8)
        nuisance = np.zeros((12, 16))
        nuisance[:, 8:12] = rng.normal(scale=1.5, size=(12, 4))
        people[f"{source}-{number}"] = voice + nuisance + rng.normal(scale=0.3, size=(12, 16))
    return people


def test_the_backends_benchmark_is_the_centred_oracle_and_sees_what_a_backend_takes_out(
    tmp_path, capsys, monkeypatch
) -> None:
    """far_backends.py: with no back end and the SDK's enrollment it scores exactly the trials
    far_centring.py's centred arm scores (its pair_trials and the SDK's enrollment, another
    route); WCCN, fitted on the other sources only, lowers the oracle FRR where the clips vary
    along a direction that is not the voice; the command prints the table and writes the
    figure."""
    backends = _module("far_backends")
    centring = _module("far_centring")
    rules = _module("far_rules")
    rng = np.random.default_rng(4)
    sources = {s: _nuisance_people(rng, s, 6) for s in "abc"}
    held_out = sources["a"]
    seconds = {name: np.full(12, 2.5) for name in held_out}
    none = backends.held_out_trials(held_out, seconds, 5, lambda x: x.astype(np.float64))
    parts = centring.pair_trials(held_out, seconds, 5, None, centring.others_mean(held_out))
    joined = centring.joined(parts)
    for field, mine in (("impostor", "impostor"), ("genuine", "genuine")):
        np.testing.assert_allclose(
            np.sort(getattr(joined, field)), np.sort(none["mean vector"][mine]), atol=1e-6
        )
    assert (
        backends.oracle(none["mean vector"], 0.05)["long_false_rejects"]
        == (rules.oracle_row(joined, 0.05)["long_false_rejects"])
    )
    training = [
        v
        for s in "bc"
        for v in backends.chain_centred(sources[s]).values()  # the calibration sources only
    ]
    matrix = backends.fit_backend("wccn", training, 4, 0.01)
    wccn = backends.held_out_trials(held_out, seconds, 5, lambda x: centring.unit(x @ matrix))
    before = backends.oracle(none["mean vector"], 0.05)["long_false_rejects"]
    after = backends.oracle(wccn["mean vector"], 0.05)["long_false_rejects"]
    assert after < before, (before, after)
    lda = backends.fit_backend("lda", training, 3, 0.1)
    assert lda.shape == (16, 3)

    vectors = {"clean": {n: v.astype(np.float32) for s in sources.values() for n, v in s.items()}}
    lengths = {"clean": {n: np.full(12, 2.5) for n in vectors["clean"]}}
    monkeypatch.setattr(backends, "embed", lambda args, bundle: (vectors, lengths))
    monkeypatch.setattr(backends, "Bundle", lambda path: None)
    out = tmp_path / "out"
    argv = ["x", "--speakers", str(tmp_path), "--out", str(out), "--far", "0.05"]
    monkeypatch.setattr(sys, "argv", [*argv, "--lda-dim", "3"])
    assert backends.main() == 0
    printed = capsys.readouterr().out
    assert "none      mean vector" in printed and "lda       best score" in printed
    report = json.loads((out / "report.json").read_text())
    assert set(report["summary"]) == set(backends.BACKENDS)
    assert len(report["rows"]["wccn"]["mean score"]) == 3  # three folds, one condition
    assert (out / "backends.png").stat().st_size > 10_000
    monkeypatch.setattr(sys, "argv", [*argv, "--lda-dim", "0"])
    with pytest.raises(SystemExit) as caught:
        backends.main()
    assert caught.value.code == 2 and "--lda-dim" in capsys.readouterr().err
