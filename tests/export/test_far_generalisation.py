"""The embeddings cache of ``uvexport calibrate --cache`` and the leave-one-source-out benchmark
that reads it (benchmarks/far_generalisation.py)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.processes import run_until_stalled
from uvexport.calibrate import embed_conditions, people_folders
from uvsdk import Bundle

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "far_generalisation.py"


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


def test_the_benchmark_never_tests_on_what_it_calibrated_on(
    spectral_bundle: Path, people_dir: Path, tmp_path: Path
) -> None:
    speakers = tmp_path / "speakers"
    for number, person in enumerate(sorted(p for p in people_dir.iterdir() if p.is_dir())):
        source = "abc"[number % 3]  # three sources of 6-7 speakers, named <source>-<speaker>
        shutil.copytree(person, speakers / f"{source}-{person.name}")
    out = tmp_path / "eval"
    command = [sys.executable, str(BENCHMARK), "--speakers", str(speakers), "--out", str(out)]
    command += ["--bundle", str(spectral_bundle), "--conditions", "clean,telephone-gsm"]
    command += ["--far", "0.05", "--cache", str(tmp_path / "emb.npz")]
    result = run_until_stalled(command, stall_seconds=300)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert [fold["source"] for fold in report["folds"]] == ["a", "b", "c"]
    everyone = {p.name for p in speakers.iterdir()}
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
    assert "pooled: FAR" in result.stdout
    for name in ("far.png", "frr.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
