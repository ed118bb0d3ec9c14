"""The comparison scripts of ``benchmarks/`` run end to end (``--scale tiny``: seconds) and write
their figures and tables; a second call reuses the runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.processes import run_until_stalled

pytest.importorskip("torch")

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _script(name: str, tmp_path: Path, *args: str) -> str:
    env = {**os.environ, "UVTRAIN_DATA": str(tmp_path / "data")}
    common = ["--scale", "tiny", "--dataset", "formant-voices", "--cache", str(tmp_path / "runs")]
    result = run_until_stalled(
        [sys.executable, str(BENCHMARKS / name), *common, "--out", str(tmp_path / "out"), *args],
        stall_seconds=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def _is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_roc_comparison_and_negative_loss_share_runs(tmp_path: Path) -> None:
    output = _script("roc_methods.py", tmp_path, "--every", "2")
    out = tmp_path / "out"
    for split in ("train", "test_known", "unknown", "unknown-pairs"):
        assert _is_png(out / f"roc-formant-voices-{split}.png")
    table = (out / "roc-formant-voices.md").read_text()
    for method in ("softmax", "FedAwS", "FedHide", "FedUV c=127", "FedUV c=255", "FedUV c=511"):
        assert f"| {method} |" in table
    assert "| softmax | enrollment | 4 |" in table and "1.000 |" in table  # leaks every row
    rows = {tuple(line.split(" | ")[:2]): line for line in table.splitlines()}
    # softmax and FedAwS: a row in the paper's class-row protocol too. The unknown split sits in
    # its protocol's columns: unseen people as impostors (codeword, class row), or pairs among
    # them (enrollment), never both in one column
    for method in ("| softmax", "| FedAwS"):
        enrolled, by_row = rows[(method, "enrollment")], rows[(method, "class row")]
        assert by_row.split(" | ")[6:10][2:] == ["–", "–"]  # no pairs in the class-row row
        assert enrolled.split(" | ")[6:8] == ["–", "–"]  # no impostor protocol in enrollment's
        assert by_row.split(" | ")[6] != "–" and enrolled.split(" | ")[8] != "–"
    assert rows[("| FedUV c=127", "codeword")].split(" | ")[8:10] == ["–", "–"]
    assert ("| FedHide", "class row") not in rows  # FedHide's prototypes stay on the device
    assert output.count("training") == 6
    # the ablation's no-negative arm is the ROC comparison's FedUV c=127 run: trained once
    output = _script("negative_loss.py", tmp_path, "--every", "2")
    assert output.count("done before") == 1 and output.count("training") == 1
    assert _is_png(out / "negative-loss-formant-voices.png")
    rows = (out / "negative-loss-formant-voices.md").read_text().splitlines()
    assert rows[4].startswith("| 2 |") and rows[5].startswith("| 4 |")


@pytest.mark.slow
def test_leakage_sweep_writes_mean_and_std_over_seeds(tmp_path: Path) -> None:
    _script("leakage_sweep.py", tmp_path, "--only", "fedaws", "fedcs", "--seeds", "0", "1")
    out = tmp_path / "out"
    assert _is_png(out / "leakage-formant-voices.png")
    table = (out / "leakage-formant-voices.md").read_text()
    assert "| FedAwS | 1.000 ± 0.000 |" in table  # the server holds FedAwS's embeddings
    assert table.count("| FedCS cosθ=") == 5 and "FedHide" not in table
    assert "seeds 0 1" in table and "learnt-prototype EER" in table


def _audit(path: Path, clients: int, entries: list[tuple[float | None, int, float]]) -> Path:
    """An ``audit.json`` of disaggregation entries ``(ε or None, rounds, whole_decoded)``."""
    import json

    path.write_text(
        json.dumps(
            {
                "setup": {"clients": clients, "rounds": 100},
                "disaggregation": [
                    {
                        "code_length": 127,
                        "dp": None if eps is None else {"epsilon": eps - 0.01, "rounds": 100},
                        "rounds": rounds,
                        "cohort": clients // 10,
                        "bits": 0.5 if eps else 1.0,
                        "whole_raw": decoded,
                        "whole_decoded": decoded,
                    }
                    for eps, rounds, decoded in entries
                ],
            }
        )
    )
    return path


@pytest.mark.slow
def test_privacy_curve_tables_each_run_and_merges_audits(tmp_path: Path) -> None:
    import json

    first = _audit(tmp_path / "a.json", 60, [(None, 100, 1.0), (8.0, 50, 0.5), (8.0, 100, 0.25)])
    second = _audit(tmp_path / "b.json", 60, [(16.0, 100, 0.0)])
    args = ["--methods", "feduv", "--epsilons", "inf,8", "--audit", str(first)]
    output = _script("privacy_curve.py", tmp_path, *args, "--audit", str(second))
    assert output.count("training") == 2
    out = tmp_path / "out"
    assert _is_png(out / "eer-vs-epsilon.png") and _is_png(out / "eer-vs-recovery.png")
    table = (out / "privacy-curve.md").read_text()
    rows = {
        line.split(" | ")[1]: line.split(" | ") for line in table.splitlines() if "| feduv" in line
    }
    assert set(rows) == {"∞ (off)", "8"}
    assert rows["8"][2] == "0" and rows["8"][3] == "4"  # one seed, 4 rounds
    assert rows["8"][4] != "–" and rows["∞ (off)"][4] == "–"  # z
    # recovery: the audit's last observed round per ε (8: 100 rounds, not 50), from either file
    assert rows["8"][-2] == "25.0 %" and rows["∞ (off)"][-2] == "100.0 %"
    assert f"`{first}`: 60 devices, cohorts of 6, after 100 rounds" in table
    result = json.loads((out / "privacy-curve.json").read_text())
    assert set(result["recovery"]) == {"inf", "8.0", "16.0"}
    assert [row["rounds"] for row in result["rows"]] == [4, 4]
    again = _script("privacy_curve.py", tmp_path, *args)  # the runs are reused
    assert again.count("done before") == 2 and "training" not in again
    # --no-train: ε 4 was never trained, so it is named and left out, and nothing trains
    listed = _script("privacy_curve.py", tmp_path, *args[:2], "--epsilons", "inf,8,4", "--no-train")
    assert "feduv ε=4: not finished" in listed and "training" not in listed
    table = (out / "privacy-curve.md").read_text()
    assert "Not finished yet (left out): feduv ε=4" in table and table.count("| feduv |") == 2
    # several seeds: each setting once per seed (seed 0's runs reused), tabled as mean (min–max)
    seeds = _script("privacy_curve.py", tmp_path, *args[:4], "--seeds", "0", "1")
    assert seeds.count("done before") == 2 and seeds.count("training") == 2
    result = json.loads((out / "privacy-curve.json").read_text())
    assert sorted((str(r["epsilon"]), r["seed"]) for r in result["rows"]) == [
        ("8.0", 0), ("8.0", 1), ("None", 0), ("None", 1)]  # ∞ is null in JSON  # fmt: skip
    for summary in result["summary"]:
        known = [r["test_known_eer"] for r in result["rows"] if r["epsilon"] == summary["epsilon"]]
        assert summary["seeds"] == [0, 1] and summary["test_known_eer_range"] == [
            min(known), max(known)] and abs(summary["test_known_eer"] - sum(known) / 2) < 1e-12  # fmt: skip
    cells = [line.split(" | ") for line in (out / "privacy-curve.md").read_text().splitlines()]
    row = next(cell for cell in cells if len(cell) > 2 and cell[1] == "8")
    assert row[2] == "0, 1" and "mean of 2" in row[-1]
    low, high = (f"{v:.3f}" for v in result["summary"][1]["test_known_eer_range"])
    assert row[5] == f"{result['summary'][1]['test_known_eer']:.3f} ({low}–{high})" or low == high
    assert _is_png(out / "eer-vs-epsilon.png")


def test_run_folder_finds_a_run_made_before_a_setting_existed(tmp_path: Path) -> None:
    """A cached run whose config.json lacks a key added since is the same run when the key, read
    as uvtrain reads an older folder, has the asked value (and only then); otherwise the
    settings' own hash names the folder."""
    import json

    sys.path.insert(0, str(BENCHMARKS))
    from _runs import run_folder

    from uvtrain.config import RunConfig

    config = RunConfig.from_flat({"method": "fedhide", "dataset": "d.npz", "rounds": 7})
    fresh = run_folder(tmp_path, config)
    assert fresh.parent == tmp_path and fresh.name.startswith("fedhide-")
    legacy = tmp_path / "fedhide-0123456789"
    legacy.mkdir()
    # "window" came later: a FedHide folder without it trained with the Hann window, not today's
    # default (Hamming), so it is the run of window "hann" only
    old = {k: v for k, v in config.to_dict().items() if k != "window"}
    (legacy / "config.json").write_text(json.dumps(old))
    assert run_folder(tmp_path, config) != legacy
    hann = RunConfig.from_flat({**config.to_dict(), "window": "hann"})
    assert run_folder(tmp_path, hann) == legacy
    # a key that reads as its default (FedUV's "aggregation" came later too)
    feduv = RunConfig.from_flat({"method": "feduv", "dataset": "d.npz", "rounds": 7})
    (tmp_path / "feduv-0123456789").mkdir()
    without = {k: v for k, v in feduv.to_dict().items() if k != "aggregation"}
    (tmp_path / "feduv-0123456789" / "config.json").write_text(json.dumps(without))
    assert run_folder(tmp_path, feduv) == tmp_path / "feduv-0123456789"
    (legacy / "config.json").write_text(json.dumps({**old, "rounds": 8}))  # another run
    assert run_folder(tmp_path, hann) != legacy
    own = run_folder(tmp_path, hann)
    own.mkdir()  # the settings' own folder always wins
    (legacy / "config.json").write_text(json.dumps(old))
    assert run_folder(tmp_path, hann) == own


