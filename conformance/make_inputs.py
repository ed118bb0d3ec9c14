"""Make the conformance vectors' inputs: three small bundles, the audio clips and the signing key.

    python conformance/make_inputs.py              # needs the train extra (uvexport, uvtrain)
    python conformance/make_inputs.py --calibrate  # only re-calibrate the committed bundles

These files are inputs, committed once; ``conformance/generate.py`` derives every vector from them
with the SDK alone. Running this again makes new bundles (new random training of nothing: the
models are fixed ONNX graphs, but the zip and the calibration are rewritten), after which the
vectors must be regenerated and committed with them.

- ``bundles/voice-embedding.uvb``: the reference log-mel embedding (40-d, prototype mode),
  calibrated on 24 synthetic speakers (one recording condition, ``clean``; raw cosines), signed
  with ``keys/conformance.pem``.
- ``bundles/voice-embedding-cohort.uvb``: the same model with an AS-norm cohort (``cohort.f32``:
  64 vectors of the calibration speakers, ``score_norm`` as-norm, top_k 10) and its prototype
  table on AS-norm scores; ``bundles/voice-embedding-s-norm.uvb`` the same cohort under S-norm
  (all 64) and its table on S-norm scores
  (spec §3.9, §6.7); signed.
- ``bundles/voice-embedding-centre.uvb`` (spec version 9): the same model with a recording
  chain's mean (``centre.f32``: the mean unit vector of the 24 calibration speakers' clips) under
  ``score_norm`` ``{"method": "cosine", "centre": ...}``; ``bundles/voice-embedding-cohort-centre.uvb``
  the same mean beside the cohort bundle's cohort under AS-norm (spec §6.8: the vectors centred
  before the cohort's statistics); neither calibrated (the warm-up rule), both signed.
- ``bundles/voice-codeword.uvb``: a stand-in for a FedUV model (BCH(127, 64), 32 id bits) that
  maps 4 known speakers to their codewords; calibrated (both tables), signed.
- ``bundles/image-embedding.uvb``: a random 16-d convnet on 32×32 RGB pixels (the image contract).
- ``known-users.json``: the message bits of the codeword model's 4 known users (test data).
- ``audio/speaker{S}-{J}.wav``: 16-bit mono 16 kHz clips of synthetic speakers (the voices the
  enrollment and verification vectors use), of several lengths.

``--calibrate`` keeps every model and clip and only measures the calibrations again (calibration
version 2) and writes the cohort bundle from ``voice-embedding.uvb``'s model: what a change of the
calibration format needs, without rebuilding the models.

The signing key is a *published test key* (its seed is below): it proves nothing about who made a
bundle, only that a port checks signatures the way the SDK does.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import soundfile as sf
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from uvexport.bundle import make_manifest, write_bundle
from uvexport.calibrate import calibrate_vectors
from uvexport.reference import (
    centred_spectral_embedding_model,
    codeword_model,
    image_embedding_model,
)
from uvsdk import Verifier
from uvsdk.bundle import Bundle, Code, Manifest
from uvsdk.codeword import encode, unpack_generator
from uvsdk.cohort import CentreSpec, ScoreNorm
from uvsdk.inputs import AudioInput, ImageInput
from uvtrain.data.formant import voice_corpus

HERE = Path(__file__).parent
RATE = 16000
AUDIO = AudioInput(sample_rate=RATE, window_seconds=2.0, hop_seconds=1.0, min_seconds=0.5)
#: the published seed of the conformance signing key (a test key: anyone can sign with it)
KEY_SEED = hashlib.sha256(b"uvsdk conformance signing key, version 1").digest()
#: speakers of the clips (not the background speakers the embedding is centred on, seed 1000)
CLIP_SEED = 3000
CALIBRATION_SEED = 4000
#: the four known users of the codeword model: their user ids, and the random message bits
KNOWN_USERS = 4
#: the calibration clips' one recording condition (the synthetic clips as they are)
CONDITION = "clean"
#: the cohort bundle's cohort: vectors drawn from the calibration speakers, and AS-norm's top-K
COHORT_SIZE = 64
COHORT_TOP_K = 10
CALIBRATION_DATA = "24 synthetic formant speakers (uvtrain.data.formant, seed 4000), 8 clips each"


def signing_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(KEY_SEED)


def write_key() -> None:
    folder = HERE / "keys"
    folder.mkdir(exist_ok=True)
    public = signing_key().public_key()
    pem = public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (folder / "conformance.pub.pem").write_bytes(pem)
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    (folder / "conformance.pub.hex").write_text(raw.hex() + "\n")


def write_clips() -> list[list[np.ndarray]]:
    """Speakers 0-2: eight 2-s clips each, clip 0 of speaker 0 also at 4.3 s and 0.7 s."""
    folder = HERE / "audio"
    folder.mkdir(exist_ok=True)
    speakers = voice_corpus(3, 8, 2.0, RATE, seed=CLIP_SEED)
    for s, clips in enumerate(speakers):
        for j, clip in enumerate(clips):
            sf.write(folder / f"speaker{s}-{j}.wav", clip, RATE, subtype="PCM_16")
    long = voice_corpus(1, 1, 4.3, RATE, seed=CLIP_SEED + 1)[0][0]
    sf.write(folder / "long-4.3s.wav", long, RATE, subtype="PCM_16")
    short = voice_corpus(1, 1, 0.7, RATE, seed=CLIP_SEED + 2)[0][0]
    sf.write(folder / "short-0.7s.wav", short, RATE, subtype="PCM_16")
    # speech between silences: trimming cuts the silence, keeping 0.1 s either side
    speech = voice_corpus(1, 1, 1.2, RATE, seed=CLIP_SEED + 3)[0][0]
    quiet = np.random.default_rng(5).normal(0, 1e-4, size=RATE).astype(np.float32)
    padded = np.concatenate([quiet, speech, quiet[: RATE // 2]])
    sf.write(folder / "padded-silence.wav", padded, RATE, subtype="PCM_16")
    return speakers


def calibration_vectors(bundle: Path) -> dict[str, np.ndarray]:
    people = voice_corpus(24, 8, 2.0, RATE, seed=CALIBRATION_SEED)
    verifier = Verifier(bundle, store=HERE / ".unused-store")
    return {
        f"person{i}": np.stack([verifier.embed(c) for c in clips]) for i, clips in enumerate(people)
    }


def calibrate(
    path: Path,
    data: str,
    generator: np.ndarray | None = None,
    cohort_size: int = 0,
    score_norm: str = "as-norm",
) -> None:
    """Measure the bundle's calibration on the calibration speakers (with a cohort of
    ``cohort_size`` of their vectors when not 0, under ``score_norm``) and rewrite it, signed."""
    bundle = Bundle(path)
    calibrated = calibrate_vectors(
        {CONDITION: calibration_vectors(path)},
        data=data,
        generator=generator,
        cohort_size=cohort_size,
        top_k=COHORT_TOP_K,
        score_norm=score_norm,
    )
    manifest = calibrated.manifest(bundle.manifest)
    write_bundle(
        path, bundle.model_bytes, manifest, sign_key=signing_key(), cohort=calibrated.cohort
    )


def centred(source: Path, target: Path) -> Path:
    """``target``: the bundle ``source`` (its cohort and rule kept, without calibration) with the
    mean unit vector of the calibration speakers' clips as its recording chain's mean, signed."""
    bundle = Bundle(source)
    people = calibration_vectors(source)
    vectors = np.concatenate(list(people.values())).astype(np.float64)
    units = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    centre = units.mean(axis=0).astype("<f4").tobytes()
    spec = CentreSpec(len(people), hashlib.sha256(centre).hexdigest())
    norm = bundle.manifest.score_norm
    norm = ScoreNorm("cosine") if norm is None else norm
    manifest = dataclasses.replace(
        bundle.manifest, calibration=None, score_norm=dataclasses.replace(norm, centre=spec)
    )
    manifest = Manifest.from_dict(json.loads(json.dumps(manifest.to_dict())))
    return write_bundle(
        target,
        bundle.model_bytes,
        manifest,
        sign_key=signing_key(),
        cohort=bundle.cohort_bytes,
        centre=centre,
    )


def centre_bundles() -> None:
    """The two centre bundles from the committed embedding and cohort bundles."""
    bundles = HERE / "bundles"
    centred(bundles / "voice-embedding.uvb", bundles / "voice-embedding-centre.uvb")
    centred(bundles / "voice-embedding-cohort.uvb", bundles / "voice-embedding-cohort-centre.uvb")


def uncalibrated(source: Path, target: Path) -> Path:
    """``target``: the bundle ``source`` without its calibration and cohort (read without
    validating them: a calibration of an older version is refused by the SDK)."""
    with zipfile.ZipFile(source) as archive:
        model = archive.read("model.onnx")
        data = json.loads(archive.read("manifest.json"))
    for key in ("calibration", "cohort", "score_norm"):
        data.pop(key, None)
    return write_bundle(target, model, Manifest.from_dict(data))


def recalibrate() -> None:
    """Calibrate the committed bundles again and write the cohort bundle (models kept)."""
    bundles = HERE / "bundles"
    embedding = uncalibrated(bundles / "voice-embedding.uvb", bundles / "voice-embedding.uvb")
    calibrate(embedding, CALIBRATION_DATA)
    cohort = uncalibrated(embedding, bundles / "voice-embedding-cohort.uvb")
    calibrate(cohort, CALIBRATION_DATA, cohort_size=COHORT_SIZE)
    s_norm = uncalibrated(embedding, bundles / "voice-embedding-s-norm.uvb")
    calibrate(s_norm, CALIBRATION_DATA, cohort_size=COHORT_SIZE, score_norm="s-norm")
    spec = json.loads((HERE.parent / "trainer" / "uvtrain" / "bch" / "bch_127_64.json").read_text())
    codeword = uncalibrated(bundles / "voice-codeword.uvb", bundles / "voice-codeword.uvb")
    calibrate(
        codeword,
        CALIBRATION_DATA,
        generator=unpack_generator(spec["generator"], spec["k"], spec["n"]),
    )
    centre_bundles()


def voice_embedding() -> Path:
    background = voice_corpus(40, 4, 2.0, RATE, seed=1000)
    model = centred_spectral_embedding_model([c for s in background for c in s], RATE, n_bands=40)
    manifest = make_manifest(
        model,
        name="conformance-voice-embedding",
        method="reference",
        source=AUDIO,
        output_kind="embedding",
        dim=40,
        extra={"description": "conformance: log-mel reference embedding; not a trained model"},
    )
    path = write_bundle(HERE / "bundles" / "voice-embedding.uvb", model, manifest)
    cohort = write_bundle(HERE / "bundles" / "voice-embedding-cohort.uvb", model, manifest)
    calibrate(path, CALIBRATION_DATA)
    calibrate(cohort, CALIBRATION_DATA, cohort_size=COHORT_SIZE)
    return path


def voice_codeword(embedding: Path) -> Path:
    spec = json.loads((HERE.parent / "trainer" / "uvtrain" / "bch" / "bch_127_64.json").read_text())
    generator = unpack_generator(spec["generator"], spec["k"], spec["n"])
    code = Code("bch", spec["n"], spec["k"], spec["d_min"], 32, generator)
    rng = np.random.default_rng(11)
    rows, centroids = [], []
    verifier = Verifier(embedding, store=HERE / ".unused-store")
    known = voice_corpus(KNOWN_USERS, 8, 2.0, RATE, seed=CLIP_SEED)  # speakers 0-2 are the clips'
    messages = {}
    for user, voices in enumerate(known):
        message = np.concatenate(
            [[(user >> s) & 1 for s in range(31, -1, -1)], rng.integers(0, 2, spec["k"] - 32)]
        ).astype(np.uint8)
        messages[user] = "".join(map(str, message))
        rows.append(1.0 - 2.0 * encode(message, generator).astype(np.float32))
        mean = np.mean([verifier.embed(c) for c in voices[:5]], axis=0)
        centroids.append(mean / np.linalg.norm(mean))
    # test data, not a secret: the vectors enroll speaker 0 in codeword mode with this message
    (HERE / "known-users.json").write_text(json.dumps({"messages": messages}, indent=1) + "\n")
    model = codeword_model(RATE, np.stack(centroids), np.stack(rows), n_bands=40)
    manifest = make_manifest(
        model,
        name="conformance-voice-codeword",
        method="reference",
        source=AUDIO,
        output_kind="codeword",
        dim=code.n,
        code=code,
        extra={
            "description": "conformance: a stand-in FedUV model (4 known users); not trained",
            "known_users": "user ids 0-3; their message bits: numpy default_rng(11), k-32 each",
        },
    )
    path = write_bundle(HERE / "bundles" / "voice-codeword.uvb", model, manifest)
    calibrate(path, CALIBRATION_DATA, generator=generator)
    return path


def image_embedding() -> Path:
    source = ImageInput(height=32, width=32, channels=3)
    model = image_embedding_model(32, 32, 3, dim=16, seed=0)
    manifest = make_manifest(
        model,
        name="conformance-image-embedding",
        method="reference",
        source=source,
        output_kind="embedding",
        dim=16,
        extra={"description": "conformance: random image convnet; its outputs mean nothing"},
    )
    return write_bundle(
        HERE / "bundles" / "image-embedding.uvb", model, manifest, sign_key=signing_key()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--calibrate", action="store_true", help="only re-calibrate the committed bundles"
    )
    parser.add_argument(
        "--centre", action="store_true", help="only write the centre bundles (spec version 9)"
    )
    args = parser.parse_args()
    if args.centre:
        centre_bundles()
    elif args.calibrate:
        recalibrate()
    else:
        (HERE / "bundles").mkdir(exist_ok=True)
        write_key()
        write_clips()
        embedding = voice_embedding()
        voice_codeword(embedding)
        image_embedding()
        centre_bundles()
    for path in sorted((HERE / "bundles").glob("*.uvb")):
        print(f"{path.relative_to(HERE)}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
