"""Shared fixtures: synthetic voices on disk, small but real ONNX bundles built without torch, and
one tiny trained FedUV run that every test needing "a run" copies (trained once per session)."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two workers on two cores (pyproject's addopts): one math thread each, for torch here and
    # for every process a test starts (inherited), instead of two workers' thread pools, the
    # Flower processes' and the JavaScript tests' fighting over two cores. Set before torch loads;
    # a value the developer set is kept.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import pytest
import soundfile as sf

import uvsdk.template
from uvexport.bundle import make_manifest, write_bundle
from uvexport.reference import (
    centred_spectral_embedding_model,
    codeword_model,
)
from uvsdk.bundle import Code
from uvsdk.codeword import unpack_generator
from uvsdk.inputs import AudioInput
from uvtrain.data.formant import voice_corpus

SAMPLE_RATE = 16000
N_SPEAKERS = 10
CLIPS = 8
#: the BCH generators uvtrain ships (read as files: the SDK tests need no trainer import)
SHIPPED_CODES = Path(__file__).resolve().parents[1] / "trainer" / "uvtrain" / "bch"
AUDIO = AudioInput(sample_rate=SAMPLE_RATE, window_seconds=2.0, hop_seconds=1.0, min_seconds=0.5)
PASSPHRASE = "correct horse battery staple"


#: The slowest test files, run before all others in this order (times: the whole suite at load
#: average 9-11 on the 2-core machine, two workers; a quiet machine takes about a third): the
#: federation and the README's blocks first, each on a worker from the start (much of their time
#: is waiting on their processes), then the rest by time. pytest-xdist (``--dist loadfile
#: --no-loadscope-reorder``, pyproject) hands each worker a whole file in collection order, so
#: the two workers share these and end together on short files. By xdist's default order (most
#: tests first) these few-test files came last, and one worker ran them alone at the end.
SLOWEST_FILES = (
    "tests/deploy/test_local.py",  # the loopback Flower federation: 11 min at load average 9
    "tests/test_readme.py",  # the README's and docs/sdk.md's shell blocks
    "tests/trainer/test_crosssilo.py",  # 13 min at load average 9
    "tests/trainer/test_uvtrain_cli.py",  # 8 min
    "tests/trainer/test_audit.py",  # 8 min
    "tests/trainer/test_ge2e.py",  # 6 min
    "tests/trainer/test_models.py",  # 6 min
    "tests/export/test_uvexport.py",  # 5 min
    "tests/trainer/test_privacy.py",  # 4 min
    "tests/test_sdk_only.py",  # 1 min: pip installs the SDK alone into a fresh venv
    "tests/trainer/test_engine.py",  # 3 min
    "tests/sdk/test_codeword.py",  # galois compiles BCH(127, 64)
    "tests/trainer/test_comparisons.py",
)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Said before the workers collect (about a minute, nothing printed) and start with the
    slowest files (the first dots can take minutes): issue 47, where the suite sat silent for
    ten minutes on a busy machine."""
    return [
        "first results: each worker imports torch to collect (about a minute), then starts with "
        f"the slowest files ({SLOWEST_FILES[0]}, {SLOWEST_FILES[1]}, ...): the first dots can "
        "take minutes; -v names each test as it ends, -m 'not slow' leaves the slowest out "
        "(docs/testing.md)"
    ]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the files as xdist hands them out: :func:`scheduling_order`."""
    items[:] = scheduling_order(items, lambda item: item.nodeid.split("::")[0])


def scheduling_order(items: list, file_of: Callable[[Any], str]) -> list:
    """``items`` with :data:`SLOWEST_FILES` first, in that order, then the other files by their
    number of items, most first (xdist's own order); each file's items kept together and in
    their order."""
    counts = Counter(file_of(item) for item in items)
    rank = {name: index for index, name in enumerate(SLOWEST_FILES)}

    def key(item: Any) -> tuple[int, int, str]:
        name = file_of(item)
        return (rank.get(name, len(rank)), -counts[name], name)

    return sorted(items, key=key)


@pytest.fixture(autouse=True)
def _fast_scrypt_and_clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cheaper scrypt in-process (the cost is a parameter stored in each file), and no
    configuration leaking in from the developer's shell."""
    monkeypatch.setattr(uvsdk.template, "SCRYPT_LOG2_N", 12)
    for name in ("UVSDK_BUNDLE", "UVSDK_STORE", "UVSDK_PASSPHRASE", "UVSDK_TRUSTED_KEYS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("UVSDK_KEYRING", raising=False)


@pytest.fixture(autouse=True)
def _private_state_dir(monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    """Templates' freshness records go to a folder of the test session, not the user's home."""
    monkeypatch.setenv("UVSDK_STATE_DIR", str(state_dir))


@pytest.fixture(scope="session")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's freshness-record folder (outside every store)."""
    return tmp_path_factory.mktemp("uvsdk-state")


@pytest.fixture(scope="session", autouse=True)
def _session_codes_cache(tmp_path_factory: pytest.TempPathFactory):
    """``$UVTRAIN_CACHE`` for the session, in this process and every process a test starts (the
    Flower federation's, ``uvtrain`` and the benchmarks run as subprocesses): a fresh, empty
    folder, so that the developer's own cache is never read or written. The paper's BCH codes
    ship with uvtrain (``uvtrain/bch/``, checked against galois in tests/sdk/test_codeword.py),
    so no process compiles galois with numba except the tests of the build itself."""
    cache = tmp_path_factory.mktemp("uvtrain-cache")
    previous = os.environ.get("UVTRAIN_CACHE")
    os.environ["UVTRAIN_CACHE"] = str(cache)
    yield cache
    if previous is None:
        del os.environ["UVTRAIN_CACHE"]
    else:
        os.environ["UVTRAIN_CACHE"] = previous


@pytest.fixture(scope="session")
def bch127() -> Code:
    """BCH(127, 64) with the generator uvtrain ships (checked against galois)."""
    spec = json.loads((SHIPPED_CODES / "bch_127_64.json").read_text())
    generator = unpack_generator(spec["generator"], spec["k"], spec["n"])
    return Code("bch", spec["n"], spec["k"], spec["d_min"], 32, generator)


@pytest.fixture(scope="session")
def corpus() -> list[list[np.ndarray]]:
    """Ten synthetic speakers, eight 2.5-second clips each."""
    return voice_corpus(N_SPEAKERS, CLIPS, 2.5, SAMPLE_RATE, seed=7)


@pytest.fixture(scope="session")
def voice_dir(tmp_path_factory: pytest.TempPathFactory, corpus: list) -> Path:
    """``speaker{i}/clip{j}.wav`` for every clip of the corpus."""
    root = tmp_path_factory.mktemp("voices")
    for speaker, clips in enumerate(corpus):
        folder = root / f"speaker{speaker}"
        folder.mkdir()
        for index, clip in enumerate(clips):
            sf.write(folder / f"clip{index}.wav", clip, SAMPLE_RATE, subtype="PCM_16")
    return root


def enrollment_dir(voice_dir: Path, speaker: int, tmp_path: Path, count: int = 6) -> Path:
    """A samples folder with the first ``count`` clips of one speaker."""
    folder = tmp_path / f"enroll{speaker}"
    folder.mkdir()
    for index in range(count):
        source = voice_dir / f"speaker{speaker}" / f"clip{index}.wav"
        (folder / source.name).write_bytes(source.read_bytes())
    return folder


def enrolled_clip(voice_dir: Path, speaker: int, index: int = 0) -> Path:
    """One of the speaker's enrollment clips. In prototype mode it is always accepted: its cosine
    with the mean of all enrollment vectors is at least its leave-one-out cosine, which is at least
    the threshold (the smallest of those at q = 0.95 with 6 samples)."""
    return voice_dir / f"speaker{speaker}" / f"clip{index}.wav"


def held_out(voice_dir: Path, speaker: int, first: int = 6) -> list[Path]:
    """The speaker's clips not used for enrollment."""
    return [voice_dir / f"speaker{speaker}" / f"clip{i}.wav" for i in range(first, CLIPS)]


def audio_bundle(
    path: Path, model: bytes, kind: str, dim: int, code: Code | None = None, **kw
) -> Path:
    """Write an audio bundle for a reference model."""
    manifest = make_manifest(
        model,
        name=path.stem,
        method="reference",
        source=AUDIO,
        output_kind=kind,
        dim=dim,
        code=code,
        extra={"note": "reference model built in tests"},
    )
    return write_bundle(path, model, manifest, **kw)


@pytest.fixture(scope="session")
def spectral_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An embedding bundle: log band energies of the spectrum, centred on 40 background speakers
    (other voices than the test corpus's) and normalised."""
    background = voice_corpus(40, 4, 2.0, SAMPLE_RATE, seed=1000)
    clips = [clip for speaker in background for clip in speaker]
    model = centred_spectral_embedding_model(clips, SAMPLE_RATE, n_bands=40)
    return audio_bundle(tmp_path_factory.mktemp("bundles") / "spectral.uvb", model, "embedding", 40)


def trained_codeword_bundle(
    path: Path, corpus: list, spectral: Path, codewords: dict[int, np.ndarray], code: Code
) -> Path:
    """Stand-in for a FedUV model trained with the given users' codewords: the spectral front end
    and a head that maps each known speaker's voice to that speaker's ±1 codeword."""
    import onnxruntime as ort

    session = ort.InferenceSession(
        str(spectral_model_path(spectral)), providers=["CPUExecutionProvider"]
    )
    centroids, rows = [], []
    for speaker, bits in codewords.items():
        clips = np.stack([clip[: 2 * SAMPLE_RATE] for clip in corpus[speaker][:6]]).astype(
            np.float32
        )
        features = session.run(["output"], {"input": clips})[0].mean(axis=0)
        centroids.append(features / np.linalg.norm(features))
        rows.append(1.0 - 2.0 * bits.astype(np.float32))
    model = codeword_model(SAMPLE_RATE, np.stack(centroids), np.stack(rows), n_bands=40)
    return audio_bundle(path, model, "codeword", code.n, code)


def spectral_model_path(bundle: Path) -> Path:
    """Unpack model.onnx of a bundle beside it."""
    import zipfile

    target = bundle.with_suffix(".onnx")
    if not target.exists():
        with zipfile.ZipFile(bundle) as archive:
            target.write_bytes(archive.read("model.onnx"))
    return target


#: the recording conditions the shared calibrated bundle is measured in (two, to stay fast: the
#: clean recording and a mobile call), and its cohort's size
CALIBRATION_CONDITIONS = ("clean", "telephone-gsm")
CALIBRATION_COHORT = 256


@pytest.fixture(scope="session")
def people_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Twenty calibration people (other voices than the test corpus's), eight clips each."""
    root = tmp_path_factory.mktemp("people")
    for person, clips in enumerate(voice_corpus(20, 8, 2.5, SAMPLE_RATE, seed=2024)):
        folder = root / f"person{person:02d}"
        folder.mkdir()
        for index, clip in enumerate(clips):
            sf.write(folder / f"c{index}.wav", clip, SAMPLE_RATE, subtype="PCM_16")
    return root


@pytest.fixture(scope="session")
def calibrated_bundle(
    spectral_bundle: Path, people_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """:func:`spectral_bundle` calibrated on :func:`people_dir` in
    :data:`CALIBRATION_CONDITIONS`, with an AS-norm cohort of :data:`CALIBRATION_COHORT`."""
    from uvexport.calibrate import calibrate_bundle

    out = tmp_path_factory.mktemp("calibrated") / "calibrated.uvb"
    path, _ = calibrate_bundle(
        spectral_bundle,
        people_dir,
        out,
        data="synthetic test people",
        conditions=CALIBRATION_CONDITIONS,
        cohort_size=CALIBRATION_COHORT,
    )
    return path


@pytest.fixture(scope="session")
def initial_codeword_bundle(tmp_path_factory: pytest.TempPathFactory, bch127: Code) -> Path:
    """The round-0 codeword bundle a device gets its code (generator) from before training."""
    rng = np.random.default_rng(0)
    centroids = rng.normal(size=(4, 40))
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    codewords = rng.choice([-1.0, 1.0], size=(4, 127))
    model = codeword_model(SAMPLE_RATE, centroids, codewords, n_bands=40)
    path = tmp_path_factory.mktemp("bundles") / "initial.uvb"
    return audio_bundle(path, model, "codeword", 127, bch127)


#: the tiny FedUV run of :func:`tiny_feduv_run`: `uvtrain run --method feduv` with these options
TINY_RUN = [
    "--dataset",
    "formant-voices",
    "--clients",
    "8",
    "--fraction",
    "0.5",
    "--batch-size",
    "4",
]
TINY_RUN_ROUNDS = 2


@pytest.fixture(scope="session")
def tiny_feduv_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``uvtrain run --method feduv`` on formant-voices, 8 clients, 2 rounds, trained once per
    session. Its dataset is cached in the sibling folder ``data`` (set ``UVTRAIN_DATA`` to it to
    load the run). Read it, or take :func:`feduv_run_copy` to write into one."""
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from uvtrain.cli import app

    root = tmp_path_factory.mktemp("tiny-feduv")
    out = root / "run"
    arguments = ["run", "--method", "feduv", *TINY_RUN, "--rounds", str(TINY_RUN_ROUNDS)]
    result = CliRunner().invoke(
        app, [*arguments, "--out", str(out)], env={"UVTRAIN_DATA": str(root / "data")}
    )
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture()
def feduv_run_copy(tiny_feduv_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of :func:`tiny_feduv_run` (``tmp_path/run``), with ``UVTRAIN_DATA`` set to
    the session's dataset cache, for a test that writes into the run folder."""
    monkeypatch.setenv("UVTRAIN_DATA", str(tiny_feduv_run.parent / "data"))
    return Path(shutil.copytree(tiny_feduv_run, tmp_path / "run"))