def test_deployment_dp_tables_finished_and_stopped_runs(tmp_path: Path) -> None:
    """benchmarks/deployment_dp.py's table: a finished FedUV run (both protocols, its floor from
    the plan), a run stopped early compared with the no-DP run at the same round, and the
    simulated deployment named in the cohort column."""
    import json

    sys.path.insert(0, str(BENCHMARKS))
    from deployment_dp import table

    from uvtrain.accounting import membership_eer_floor
    from uvtrain.config import Privacy
    from uvtrain.privacy import plan_privacy

    def split(eer: float) -> dict:
        return {"eer": eer, "tpr_at_fpr": {}, "min_dcf": None}

    def finished(name: str, codeword: float, enrolled: float, privacy: dict | None) -> None:
        folder = tmp_path / "runs" / name
        folder.mkdir(parents=True)
        splits = {"test_known": split(codeword), "unknown": split(codeword)}
        enrollment = {"splits": {"test_known": split(enrolled), "unknown": split(enrolled + 0.01)}}
        report = {"rounds": 800, "splits": splits, "enrollment": enrollment, "privacy": privacy,
                  "throughput": {"client_updates_per_s": 1.0, "device": "cuda"}}  # fmt: skip
        (folder / "report.json").write_text(json.dumps(report))
        evals = [{"round": r, "eer": {"test_known": 0.4, "enrollment_test_known": e}}
                 for r, e in ((100, 0.2), (200, 0.1))]  # fmt: skip
        (folder / "metrics.jsonl").write_text("\n".join(json.dumps(e) for e in evals) + "\n")

    plan = plan_privacy(
        Privacy("central", clip_norm=0.1, dp_epsilon=8, dp_noise_cohort=1000, dp_population=10**6),
        rounds=800,
        cohort=100,
        users=1000,
    )
    finished("uv-off-m100", 0.29, 0.035, None)
    finished("uv-e8-sim1000", 0.30, 0.034, plan.report())
    stopped = tmp_path / "runs" / "uv-e4-sim5000"
    stopped.mkdir()
    from uvtrain.config import RunConfig

    stopped_settings = {"method": "feduv", "dataset": "x.npz", "clients": 1000, "fraction": 0.1,
                        "rounds": 800, "dp": "central", "dp_epsilon": 4.0, "clip_norm": 0.1,
                        "dp_noise_cohort": 5000, "dp_population": 10**6}  # fmt: skip
    config = RunConfig.from_flat(stopped_settings).to_dict()
    (stopped / "config.json").write_text(json.dumps(config))
    (stopped / "metrics.jsonl").write_text(
        json.dumps({"round": 200, "eer": {"test_known": 0.38, "enrollment_test_known": 0.13}})
        + "\n"
    )
    other = plan_privacy(
        Privacy("central", clip_norm=0.1, dp_epsilon=4, dp_noise_cohort=5000, dp_population=10**6),
        rounds=800,
        cohort=100,
        users=1000,
    )
    entries = {e["run"]: e for e in table(tmp_path / "runs", tmp_path / "out")}
    assert set(entries) == {"uv-off-m100", "uv-e8-sim1000", "uv-e4-sim5000"}
    full = entries["uv-e8-sim1000"]
    assert full["codeword"] == 0.30 and full["enrollment_change"] == pytest.approx(-0.001)
    assert full["privacy"]["floor"] == pytest.approx(
        membership_eer_floor(plan.noise_multiplier, 0.001, 800)
    )
    early = entries["uv-e4-sim5000"]
    assert early["partial"] and early["rounds"] == 200
    assert early["enrollment_change"] == pytest.approx(0.13 - 0.1)  # the no-DP run at round 200
    assert early["privacy"]["noise_cohort"] == 5000
    assert 0.995 * 4 <= early["privacy"]["epsilon"] <= 4  # at most the budget (z to 0.1 %)
    assert early["privacy"]["noise_multiplier"] == other.noise_multiplier  # the run's own plan
    text = (tmp_path / "out" / "deployment-dp.md").read_text()
    assert "200 (partial)" in text and "simulated deployment: noise of 5,000 of 1,000,000" in text
    assert _is_png(tmp_path / "out" / "deployment-dp.png")
    # a record of runs from an earlier session: tabled beside these runs (a run here replaces
    # its recorded entry; a recorded one keeps its figures), and updated with them
    record = tmp_path / "record.json"
    earlier = {"run": "hide-e2-sim5000", "method": "fedhide", "fraction": 0.1, "rounds": 100,
               "partial": False, "enrollment": 0.104, "enrollment_unknown": 0.148,
               "enrollment_change": -0.027, "privacy": dict(full["privacy"], epsilon=2.0)}  # fmt: skip
    replaced = dict(full, enrollment=0.5)
    record.write_text(json.dumps([replaced, earlier]))
    merged = table(tmp_path / "runs", tmp_path / "again", record)
    assert [e["run"] for e in merged] == ["uv-off-m100", "uv-e8-sim1000", "hide-e2-sim5000",
                                          "uv-e4-sim5000"]  # runs() order  # fmt: skip
    assert merged[1]["enrollment"] == 0.034 and merged[2]["enrollment_change"] == -0.027
    assert json.loads(record.read_text()) == json.loads(json.dumps(merged))
    assert "| 0.104 | -0.027 | 0.148 |" in (tmp_path / "again" / "deployment-dp.md").read_text()


