"""FedHide's evaluation protocols (paper Sec. 4.1): the official VoxCeleb1 trial list, ten 3-s
crops per utterance scored by the mean cosine of the crop pairs, and CIFAR-100 top-1 accuracy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from uvtrain.data.trials import read_trial_list, resolve_wav_root
from uvtrain.errors import DatasetError
from uvtrain.evaluation import (
    crop_starts,
    equal_error_rate,
    evenly_spaced_crops,
    nearest_prototype_accuracy,
    trial_list_protocol,
    trial_scores,
)

RATE = 16000
A1, A2 = "id10270/x6uYqmx31kE/00001.wav", "id10270/8jEAjG6SegY/00008.wav"
B1, B2 = "id10300/ize_eiCFEg0/00003.wav", "id10300/Ab3k_9yxXcQ/00002.wav"
GOOD_LIST = f"1 {A1} {A2}\n0 {A1} {B1}\n\n1 {B1} {B2}\n0 {A2} {B2}\n"


def write_list(tmp_path: Path, text: str, name: str = "veri_test2.txt") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- the trial list ------------------------------------------------------------------------------


def test_the_official_format_is_read_in_file_order(tmp_path: Path) -> None:
    trials = read_trial_list(write_list(tmp_path, GOOD_LIST))
    assert len(trials) == 4
    assert trials.labels.tolist() == [1, 0, 1, 0]
    assert trials.left == (A1, A1, B1, A2) and trials.right == (A2, B1, B2, B2)
    assert trials.lines == (1, 2, 4, 5)  # the blank line 3 is skipped, numbers are the file's


@pytest.mark.parametrize(
    ("line", "what"),
    [
        (f"2 {A1} {A2}", "LABEL 0 or 1"),
        (f"1 {A1}", "LABEL PATH1 PATH2"),
        (f"1 {A1} {A2} extra", "LABEL PATH1 PATH2"),
        (f"true {A1} {A2}", "LABEL 0 or 1"),
        (f"1 /etc/{A1} {A2}", "relative to the wav root"),
        (f"1 ../{A1} {A2}", "relative to the wav root"),
    ],
)
def test_a_malformed_line_is_named_by_its_number(tmp_path: Path, line: str, what: str) -> None:
    path = write_list(tmp_path, GOOD_LIST + line + "\n")
    with pytest.raises(DatasetError) as error:
        read_trial_list(path)
    message = str(error.value)
    assert "line 6:" in message and what in message and "\n" not in message, message


def test_a_missing_list_and_a_one_sided_list_are_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="not found"):
        read_trial_list(tmp_path / "veri_test.txt")
    with pytest.raises(DatasetError, match="no trial"):
        read_trial_list(write_list(tmp_path, "\n\n"))
    with pytest.raises(DatasetError, match="no different-speaker"):
        read_trial_list(write_list(tmp_path, f"1 {A1} {A2}\n"))


def make_wav_root(root: Path, seconds: dict[str, float]) -> Path:
    """A VoxCeleb1-layout copy, ``root/wav/idXXXXX/<video>/<n>.wav``, of noise with a tone."""
    rng = np.random.default_rng(0)
    for index, (name, length) in enumerate(seconds.items()):
        path = root / "wav" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        t = np.arange(int(length * RATE)) / RATE
        signal = 0.3 * np.sin(2 * np.pi * (150 + 40 * index) * t) + 0.05 * rng.normal(size=t.size)
        sf.write(path, signal.astype(np.float32), RATE)
    return root


def test_every_path_must_be_under_the_wav_root(tmp_path: Path) -> None:
    trials = read_trial_list(write_list(tmp_path, GOOD_LIST))
    root = make_wav_root(tmp_path / "vox1", {A1: 1.0, A2: 1.0, B1: 1.0})  # B2 is missing
    wav = resolve_wav_root(root)
    assert wav == (root / "wav").resolve()
    with pytest.raises(DatasetError) as error:
        trials.check_paths(wav)
    assert "line 4:" in str(error.value) and B2 in str(error.value)
    make_wav_root(tmp_path / "vox1", {B2: 1.0})
    assert set(trials.check_paths(wav)) == {A1, A2, B1, B2}
    with pytest.raises(DatasetError, match="not a folder"):
        resolve_wav_root(tmp_path / "nowhere")


# -- the crops -----------------------------------------------------------------------------------


def test_ten_evenly_spaced_crops_of_a_10_s_utterance() -> None:
    signal = np.arange(10 * RATE, dtype=np.float32)
    width, starts = crop_starts(signal.size, RATE)
    assert width == 3 * RATE and starts.size == 10
    assert starts[0] == 0 and starts[-1] == 7 * RATE  # the last crop ends with the utterance
    assert np.abs(np.diff(starts) - 7 * RATE / 9).max() < 1.0  # evenly spaced
    crops = evenly_spaced_crops(signal, RATE)
    assert crops.shape == (10, 3 * RATE) and crops.dtype == np.float32
    for crop, start in zip(crops, starts, strict=True):
        np.testing.assert_array_equal(crop, signal[start : start + 3 * RATE])


def test_a_2_s_utterance_is_repeat_padded_to_ten_identical_crops() -> None:
    signal = np.arange(1, 2 * RATE + 1, dtype=np.float32)
    _, starts = crop_starts(signal.size, RATE)
    assert starts.tolist() == [0] * 10
    crops = evenly_spaced_crops(signal, RATE)
    padded = np.concatenate([signal, signal[:RATE]])  # tiled from its start, as audio_windows
    assert crops.shape == (10, 3 * RATE)
    for crop in crops:
        np.testing.assert_array_equal(crop, padded)
    from uvsdk.media import audio_windows

    np.testing.assert_array_equal(crops[0], audio_windows(signal, RATE, 3.0, 1.0)[0])


# -- the protocol --------------------------------------------------------------------------------

#: Synthetic utterances: speaker k's samples are k + 1 plus a slow ramp (so the crops differ).
SPEAKER_OF = {A1: 0, A2: 0, B1: 1, B2: 1}
LENGTHS = {A1: 10.0, A2: 2.0, B1: 5.0, B2: 3.0}


def load(name: str) -> np.ndarray:
    n = int(LENGTHS[name] * RATE)
    return (SPEAKER_OF[name] + 1 + 0.4 * np.arange(n) / n).astype(np.float32)


def fake_embed(crops: np.ndarray) -> np.ndarray:
    """Deterministic: the speaker's axis, tilted by where in the utterance the crop sits."""
    speaker = np.floor(crops.mean(axis=1)).astype(int) - 1
    tilt = crops.mean(axis=1) % 1.0
    out = np.zeros((len(crops), 3))
    out[np.arange(len(crops)), speaker] = 1.0
    out[:, 2] = tilt
    return out


