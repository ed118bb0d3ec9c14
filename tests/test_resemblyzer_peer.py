"""``benchmarks/resemblyzer_peer.py``: the peer's python is always named, and the helper runs the
worker and reads its ``.npz`` back. The real peer venv (with ``resemblyzer``) is never used here:
the worker runs in this interpreter against small stand-ins for ``resemblyzer``, ``librosa`` and
``torch`` on ``PYTHONPATH``."""

from __future__ import annotations

import importlib.util
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
_spec = importlib.util.spec_from_file_location(
    "resemblyzer_peer", BENCHMARKS / "resemblyzer_peer.py"
)
peer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peer)

# Stand-ins: the vector of a clip is its first 256 samples, normalised; "trimming" drops the
# first half of the audio, and leaves nothing of a file whose name says "silent".
STUBS = {
    "resemblyzer/__init__.py": """
        import numpy as np
        import soundfile
        from resemblyzer import audio, hparams

        def preprocess_wav(path):
            wav, _ = soundfile.read(str(path), dtype="float32")
            return wav[:0] if "silent" in str(path) else wav[wav.size // 2 :]

        class VoiceEncoder:
            def __init__(self, device, verbose=True):
                pass

            def embed_utterance(self, wav):
                v = np.resize(wav, 256).astype(np.float32)
                return v / np.linalg.norm(v)
    """,
    "resemblyzer/audio.py": """
        def normalize_volume(wav, target_dBFS, increase_only=False):
            return wav
    """,
    "resemblyzer/hparams.py": """
        sampling_rate = 16000
        audio_norm_target_dBFS = -30
        model_embedding_size = 256
    """,
    "librosa/__init__.py": """
        import soundfile

        def load(path, sr=None):
            wav, rate = soundfile.read(path, dtype="float32")
            return wav, rate

        def resample(wav, orig_sr, target_sr):
            assert orig_sr == target_sr
            return wav
    """,
    "torch/__init__.py": """
        def set_num_threads(n):
            pass
    """,
}


@pytest.fixture
def stub_env(tmp_path: Path) -> dict[str, str]:
    for name, text in STUBS.items():
        path = tmp_path / "stubs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return {**os.environ, "PYTHONPATH": str(tmp_path / "stubs")}


def test_no_silent_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(peer.PEER_ENV, raising=False)
    with pytest.raises(peer.PeerUnavailable, match="--peer-python PATH or set UVSDK_PEER_PYTHON"):
        peer.peer_python(None)
    with pytest.raises(peer.PeerUnavailable, match="is not an executable") as missing:
        peer.peer_python(tmp_path / "no-such-python")
    assert "\n" not in str(missing.value)
    monkeypatch.setenv(peer.PEER_ENV, sys.executable)
    assert Path(peer.peer_python(None)) == Path(sys.executable)


def test_helper_runs_the_worker(tmp_path: Path, stub_env: dict[str, str]) -> None:
    rng = np.random.default_rng(0)
    folder = tmp_path / "speakers" / "alice"
    folder.mkdir(parents=True)
    clips = {name: rng.normal(0, 0.1, 16000).astype(np.float32) for name in ("a", "b", "silent")}
    for name, wav in clips.items():
        sf.write(folder / f"{name}.wav", wav, 16000, subtype="FLOAT")
    broken = folder / "broken.wav"
    broken.write_bytes(b"not audio")
    files = peer.audio_files([str(tmp_path / "speakers")], None)
    assert files == [str(folder / n) for n in ("a.wav", "b.wav", "broken.wav", "silent.wav")]

    result = peer.peer_embeddings(files, sys.executable, untrimmed=True, env=stub_env)
    assert sorted(result.vectors) == [str(folder / "a.wav"), str(folder / "b.wav")]
    vector = result.vectors[str(folder / "a.wav")]
    expected = np.resize(clips["a"][8000:], 256)
    np.testing.assert_allclose(vector, expected / np.linalg.norm(expected), rtol=1e-6)
    untrimmed = np.resize(clips["a"], 256)
    np.testing.assert_allclose(
        result.untrimmed[str(folder / "a.wav")], untrimmed / np.linalg.norm(untrimmed), rtol=1e-6
    )
    assert result.seconds[str(folder / "a.wav")] == (1.0, 0.5)
    assert result.failed[str(folder / "silent.wav")] == (
        "ValueError: no speech left after webrtcvad trimming"
    )
    assert str(folder / "broken.wav") in result.failed
    assert "python" in result.versions


def test_a_python_without_resemblyzer_says_so(tmp_path: Path) -> None:
    if importlib.util.find_spec("resemblyzer") is not None:
        pytest.skip("this interpreter has resemblyzer")
    clip = tmp_path / "a.wav"
    sf.write(clip, np.zeros(1600, np.float32), 16000)
    with pytest.raises(RuntimeError, match="cannot import resemblyzer"):
        peer.peer_embeddings([clip], sys.executable)