def test_deployment_dp_tables_seeds_against_their_own_baseline(tmp_path: Path) -> None:
    """Runs NAME-sS (``--seed S``): each compared with the no-DP run of its own seed, and each
    configuration with several seeds tabled once more as mean and range, with the difference of
    the means called a tie when it is inside the seeds' spread."""
    import json

    sys.path.insert(0, str(BENCHMARKS))
    from deployment_dp import family, runs, seed_of, table

    from uvtrain.config import Privacy
    from uvtrain.privacy import plan_privacy

    assert seed_of(runs()["uv-e8-sim1000-s2"]) == 2 and seed_of(runs()["uv-e8-sim1000"]) == 0
    assert family("uv-e8-sim1000-s2") == "uv-e8-sim1000" == family("uv-e8-sim1000")
    plan = plan_privacy(
        Privacy("central", clip_norm=0.1, dp_epsilon=8, dp_noise_cohort=1000, dp_population=10**6),
        rounds=800,
        cohort=100,
        users=1000,
    )

    def finished(name: str, enrolled: float, privacy: dict | None) -> None:
        folder = tmp_path / "runs" / name
        folder.mkdir(parents=True)
        split = {"eer": 0.3, "tpr_at_fpr": {}, "min_dcf": None}
        enrollment = {"test_known": dict(split, eer=enrolled),
                      "unknown": dict(split, eer=enrolled + 0.01)}  # fmt: skip
        report = {"rounds": 800, "splits": {"test_known": split, "unknown": split},
                  "enrollment": {"splits": enrollment}, "privacy": privacy,
                  "throughput": {"client_updates_per_s": 1.0, "device": "cuda"}}  # fmt: skip
        (folder / "report.json").write_text(json.dumps(report))

    for name, enrolled, privacy in (("uv-off-m100", 0.030, None), ("uv-off-m100-s1", 0.040, None),
                                    ("uv-e8-sim1000", 0.032, plan.report()),
                                    ("uv-e8-sim1000-s1", 0.036, plan.report())):  # fmt: skip
        finished(name, enrolled, privacy)

    def stopped(name: str, at_round: int, enrolled: float) -> None:
        """A run stopped after its evaluation at ``at_round`` (no report.json)."""
        folder = tmp_path / "runs" / name
        folder.mkdir(parents=True)
        config = {"method": "feduv", "dataset": "synth-voices", "clients": 1000,
                  "fraction": 0.1, "rounds": 800, "dp": "central", "clip_norm": 0.1,
                  "dp_epsilon": 8.0, "dp_noise_cohort": 1000, "dp_population": 10**6}  # fmt: skip
        (folder / "config.json").write_text(json.dumps(config))
        eer = {"test_known": 0.3, "enrollment_test_known": enrolled,
               "enrollment_unknown": enrolled + 0.01}  # fmt: skip
        (folder / "metrics.jsonl").write_text(json.dumps({"round": at_round, "eer": eer}) + "\n")

    # seed 2 stopped after its round-800 evaluation counts; a run stopped at 700 would not
    stopped("uv-e8-sim1000-s2", 800, 0.028)
    stopped("uv-e8-sim5000", 700, 0.5)
    stopped("uv-e8-sim5000-s1", 700, 0.5)
    entries = {e["run"]: e for e in table(tmp_path / "runs", tmp_path / "out")}
    assert entries["uv-e8-sim1000-s1"]["seed"] == 1
    assert entries["uv-e8-sim1000-s1"]["enrollment_change"] == pytest.approx(-0.004)
    assert entries["uv-e8-sim1000"]["enrollment_change"] == pytest.approx(0.002)
    assert entries["uv-e8-sim1000-s2"]["partial"] and entries["uv-e8-sim5000"]["partial"]
    text = (tmp_path / "out" / "deployment-dp.md").read_text()
    assert "| 0, 1 | 0.035 (0.030–0.040) | 0.045 (0.040–0.050) |" in text
    assert "| 0, 1, 2 | 0.032 (0.028–0.036) | 0.042 (0.038–0.046) |" in text
    assert "-0.003: a tie (inside the seeds' spread)" in text
    assert "noise of 5,000" not in text.split("Over seeds")[1]


