"""The embeddings cache of ``uvexport calibrate --cache`` and the leave-one-source-out benchmarks
that read it (benchmarks/far_generalisation.py, benchmarks/far_rules.py)."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.processes import run_until_stalled
from uvexport.calibrate import embed_conditions, people_folders
from uvsdk import Bundle

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "far_generalisation.py"
RULES = BENCHMARK.with_name("far_rules.py")
CONDITIONS = BENCHMARK.with_name("calibration_conditions.py")


def three_sources(people_dir: Path, speakers: Path) -> set[str]:
    """The test people copied under ``speakers`` as three sources of 6-7 speakers each, named
    ``<source>-<speaker>``; returns the folder names."""
    for number, person in enumerate(sorted(p for p in people_dir.iterdir() if p.is_dir())):
        shutil.copytree(person, speakers / f"{'abc'[number % 3]}-{person.name}")
    return {p.name for p in speakers.iterdir()}


def run_benchmark(script: Path, speakers: Path, out: Path, bundle: Path, cache: Path) -> str:
    """Runs a leave-one-source-out benchmark at FAR 0.05 in two conditions; its stdout."""
    command = [sys.executable, str(script), "--speakers", str(speakers), "--out", str(out)]
    command += ["--bundle", str(bundle), "--conditions", "clean,telephone-gsm"]
    command += ["--far", "0.05", "--cache", str(cache)]
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
    stdout = run_benchmark(BENCHMARK, speakers, out, spectral_bundle, tmp_path / "emb.npz")
    report = json.loads((out / "report.json").read_text())
    assert [fold["source"] for fold in report["folds"]] == ["a", "b", "c"]
    for fold in report["folds"]:
        held_out = {name for name in everyone if name.startswith(fold["source"] + "-")}
        assert fold["speakers"] == len(held_out)
        assert set(fold["calibrated_on"]) == everyone - held_out  # disjoint, and all the rest
        assert [row["condition"] for row in fold["rows"]] == ["clean", "telephone-gsm"]
        for row in fold["rows"]:
            assert row["stated_far"] == 0.05
            assert row["ratio"] == pytest.approx(row["observed_far"] / 0.05)
            assert 0.0 <= row["observed_far"] <= 1.0 and 0.0 <= row["frr"] <= 1.0
    summary = report["summary"]
    rows = [row for fold in report["folds"] for row in fold["rows"]]
    pooled = sum(r["observed_far"] * r["impostor"] for r in rows) / sum(r["impostor"] for r in rows)
    assert summary["pooled_far"] == pytest.approx(pooled)
    assert "pooled: FAR" in stdout
    for name in ("far.png", "frr.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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
    assert set(rules["summary"]) == {"global", "buckets", "qmf", "oracle"}
    assert "not a rule" in stdout
    assert (tmp_path / "rules" / "rules.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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