def test_same_speaker_pairs_score_higher_so_the_eer_is_0(tmp_path: Path) -> None:
    trials = read_trial_list(write_list(tmp_path, GOOD_LIST))
    genuine, impostor = trial_list_protocol(
        trials.labels, trials.left, trials.right, load, fake_embed, sample_rate=RATE
    )
    assert genuine.size == 2 and impostor.size == 2
    assert genuine.min() > impostor.max()
    assert equal_error_rate(genuine, impostor) == 0.0
    # the same scores under swapped labels are all errors
    swapped = trial_list_protocol(
        1 - trials.labels, trials.left, trials.right, load, fake_embed, sample_rate=RATE
    )
    assert equal_error_rate(*swapped) == 1.0


def test_the_score_is_the_mean_cosine_over_all_crop_pairs() -> None:
    projection = np.random.default_rng(1).normal(size=(3 * RATE // 400, 8))

    def embed(crops: np.ndarray) -> np.ndarray:
        return crops[:, ::400] @ projection + np.sin(crops[:, :8] * 7)

    def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a = a / np.linalg.norm(a, axis=1, keepdims=True)
        b = b / np.linalg.norm(b, axis=1, keepdims=True)
        return a @ b.T

    rng = np.random.default_rng(2)
    audio = {name: rng.normal(size=int(LENGTHS[name] * RATE)) for name in LENGTHS}
    scores = trial_scores([A1, B1], [A2, B2], audio.__getitem__, embed, sample_rate=RATE)
    for score, (a, b) in zip(scores, [(A1, A2), (B1, B2)], strict=True):
        crops_a = embed(evenly_spaced_crops(audio[a], RATE))
        crops_b = embed(evenly_spaced_crops(audio[b], RATE))
        pairs = cosines(crops_a, crops_b)
        assert pairs.shape == (10, 10)
        assert score == pytest.approx(pairs.mean(), abs=1e-12)
        # not the cosine of the mean embeddings, which differs here
        mean_cosine = cosines(crops_a.mean(0, keepdims=True), crops_b.mean(0, keepdims=True))
        assert abs(score - mean_cosine.item()) > 1e-6


# -- the accuracy metric -------------------------------------------------------------------------


def test_nearest_prototype_accuracy() -> None:
    prototypes = np.eye(3) * np.array([[2.0], [0.5], [1.0]])  # norms must not matter
    embeddings = np.array([[0.9, 0.1, 0.0], [0.0, 3.0, 0.1], [0.2, 0.0, 0.5], [0.0, 0.1, 0.0]])
    assert nearest_prototype_accuracy(embeddings, [0, 1, 2, 1], prototypes) == 1.0
    assert nearest_prototype_accuracy(embeddings, [0, 1, 2, 2], prototypes) == 0.75
    assert nearest_prototype_accuracy(embeddings, [1, 0, 0, 0], prototypes) == 0.0
    with pytest.raises(ValueError, match="class index"):
        nearest_prototype_accuracy(embeddings, [0, 1, 2, 3], prototypes)
    with pytest.raises(ValueError, match="integer"):
        nearest_prototype_accuracy(embeddings, [0.0, 1.0, 2.0, 1.0], prototypes)


# -- end to end: uvtrain eval --trials -----------------------------------------------------------


def test_uvtrain_eval_scores_a_trial_list_into_its_own_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from uvtrain.cli import app

    monkeypatch.setenv("UVTRAIN_DATA", str(tmp_path / "data"))
    runner = CliRunner()
    out = tmp_path / "run"
    tiny = ["--dataset", "formant-voices", "--clients", "4", "--fraction", "0.5"]
    args = ["run", "--method", "fedhide", *tiny, "--batch-size", "4", "--rounds", "1"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    before = json.loads((out / "report.json").read_text())
    assert "trial_list" not in before and "classification" not in before  # not a class set

    root = make_wav_root(tmp_path / "vox1", {A1: 4.0, A2: 2.0, B1: 3.5, B2: 1.0})
    trials = write_list(tmp_path, GOOD_LIST)
    result = runner.invoke(
        app, ["eval", str(out), "--trials", str(trials), "--wav-root", str(root)]
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    section = report["trial_list"]
    assert section["crops"] == 10 and section["crop_seconds"] == 3.0
    assert section["genuine"] == 2 and section["impostor"] == 2
    assert 0.0 <= section["eer"] <= 1.0 and section["min_dcf"] is not None
    assert section["list"] == str(trials)
    assert section["speakers"] == 2 and section["speakers_seen_in_training"] == 0
    assert "warning" not in result.output
    # the default protocol's splits are as they were: the paper's is never mixed into them
    assert report["splits"] == before["splits"]
    assert "trial list (10 x 3-s crops, 4 trials)" in result.output

    # errors are one line, exit 2, before anything is scored
    for bad, message in [
        (write_list(tmp_path, GOOD_LIST + "1 x\n", "bad.txt"), "line 6:"),
        (tmp_path / "none.txt", "not found"),
    ]:
        result = runner.invoke(
            app, ["eval", str(out), "--trials", str(bad), "--wav-root", str(root)]
        )
        line = result.stderr.strip()
        assert result.exit_code == 2 and "\n" not in line and message in line, result.output
    (root / "wav" / B2).unlink()
    result = runner.invoke(
        app, ["eval", str(out), "--trials", str(trials), "--wav-root", str(root)]
    )
    assert result.exit_code == 2 and B2 in result.stderr and "line 4:" in result.stderr


def test_a_cifar_100_run_reports_top_1_accuracy_under_its_own_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from tests.trainer.test_datasets import write_cifar
    from uvtrain.cli import app

    monkeypatch.setenv("UVTRAIN_DATA", str(tmp_path / "data"))
    write_cifar(tmp_path / "copy" / "cifar-100-python", classes=4, per_class=10)
    out = tmp_path / "run"
    args = ["run", "--method", "fedhide", "--dataset", "cifar-100", "--root", tmp_path / "copy"]
    args += ["--batch-size", "4", "--rounds", "1", "--out", out]
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    section = report["classification"]
    assert section["split"] == "test_known"
    assert section["classes"] == report["clients"]
    assert section["samples"] == report["trials"]["test_known"]["genuine"] > 0
    for key in ("accuracy", "accuracy_references"):
        assert 0.0 <= section[key] <= 1.0
        # a multiple of 1/samples: a fraction of test samples
        assert section[key] * section["samples"] == pytest.approx(
            round(section[key] * section["samples"])
        )
    assert "top-1 accuracy on test_known" in result.output
    assert set(report["splits"]) == {"train", "test_known", "unknown"}  # verification as before
    # one unknown class: no impostor pair, so that split's figures are null, printed as n/a
    assert report["unknown_identities"] == 1 and report["splits"]["unknown"]["eer"] is None
    assert "unknown     EER n/a" in result.output


def test_a_split_without_impostors_leaves_the_roc_plot_without_its_curve(tmp_path: Path) -> None:
    from uvtrain.evaluation import plot_det, plot_roc

    curves = {"test_known": ([0.9, 0.8], [0.1, 0.2]), "unknown": ([0.7], [])}
    for plot in (plot_roc, plot_det):
        path = plot(curves, tmp_path / f"{plot.__name__}.png")
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