def test_dp_ftrl_tables_each_mechanism_over_seeds_against_no_dp_and_todays(
    tmp_path: Path,
) -> None:
    """benchmarks/dp_ftrl.py: every run's row, and each mechanism's mean and range over its
    seeds, a tie when the difference of the means is inside the larger spread of the two."""
    import json

    sys.path.insert(0, str(BENCHMARKS))
    from dp_ftrl import runs, table

    def split(eer: float) -> dict:
        return {"eer": eer, "tpr_at_fpr": {}, "min_dcf": None}

    eers = {"off": (0.10, 0.12, 0.14), "poisson": (0.11, 0.13, 0.15), "tree": (0.30, 0.31, 0.32)}
    for name, (method, mechanism, seed) in runs().items():
        if method != "fedhide" or mechanism not in eers:
            continue
        eer = eers[mechanism][seed]
        privacy = None if mechanism == "off" else {
            "epsilon_release": 8.0, "epsilon_server": 8.0 if mechanism == "tree" else 276.0,
            "delta": 2.5e-7, "noise_multiplier": 1.0, "server_participations": 1,
            "clip_norm": 0.25, "noise": "tree" if mechanism == "tree" else "independent"}  # fmt: skip
        folder = tmp_path / "runs" / name
        folder.mkdir(parents=True)
        report = {"rounds": 60, "splits": {"test_known": split(eer), "unknown": split(eer + 0.05)},
                  "privacy": privacy, "throughput": {"device": "cpu"}}  # fmt: skip
        (folder / "report.json").write_text(json.dumps(report))
    table(tmp_path / "runs", tmp_path / "out", tmp_path / "record.json")
    summary = {
        r["mechanism"]: r for r in json.loads((tmp_path / "record.json").read_text())["summary"]
    }
    assert summary["off"]["mean"] == pytest.approx(0.12) and summary["off"]["verdict"] is None
    assert summary["poisson"]["verdict"] == "a tie"  # +0.01 inside a spread of 0.04
    assert summary["tree"]["verdict"] == "outside the spread"
    assert summary["tree"]["verdict_today"] == "outside the spread"
    assert summary["tree"]["change_today"] == pytest.approx(0.18)
    text = (tmp_path / "out" / "dp-ftrl.md").read_text()
    assert "| fedhide | no DP | ∞ | 3 | 0.120 (0.100–0.140)" in text
    assert (tmp_path / "out" / "dp-ftrl.png").is_file()


