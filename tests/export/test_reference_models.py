"""The reference ONNX models (uvexport.reference) and the synthetic voices (uvtrain.data.formant)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from uvexport.reference import (
    codeword_model,
    convnet_flops,
    image_embedding_model,
    mel_filterbank,
    spectral_embedding_model,
    waveform_convnet_model,
)
from uvtrain.data.formant import FormantVoice, random_voice, synthesize, voice_corpus

SAMPLE_RATE = 16000
N_SPEAKERS, N_CLIPS, N_ENROLL, CODE_LENGTH = 8, 6, 3, 127


def session(model: bytes) -> ort.InferenceSession:
    """An onnxruntime CPU session for serialised model bytes."""
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"])


def run(model_session: ort.InferenceSession, batch: np.ndarray) -> np.ndarray:
    """Run a one-input, one-output model."""
    return model_session.run(["output"], {"input": batch})[0]


def equal_error_rate(genuine: np.ndarray, impostor: np.ndarray) -> float:
    """EER: where the false-reject and false-accept rates cross, over all score thresholds."""
    thresholds = np.sort(np.concatenate([genuine, impostor]))
    false_reject = (genuine[None, :] < thresholds[:, None]).mean(axis=1)
    false_accept = (impostor[None, :] >= thresholds[:, None]).mean(axis=1)
    crossing = np.argmin(np.abs(false_accept - false_reject))
    return float((false_accept[crossing] + false_reject[crossing]) / 2.0)


@pytest.fixture(scope="module")
def corpus() -> np.ndarray:
    """[speakers, clips, samples]: 8 synthetic speakers, 6 clips of 2 s each."""
    return np.asarray(voice_corpus(N_SPEAKERS, N_CLIPS, 2.0, SAMPLE_RATE, seed=0))


@pytest.fixture(scope="module")
def spectral() -> ort.InferenceSession:
    return session(spectral_embedding_model(SAMPLE_RATE))


@pytest.fixture(scope="module")
def embeddings(spectral: ort.InferenceSession, corpus: np.ndarray) -> np.ndarray:
    """[speakers, clips, 40] spectral embeddings of the corpus."""
    flat = corpus.reshape(N_SPEAKERS * N_CLIPS, -1)
    return run(spectral, flat).reshape(N_SPEAKERS, N_CLIPS, -1)


@pytest.fixture(scope="module")
def codewords() -> np.ndarray:
    return np.where(np.random.default_rng(7).random((N_SPEAKERS, CODE_LENGTH)) < 0.5, -1.0, 1.0)


@pytest.fixture(scope="module")
def codeword_session(embeddings: np.ndarray, codewords: np.ndarray) -> ort.InferenceSession:
    centroids = embeddings[:, :N_ENROLL].mean(axis=1)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    return session(codeword_model(SAMPLE_RATE, centroids, codewords))


# --- synthetic voices -------------------------------------------------------------------------


def test_synthesize_is_reproducible_finite_and_bounded() -> None:
    voice = random_voice(np.random.default_rng(3))
    first = synthesize(voice, 1.5, SAMPLE_RATE, np.random.default_rng(11))
    again = synthesize(voice, 1.5, SAMPLE_RATE, np.random.default_rng(11))
    other = synthesize(voice, 1.5, SAMPLE_RATE, np.random.default_rng(12))
    assert first.dtype == np.float32 and first.shape == (24000,)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    assert np.isfinite(first).all() and np.abs(first).max() <= 1.0


def test_voice_corpus_is_reproducible_and_well_formed(corpus: np.ndarray) -> None:
    assert corpus.shape == (N_SPEAKERS, N_CLIPS, 2 * SAMPLE_RATE)
    assert np.isfinite(corpus).all()
    peaks = np.abs(corpus).max(axis=-1)
    assert (peaks <= 1.0).all() and (peaks > 0.25).all()
    smaller = np.asarray(voice_corpus(2, 2, 2.0, SAMPLE_RATE, seed=0))
    np.testing.assert_array_equal(smaller, corpus[:2, :2])


def test_formant_voice_validates_itself() -> None:
    with pytest.raises(ValueError):
        FormantVoice(f0=120.0, formants=(500.0, 1500.0), bandwidths=(80.0,), tilt=-6.0)
    with pytest.raises(ValueError):
        FormantVoice(f0=-1.0, formants=(500.0,), bandwidths=(80.0,), tilt=-6.0)


# --- the contract of every model --------------------------------------------------------------


AUDIO_MODELS = {
    "spectral": (lambda: spectral_embedding_model(SAMPLE_RATE), 40),
    "convnet": (lambda: waveform_convnet_model(SAMPLE_RATE, CODE_LENGTH), CODE_LENGTH),
}


@pytest.mark.parametrize("name", sorted(AUDIO_MODELS))
def test_audio_model_has_dynamic_batch_and_length(name: str) -> None:
    build, dim = AUDIO_MODELS[name]
    model_session = session(build())
    (model_input,), (model_output,) = model_session.get_inputs(), model_session.get_outputs()
    assert (model_input.name, model_input.type) == ("input", "tensor(float)")
    assert model_output.name == "output" and model_output.shape[1] == dim
    assert all(isinstance(axis, str) for axis in model_input.shape)
    rng = np.random.default_rng(0)
    for batch, seconds in ((1, 1.0), (3, 2.5)):
        waveform = rng.uniform(-0.5, 0.5, (batch, int(seconds * SAMPLE_RATE))).astype(np.float32)
        assert run(model_session, waveform).shape == (batch, dim)


def test_codeword_model_contract(codeword_session: ort.InferenceSession) -> None:
    (model_input,), (model_output,) = codeword_session.get_inputs(), codeword_session.get_outputs()
    assert (model_input.name, model_output.name) == ("input", "output")
    rng = np.random.default_rng(1)
    for batch, seconds in ((1, 1.0), (3, 2.5)):
        waveform = rng.uniform(-0.5, 0.5, (batch, int(seconds * SAMPLE_RATE))).astype(np.float32)
        output = run(codeword_session, waveform)
        assert output.shape == (batch, CODE_LENGTH) and output.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(output, axis=1), np.sqrt(CODE_LENGTH), rtol=1e-4)


def test_image_model_contract() -> None:
    model_session = session(image_embedding_model(32, 24, 3, dim=64))
    (model_input,) = model_session.get_inputs()
    assert (model_input.name, model_input.type) == ("input", "tensor(uint8)")
    assert model_input.shape[1:] == [32, 24, 3]
    rng = np.random.default_rng(2)
    for batch in (1, 3):
        pixels = rng.integers(0, 256, (batch, 32, 24, 3), dtype=np.uint8)
        output = run(model_session, pixels)
        assert output.shape == (batch, 64)
        np.testing.assert_allclose(np.linalg.norm(output, axis=1), 1.0, rtol=1e-5)


# --- the spectral embedding -------------------------------------------------------------------


def numpy_spectral_embedding(waveform: np.ndarray, n_bands: int = 40) -> np.ndarray:
    """The same front end in plain numpy (framing, Hann, rfft), to check the Conv-as-DFT graph."""
    frame, hop = 400, 160
    starts = np.arange(0, waveform.size - frame + 1, hop)
    window = np.hanning(frame + 1)[:-1]
    frames = waveform[starts[:, None] + np.arange(frame)] * window
    power = np.abs(np.fft.rfft(frames, axis=1) * (2.0 / window.sum())) ** 2
    bands = power @ mel_filterbank(n_bands, frame, SAMPLE_RATE, 60.0, SAMPLE_RATE / 2).T
    average = np.log(bands + 1e-12).mean(axis=0)
    centred = average - average.mean()
    return centred / np.linalg.norm(centred)


def test_spectral_embedding_matches_numpy(corpus: np.ndarray, embeddings: np.ndarray) -> None:
    expected = numpy_spectral_embedding(corpus[0, 0].astype(np.float64))
    np.testing.assert_allclose(embeddings[0, 0], expected, atol=2e-4)


def test_spectral_embedding_has_unit_rows_and_is_gain_invariant(
    spectral: ort.InferenceSession, corpus: np.ndarray, embeddings: np.ndarray
) -> None:
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=-1), 1.0, rtol=1e-5)
    clips = corpus[:, 0]
    quieter = run(spectral, (0.3 * clips).astype(np.float32))
    cosines = np.sum(quieter * embeddings[:, 0], axis=1)
    assert cosines.min() > 0.999


def test_spectral_embedding_tells_speakers_apart(embeddings: np.ndarray) -> None:
    flat = embeddings.reshape(N_SPEAKERS * N_CLIPS, -1)
    labels = np.repeat(np.arange(N_SPEAKERS), N_CLIPS)
    rows, columns = np.triu_indices(labels.size, k=1)
    scores = np.sum(flat[rows] * flat[columns], axis=1)
    same = labels[rows] == labels[columns]
    eer = equal_error_rate(scores[same], scores[~same])
    assert scores[same].mean() > scores[~same].mean() + 0.05
    assert eer < 0.10, f"EER {eer:.3f}"  # 0.025 measured for this corpus


# --- the codeword stand-in --------------------------------------------------------------------


def test_codeword_model_scores_the_true_speaker(
    codeword_session: ort.InferenceSession, corpus: np.ndarray, codewords: np.ndarray
) -> None:
    held_out = corpus[:, N_ENROLL:].reshape(N_SPEAKERS * (N_CLIPS - N_ENROLL), -1)
    speaker = np.repeat(np.arange(N_SPEAKERS), N_CLIPS - N_ENROLL)
    scores = run(codeword_session, held_out) @ codewords.T / CODE_LENGTH
    true = scores[np.arange(speaker.size), speaker]
    others = np.delete(scores, speaker + N_SPEAKERS * np.arange(speaker.size))
    assert true.min() > 0.5, f"true-speaker scores {np.round(true, 3)}"
    assert others.max() < 0.3, f"largest other score {others.max():.3f}"


def test_codeword_model_rejects_bad_heads() -> None:
    centroids = np.ones((2, 40))
    with pytest.raises(ValueError, match="only"):
        codeword_model(SAMPLE_RATE, centroids, np.full((2, 7), 0.5))
    with pytest.raises(ValueError, match="codewords"):
        codeword_model(SAMPLE_RATE, centroids, np.ones((3, 7)))
    with pytest.raises(ValueError, match="centroids"):
        codeword_model(SAMPLE_RATE, np.ones((2, 30)), np.ones((2, 7)))


# --- the latency-benchmark convnet ------------------------------------------------------------


def test_waveform_convnet_runs_on_two_seconds_at_about_one_gflop(corpus: np.ndarray) -> None:
    flops = convnet_flops(2 * SAMPLE_RATE, CODE_LENGTH)
    assert 0.8e9 <= flops <= 1.5e9
    output = run(session(waveform_convnet_model(SAMPLE_RATE, CODE_LENGTH)), corpus[0, :1])
    assert output.shape == (1, CODE_LENGTH) and np.isfinite(output).all()
    np.testing.assert_allclose(np.linalg.norm(output, axis=1), np.sqrt(CODE_LENGTH), rtol=1e-4)
    with pytest.raises(ValueError):
        convnet_flops(200)