def test_seeds_table_gives_each_number_its_mean_and_range(tmp_path: Path) -> None:
    """``seeds_table.py``: the per-seed tables of a comparison as one, each number ``mean
    (min–max)``; a label that differs between seeds, or a missing table, one line and exit 2."""
    import subprocess

    header = "# t\n\n| method | protocol | rounds | EER |\n|---|---|---|---|\n"
    paths = []
    for seed, (a, b) in enumerate([("0.100", "0.5"), ("0.200", "0.5"), ("0.600", "0.5")]):
        path = tmp_path / f"s{seed}.md"
        rows = f"| FedUV | codeword | {400 + seed} | {a} |\n| FedAwS | enrollment | 400 | {b} |\n"
        path.write_text(header + rows)
        paths.append(str(path))
    script = [sys.executable, str(BENCHMARKS / "seeds_table.py")]
    out = tmp_path / "seeds.md"
    done = subprocess.run([*script, *paths, "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rows = out.read_text().splitlines()
    assert "| FedUV | codeword | 401 (400–402) | 0.300 (0.100–0.600) |" in rows  # counts stay whole
    assert "| FedAwS | enrollment | 400 | 0.500 |" in rows  # equal at every seed: no range
    # a column that differs by seed and is not a result (here the rounds) is left out on request
    dropped = subprocess.run([*script, *paths, "--out", str(out), "--drop", "rounds"],
                             capture_output=True, text=True)  # fmt: skip
    assert dropped.returncode == 0, dropped.stderr
    assert "| FedUV | codeword | 0.300 (0.100–0.600) |" in out.read_text().splitlines()
    unknown = subprocess.run([*script, *paths, "--out", str(out), "--drop", "nope"],
                             capture_output=True, text=True)  # fmt: skip
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1
    assert "no such column" in unknown.stderr
    (tmp_path / "s2.md").write_text(
        header + "| FedUV | class row | 4 | 0.1 |\n| FedAwS | x | 4 | 0.5 |\n"
    )
    failed = subprocess.run([*script, *paths, "--out", str(out)], capture_output=True, text=True)
    assert failed.returncode == 2 and len(failed.stderr.strip().splitlines()) == 1
    assert "differ" in failed.stderr
    missing = subprocess.run([*script, str(tmp_path / "none.md"), "--out", str(out)],
                             capture_output=True, text=True)  # fmt: skip
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1


def test_every_preset_keeps_plain_fedavg_whatever_the_method_default() -> None:
    """Every scale's runs name the server step themselves (plain FedAvg, server lr 1), so FedUV's
    own default (server lr 5 since 2026-11-26) cannot change a figure's recipe under it: the
    privacy curve's FedUV seeds once ran at server lr 5 beside a seed 0 at 1."""
    sys.path.insert(0, str(BENCHMARKS))
    from _runs import SCALES, settings

    for scale, datasets in SCALES.items():
        for dataset, preset in datasets.items():
            for family in ("feduv", "embedding"):
                if family not in preset:
                    continue
                values = settings(scale, dataset, family, "d.npz", method=family)
                step = (values.get("server_optimizer"), values.get("server_lr"))
                assert step == ("sgd", 1.0), (scale, dataset, family, step)
