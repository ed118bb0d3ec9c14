"""Generate the conformance vectors from the Python SDK (the reference implementation).

    python conformance/generate.py            # (re)write conformance/vectors/*.json
    python conformance/generate.py --check    # regenerate in memory, compare, exit 1 on a change

Every expected value below is what the SDK's own code returns or raises for the input: the
vectors are the SDK's behaviour written down, so a port that reproduces them behaves like it.
The inputs are committed files (``bundles/``, ``audio/``, ``known-users.json``, made once by
``make_inputs.py``) and values written here; nothing is random without a fixed seed, so
regenerating is a no-op (``--check``, run by ``tests/sdk/test_conformance.py``). Model outputs
are compared with a tolerance of 1e-6 there, everything else exactly. The format of each file is
described in ``conformance/README.md``; the rules behind it in ``docs/spec.md``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import hashlib
import json
import math
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from uvsdk import backoff as backoff_rules
from uvsdk import template as templates
from uvsdk.bundle import AudioInput, Bundle, Manifest
from uvsdk.calibration import check_far, user_threshold, warmup_threshold
from uvsdk.codeword import (
    bipolar,
    code_fingerprint,
    encode,
    new_message,
    pack_generator,
    unpack_generator,
)
from uvsdk.errors import UvsdkError
from uvsdk.freshness import FileFreshness
from uvsdk.media import check_audio, trim_silence, window_starts
from uvsdk.scoring import codeword_scores, cosine_scores, leave_one_out_scores, prototype
from uvsdk.verifier import MIN_ENROLLMENT_SAMPLES, Verifier

HERE = Path(__file__).parent
ROOT = HERE.parent
VECTORS = HERE / "vectors"
FORMAT = "uvsdk-conformance/1"
DEFAULT_BUNDLE = "sdk/uvsdk/data/default.uvb"  # relative to the repository root
MODEL_TOLERANCE = 1e-4  # a port's model output may differ by this x max(1, max |expected|)


# -- small helpers ---------------------------------------------------------------------------


def f32(array: np.ndarray) -> list[float]:
    """A float32 array as JSON numbers (each the exact float32 value, printed round-trip)."""
    return [float(x) for x in np.asarray(array, dtype=np.float32).ravel()]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def f32_b64(array: np.ndarray) -> str:
    return b64(np.asarray(array, dtype="<f4").tobytes())


def bits(array: np.ndarray) -> str:
    return "".join(str(int(b)) for b in np.asarray(array).ravel())


def wav(name: str) -> np.ndarray:
    samples, rate = sf.read(HERE / "audio" / name, dtype="float32")
    assert rate == 16000 and samples.ndim == 1
    return samples


def verifier(bundle: str) -> Verifier:
    return Verifier(ROOT / bundle if bundle == DEFAULT_BUNDLE else HERE / bundle, store=HERE)


def outcome(action: Callable[[], Any]) -> tuple[Any, UvsdkError | None]:
    try:
        return action(), None
    except UvsdkError as error:
        return None, error


def document(kind: str, about: str, **sections: Any) -> dict[str, Any]:
    return {"format": FORMAT, "kind": kind, "about": about, **sections}


# -- media: checks, trimming, windows ---------------------------------------------------------


def media() -> dict[str, Any]:
    rate = 8000  # the checks at a low rate keep the file small; they depend on no rate
    seconds = 0.6
    count = int(seconds * rate)
    rng = np.random.default_rng(1)
    speech = wav("speaker0-0.wav")[::2][:count]
    tone = (0.3 * np.sin(2 * np.pi * 220 * np.arange(count) / rate)).astype(np.float32)
    clipped = tone.copy()
    clipped[: count // 20] = 1.0  # 5 % at full scale
    slightly = tone.copy()
    slightly[: count // 200] = -1.0  # 0.5 % at full scale: tolerated
    loud = tone.copy()
    loud[500] = 2.5
    nan = tone.copy()
    nan[10] = np.nan
    check_inputs = {
        "speech": speech,
        "digital-silence": np.zeros(count, np.float32),
        "quiet-65dBFS": (tone / 0.3 * 10 ** (-65 / 20) * math.sqrt(2)).astype(np.float32),
        "too-short-0.3s": tone[: int(0.3 * rate)],
        "exactly-min-0.5s": tone[: rate // 2],
        "clipped-5pct": clipped,
        "clipped-0.5pct": slightly,
        "out-of-range": loud,
        "nan": nan,
        "inf": np.where(np.arange(count) == 3, np.inf, tone).astype(np.float32),
    }
    checks = []
    for name, samples in check_inputs.items():
        expect = {}
        for use, tolerate_clipped in (("enroll", False), ("verify", True)):
            _, error = outcome(
                lambda s=samples, n=name: check_audio(s, rate, min_seconds=0.5, name=n)
            )
            reason = getattr(error, "reason", None)
            expect[use] = (
                None if reason is None or (tolerate_clipped and reason == "clipped") else reason
            )
        checks.append(
            {
                "name": name,
                "sample_rate": rate,
                "min_seconds": 0.5,
                "samples_f32": f32_b64(samples),
                "enroll": expect["enroll"],
                "verify": expect["verify"],
            }
        )

    burst = np.concatenate(
        [rng.normal(0, 1e-4, 13230), rng.normal(0, 0.2, 4410), rng.normal(0, 1e-4, 13230)]
    ).astype(np.float32)  # 0.7 s at 44.1 kHz: 0.1 s of noise between silences
    trim_inputs = [  # (name, samples or a WAV of audio/, rate, the min_seconds tried)
        ("padded-silence", "padded-silence.wav", 16000, (0.5, 2.0)),
        ("speech-no-silence", speech, 8000, (0.5,)),
        ("burst-44.1kHz", burst, 44100, (0.5, 0.0)),  # widened to 0.5 s, or not
        ("one-frame", tone[:300], 8000, (0.0,)),
        (
            "quiet-start",
            np.concatenate([tone[:2000] * 0.01, tone]).astype(np.float32),
            8000,
            (0.5,),
        ),
    ]
    trims = []
    for name, given, sr, minimums in trim_inputs:
        samples = wav(given) if isinstance(given, str) else given
        results = []
        for minimum in minimums:
            trimmed = trim_silence(samples, sr, min_seconds=minimum)
            start = _find(samples, trimmed)
            results.append({"min_seconds": minimum, "start": start, "stop": start + trimmed.size})
        source = (
            {"wav": f"audio/{given}"}
            if isinstance(given, str)
            else {"samples_f32": f32_b64(samples)}
        )
        trims.append({"name": name, "sample_rate": sr, **source, "results": results})

    windows = []
    for length, sr, window, hop in [
        (32000, 16000, 2.0, 1.0),
        (32001, 16000, 2.0, 1.0),
        (31999, 16000, 2.0, 1.0),
        (68800, 16000, 2.0, 1.0),
        (48000, 16000, 2.0, 1.0),
        (1, 16000, 2.0, 1.0),
        (100000, 44100, 1.5, 0.25),
        (50000, 22050, 1.6, 0.8),
        (123457, 8000, 3.0, 0.05),
        (70000, 16000, 2.0, 2.0),
        (40000, 11025, 0.10002, 0.05),
        (60000, 11025, 2.5, 1.5),  # 27562.5 and 16537.5 samples: round half to even
    ]:
        width, starts = window_starts(length, sr, window, hop)
        windows.append(
            {
                "length": length,
                "sample_rate": sr,
                "window_seconds": window,
                "hop_seconds": hop,
                "width": width,
                "starts": starts,
            }
        )
    return document(
        "media",
        "Input checks (enroll refuses clipped audio, verify tolerates it), silence trimming, and "
        "window starts (spec §5.2–§5.4).",
        checks=checks,
        trims=trims,
        windows=windows,
    )


def _find(samples: np.ndarray, part: np.ndarray) -> int:
    for start in range(samples.size - part.size + 1):
        if np.array_equal(samples[start : start + part.size], part):
            return start
    raise AssertionError("the trimmed clip is not a slice of the clip")


# -- model: PCM or pixels -> the vector the SDK embeds -----------------------------------------


def model() -> dict[str, Any]:
    cases = []
    audio_cases = [
        (
            "bundles/voice-embedding.uvb",
            ["speaker0-0.wav", "long-4.3s.wav", "short-0.7s.wav", "padded-silence.wav"],
        ),
        ("bundles/voice-codeword.uvb", ["speaker0-0.wav", "long-4.3s.wav"]),
        (DEFAULT_BUNDLE, ["speaker0-0.wav", "long-4.3s.wav"]),
    ]
    for bundle, files in audio_cases:
        v = verifier(bundle)
        spec = v.bundle.manifest.input
        assert isinstance(spec, AudioInput)
        for name in files:
            samples = wav(name)
            trimmed = trim_silence(samples, spec.sample_rate, min_seconds=spec.min_seconds)
            start = _find(samples, trimmed)
            width, starts = window_starts(
                trimmed.size, spec.sample_rate, spec.window_seconds, spec.hop_seconds
            )
            first = np.resize(trimmed, width) if trimmed.size < width else trimmed[:width]
            window0 = v.bundle.run(first[None])[0]
            vector = v.embed(samples)
            cases.append(
                {
                    "bundle": bundle,
                    "wav": f"audio/{name}",
                    "trim": [start, start + trimmed.size],
                    "width": width,
                    "starts": starts,
                    "window0_output": f32(window0),
                    "vector": f32(vector),
                    "tolerance": _tolerance(vector, window0),
                }
            )
    v = verifier("bundles/image-embedding.uvb")
    for seed in (0, 1):
        pixels = np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)
        vector = v.embed(pixels)
        cases.append(
            {
                "bundle": "bundles/image-embedding.uvb",
                "pixels_u8": b64(pixels.tobytes()),
                "shape": [32, 32, 3],
                "vector": f32(vector),
                "tolerance": _tolerance(vector),
            }
        )
    return document(
        "model",
        "Decoded input -> the clip's vector: audio is 16-bit WAV at the bundle's rate (sample / "
        "32768), trimmed, cut into windows (each repeat-padded when the clip is shorter), run, "
        "and the window outputs averaged; images are uint8 H x W x C. window0_output is the "
        "model's output for the first window alone. A port passes when every element is within "
        "`tolerance` of the expected one (spec §3.8, §5.4).",
        tolerance_rule=f"{MODEL_TOLERANCE} x max(1, max |expected|)",
        cases=cases,
    )


def _tolerance(*vectors: np.ndarray) -> float:
    largest = max(float(np.max(np.abs(v))) for v in vectors)
    return MODEL_TOLERANCE * max(1.0, largest)


# -- enroll: outputs -> reference, threshold; verify scores -----------------------------------


def enroll() -> dict[str, Any]:
    known = json.loads((HERE / "known-users.json").read_text())["messages"]
    cases = []
    plans = [
        # (bundle, mode, enrollment clips, target tpr, far, verification clips)
        (
            "bundles/voice-embedding.uvb",
            "prototype",
            [f"speaker0-{j}.wav" for j in range(6)],
            0.95,
            0.01,
        ),
        (
            "bundles/voice-embedding.uvb",
            "prototype",
            [f"speaker0-{j}.wav" for j in range(6)],
            0.95,
            None,
        ),
        (
            "bundles/voice-embedding.uvb",
            "prototype",
            [f"speaker1-{j}.wav" for j in range(8)],
            0.75,
            0.05,
        ),
        (
            "bundles/voice-embedding.uvb",
            "prototype",
            [f"speaker2-{j}.wav" for j in range(5)],
            0.95,
            0.03,
        ),
        (
            "bundles/voice-embedding.uvb",
            "prototype",
            [f"speaker2-{j}.wav" for j in range(5)],
            0.95,
            0.0001,
        ),
        # samples of three people: the warm-up threshold is low, the calibrated row floors it
        (
            "bundles/voice-embedding.uvb",
            "prototype",
            [
                "speaker0-0.wav",
                "speaker1-0.wav",
                "speaker2-0.wav",
                "speaker0-1.wav",
                "speaker1-1.wav",
                "speaker2-1.wav",
            ],
            0.95,
            0.01,
        ),
        (
            "bundles/voice-codeword.uvb",
            "codeword",
            [f"speaker0-{j}.wav" for j in range(6)],
            0.95,
            0.01,
        ),
        (
            "bundles/voice-codeword.uvb",
            "codeword",
            [f"speaker0-{j}.wav" for j in range(6)],
            0.9,
            None,
        ),
    ]
    trials = [f"speaker{s}-{j}.wav" for s, j in ((0, 6), (0, 7), (1, 6), (1, 7), (2, 6), (2, 7))]
    for bundle, mode, clips, tpr, far in plans:
        v = verifier(bundle)
        manifest = v.bundle.manifest
        outputs = np.stack([v.embed(wav(c)) for c in clips])
        case: dict[str, Any] = {
            "bundle": bundle,
            "mode": mode,
            "target_tpr": tpr,
            "far": far,
            "enrollment_outputs": [f32(o) for o in outputs],
        }
        if mode == "codeword":
            codeword = encode(
                np.array([int(b) for b in known["0"]], np.uint8), manifest.code.generator
            )
            case["codeword"] = bits(codeword)
            scores = codeword_scores(bipolar(codeword), outputs)
        else:
            case["prototype"] = f32(prototype(outputs).astype(np.float32))
            scores = leave_one_out_scores(outputs)
        case["warmup_scores"] = [float(s) for s in scores]
        case["warmup_threshold"] = warmup_threshold(scores, tpr)
        result, error = outcome(
            lambda s=scores, q=tpr, c=manifest.calibration, m=mode, f=far: user_threshold(
                s, q, c, m, f
            )
        )
        if error is not None:
            case["error"] = type(error).__name__
            cases.append(case)
            continue
        threshold, row = result
        case["row"] = None if row is None else {"far": row.far, "threshold": row.threshold}
        case["threshold"] = threshold
        case["own_rejected"] = int(np.count_nonzero(scores < threshold))
        reference = (
            bipolar(codeword) if mode == "codeword" else prototype(outputs).astype(np.float32)
        )
        verify = []
        for clip in trials:
            vector = v.embed(wav(clip))
            if mode == "codeword":
                score = float(codeword_scores(reference, vector[None])[0])
            else:
                score = float(cosine_scores(reference, vector[None])[0])
            verify.append({"output": f32(vector), "score": score, "accepted": score >= threshold})
        case["verify"] = verify
        cases.append(case)
    too_few = verifier("bundles/voice-embedding.uvb")
    short = [f32(too_few.embed(wav(f"speaker0-{j}.wav"))) for j in range(4)]
    calibrations = {}
    for bundle in ("bundles/voice-embedding.uvb", "bundles/voice-codeword.uvb", DEFAULT_BUNDLE):
        calibration = verifier(bundle).bundle.manifest.calibration
        calibrations[bundle] = calibration.sha256
    far_checks = []
    for far in (0.5, 0.01, 1e-5, 0.0, 0.51, -0.1, 1.0):
        _, error = outcome(lambda f=far: check_far(f))
        far_checks.append({"far": far, "valid": error is None})
    return document(
        "enroll",
        "Enrollment from the model's outputs (the enrollment_outputs stand in for embedding the "
        "clips): the reference (prototype mode) or the codeword's scores, the warm-up scores "
        "and threshold, the calibration row and the final threshold max(warm-up, row); then "
        "verification of other outputs. Scores within 1e-9, the prototype within 1e-6; "
        "`error` names the SDK's exception (spec §4, §6, §9).",
        minimum_samples=MIN_ENROLLMENT_SAMPLES,
        cases=cases,
        too_few={
            "bundle": "bundles/voice-embedding.uvb",
            "enrollment_outputs": short,
            "error": "EnrollmentError",
        },
        calibration_sha256=calibrations,
        far_checks=far_checks,
    )


# -- codewords ----------------------------------------------------------------------------------


class _FixedBits:
    """Stands in for :mod:`secrets` so a message's random bits are the vector's."""

    def __init__(self, value: int) -> None:
        self.value = value

    def randbits(self, count: int) -> int:
        return self.value & ((1 << count) - 1)


def codeword() -> dict[str, Any]:
    import uvsdk.codeword as module

    code = Bundle(HERE / "bundles/voice-codeword.uvb").manifest.code
    hamming = np.array(
        [
            [1, 0, 0, 0, 1, 1, 0],
            [0, 1, 0, 0, 1, 0, 1],
            [0, 0, 1, 0, 0, 1, 1],
            [0, 0, 0, 1, 1, 1, 1],
        ],
        np.uint8,
    )
    codes = {
        "bch-127-64": (code.generator, code.id_bits),
        "hamming-7-4": (hamming, 2),
    }
    cases = []
    rng = np.random.default_rng(3)
    for name, (generator, id_bits) in codes.items():
        k, n = generator.shape
        for user_id, random_value in [
            (0, 0),
            (1, 1),
            (2**id_bits - 1, (1 << (k - id_bits)) - 1),
            (5 % 2**id_bits, int(rng.integers(0, 2**31))),
            (123456 % 2**id_bits, int(rng.integers(0, 2**31))),
        ]:
            saved = module.secrets
            module.secrets = _FixedBits(random_value)  # type: ignore[assignment]
            try:
                message = new_message(user_id, id_bits, k)
            finally:
                module.secrets = saved
            word = encode(message, generator)
            cases.append(
                {
                    "code": name,
                    "user_id": user_id,
                    "random_bits": bits(message[id_bits:]),
                    "message": bits(message),
                    "codeword": bits(word),
                    "bipolar_first8": [float(x) for x in bipolar(word)[:8]],
                }
            )
    generators = {
        name: {
            "k": int(g.shape[0]),
            "n": int(g.shape[1]),
            "id_bits": id_bits,
            "generator": pack_generator(g),
            "fingerprint": code_fingerprint(g),
        }
        for name, (g, id_bits) in codes.items()
    }
    singular_real_full = np.array([[1, 1, 0], [0, 1, 1], [1, 0, 1]], np.uint8)
    refused = []
    for name, encoded, k, n in [
        ("rank-2-over-GF(2)", pack_generator(singular_real_full), 3, 3),
        ("repeated-row", pack_generator(np.array([[1, 0, 1, 1], [1, 0, 1, 1]], np.uint8)), 2, 4),
        ("too-few-bits", pack_generator(hamming)[:-4], 4, 7),
        ("not-base64", "****", 4, 7),
    ]:
        _, error = outcome(lambda e=encoded, kk=k, nn=n: unpack_generator(e, kk, nn))
        assert error is not None, name
        refused.append(
            {"name": name, "generator": encoded, "k": k, "n": n, "error": type(error).__name__}
        )
    out_of_range = [
        {"user_id": 2**32, "id_bits": 32},
        {"user_id": -1, "id_bits": 32},
        {"user_id": 4, "id_bits": 2},
    ]
    return document(
        "codeword",
        "m = id (id_bits bits, most significant first) || random bits; c = m G mod 2; "
        "v = 1 - 2c. Generators are numpy.packbits of the row-major k x n matrix (big-endian "
        "bit order), base64; the fingerprint is SHA-256 over 'kxn:' and those packed bytes. A "
        "generator must have rank k over GF(2) (spec §7).",
        codes=generators,
        cases=cases,
        refused_generators=refused,
        user_ids_out_of_range=out_of_range,
    )


# -- templates ------------------------------------------------------------------------------------

PASSPHRASE = "correct horse battery staple"


def _seal(
    payload: bytes,
    passphrase: str,
    salt: bytes,
    nonce: bytes,
    log2_n: int,
    secret: bytes | None = None,
) -> tuple[bytes, bytes]:
    """The file the SDK writes (TemplateStore.save's bytes), with the salt and nonce given."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    key = templates._scrypt(secret or templates.passphrase_bytes(passphrase), salt, log2_n, 8, 1)
    header = templates._Header(1, log2_n, 8, 1, salt, templates._key_check(key), nonce)
    aad = header.pack()
    return aad + AESGCM(key).encrypt(nonce, payload, aad), key


def _open(blob: bytes, passphrase: str, user: str, record: int | None = None) -> dict[str, Any]:
    """Open the bytes with the SDK's own TemplateStore.load; the payload, or the error kind."""
    with tempfile.TemporaryDirectory() as folder:
        store_dir = Path(folder) / "store"
        store_dir.mkdir(mode=0o700)
        (store_dir / f"{user}.uvt").write_bytes(blob)
        (store_dir / f"{user}.uvt").chmod(0o600)
        freshness = FileFreshness(Path(folder) / "state")
        if record is not None:
            freshness.set(blob[8:24], record)
        store = templates.TemplateStore(store_dir, passphrase=passphrase, freshness=freshness)
        loaded, error = outcome(lambda: store.load(user))
    if error is None:
        return {"ok": True, "generation": loaded.generation}
    return {"ok": False, "error": _template_error(error)}


_TEMPLATE_ERRORS = [
    ("not a uvsdk template", "not_a_template"),
    ("header was modified", "header_modified"),
    ("key parameters", "key_parameters"),
    ("unknown key derivation", "key_parameters"),
    ("wrong passphrase", "wrong_key"),
    ("was modified or is damaged", "modified"),
    ("content is malformed", "malformed"),
    ("belongs to another user", "wrong_user"),
    ("older than the last one written", "rollback"),
]


def _template_error(error: UvsdkError) -> str:
    for text, kind in _TEMPLATE_ERRORS:
        if text in str(error):
            return kind
    raise AssertionError(f"unexpected template error: {error}")


def _rehash(blob: bytearray) -> bytearray:
    """Recompute the header digest (as an attacker who edits the header would)."""
    blob[40:48] = hashlib.sha256(bytes(blob[:40])).digest()[:8]
    return blob


def template() -> dict[str, Any]:
    prototype_template = templates.Template(
        user="alice",
        created=1700000000.0,
        mode="prototype",
        prototype=np.linspace(-0.5, 0.5, 40, dtype=np.float32) / np.float32(1.8),
        threshold=0.7158535914832873,
        target_tpr=0.95,
        far=0.01,
        calibration="0" * 64,
        model_sha256="ab" * 32,
        enrolled=1700000100.5,
        samples=6,
        generation=3,
    )
    codeword_bits = np.array([int(b) for b in "10110011" * 15 + "1011001"], np.uint8)
    codeword_template = templates.Template(
        user="bob.smith-2",
        created=1700000000.25,
        codeword=codeword_bits,
        user_id=7,
        code_sha256="cd" * 32,
        mode="codeword",
        threshold=0.5,
        target_tpr=0.9,
        model_sha256="ef" * 32,
        enrolled=1700000200.0,
        samples=5,
        policy=backoff_rules.BackoffPolicy(
            attempts=3, base_seconds=10.0, factor=3.0, max_seconds=600.0
        ),
        backoff=backoff_rules.BackoffState(failures=2, locked_until=0.0),
        generation=9,
    )
    seal_cases = []
    files = {}
    for name, tmpl, passphrase, log2_n, secret in [
        ("prototype-alice", prototype_template, PASSPHRASE, 10, None),
        ("codeword-bob", codeword_template, "pässwörd ünïcode", 10, None),
        ("default-cost", prototype_template, PASSPHRASE, 15, None),
        (
            "nfkc-composed",
            prototype_template,
            "\u00c5ngstr\u00f6m \uff50\uff41\uff53\uff53",
            10,
            None,
        ),
    ]:
        salt = hashlib.sha256(f"salt {name}".encode()).digest()[:16]
        nonce = hashlib.sha256(f"nonce {name}".encode()).digest()[:12]
        payload = tmpl.to_payload()
        blob, key = _seal(payload, passphrase, salt, nonce, log2_n, secret)
        files[name] = (blob, passphrase, tmpl.user)
        seal_cases.append(
            {
                "name": name,
                "passphrase": passphrase,
                "salt_hex": salt.hex(),
                "nonce_hex": nonce.hex(),
                "log2_n": log2_n,
                "payload": payload.decode("utf-8"),
                "key_hex": key.hex(),
                "file_b64": b64(blob),
            }
        )
        assert _open(blob, passphrase, tmpl.user)["ok"], name
    fields = []
    for name, tmpl in (
        ("prototype-alice", prototype_template),
        ("codeword-bob", codeword_template),
    ):
        parsed = templates.Template.from_payload(tmpl.to_payload())
        fields.append(
            {
                "name": name,
                "user": parsed.user,
                "mode": parsed.mode,
                "codeword": None if parsed.codeword is None else bits(parsed.codeword),
                "prototype": None if parsed.prototype is None else f32(parsed.prototype),
                "threshold": parsed.threshold,
                "generation": parsed.generation,
                "policy": dataclasses.asdict(parsed.policy),
                "backoff": dataclasses.asdict(parsed.backoff),
            }
        )

    good, passphrase, user = files["prototype-alice"]
    nfkc, nfkc_pass, _ = files["nfkc-composed"]
    malformed, _ = _seal(b'{"version": 2, "generation": 1', PASSPHRASE, bytes(16), bytes(12), 10)
    wrong_version, _ = _seal(
        prototype_template.to_payload().replace(b'"version":2', b'"version":7'),
        PASSPHRASE,
        bytes(16),
        bytes(12),
        10,
    )

    def edit(position: int, value: int | None = None, rehash: bool = False) -> bytes:
        blob = bytearray(good)
        blob[position] = (blob[position] ^ 0x01) if value is None else value
        return bytes(_rehash(blob) if rehash else blob)

    opens = [
        ("valid", good, passphrase, user, None),
        ("nfkc-decomposed-passphrase", nfkc, "A\u030angstro\u0308m pass", user, None),
        ("nfkc-fullwidth-as-typed", nfkc, nfkc_pass, user, None),
        ("wrong-passphrase", good, passphrase + "!", user, None),
        ("too-short", good[:30], passphrase, user, None),
        ("header-only", good[:64], passphrase, user, None),
        ("bad-magic", b"UVT9" + good[4:], passphrase, user, None),
        ("salt-edited", edit(10), passphrase, user, None),
        ("salt-edited-digest-recomputed", edit(10, rehash=True), passphrase, user, None),
        ("check-edited-digest-recomputed", edit(30, rehash=True), passphrase, user, None),
        ("log2n-17-digest-recomputed", edit(5, 17, rehash=True), passphrase, user, None),
        ("log2n-9-digest-recomputed", edit(5, 9, rehash=True), passphrase, user, None),
        ("r-edited-digest-recomputed", edit(6, 9, rehash=True), passphrase, user, None),
        ("kdf-3-digest-recomputed", edit(4, 3, rehash=True), passphrase, user, None),
        ("nonce-edited", edit(50), passphrase, user, None),
        ("ciphertext-edited", edit(100), passphrase, user, None),
        ("tag-edited", edit(len(good) - 1), passphrase, user, None),
        ("truncated-tag", good[:-1], passphrase, user, None),
        ("malformed-payload", malformed, PASSPHRASE, "alice", None),
        ("unknown-payload-version", wrong_version, PASSPHRASE, "alice", None),
        ("another-user", good, passphrase, "mallory", None),
        ("rolled-back", good, passphrase, user, 4),
        ("record-equal", good, passphrase, user, 3),
    ]
    open_cases = []
    for name, blob, words, who, record in opens:
        result = _open(blob, words, who, record)
        open_cases.append(
            {
                "name": name,
                "file_b64": b64(blob),
                "passphrase": words,
                "user": who,
                "generation_record": record,
                **result,
            }
        )
    key_check = templates._key_check(bytes(range(32))).hex()
    return document(
        "template",
        "The UVT2 file: seal (passphrase, salt, nonce, scrypt cost, payload -> file bytes), "
        "the payload's fields, and opening (file, passphrase, the user it is opened as, the "
        "generation recorded outside the file -> ok, or the error kind) (spec §10).",
        key_check_example={"key_hex": bytes(range(32)).hex(), "check_hex": key_check},
        seal=seal_cases,
        fields=fields,
        open=open_cases,
    )


# -- back-off -----------------------------------------------------------------------------------


def backoff() -> dict[str, Any]:
    default = backoff_rules.BackoffPolicy()
    policies = {
        "default": default,
        "strict": backoff_rules.BackoffPolicy(
            attempts=1, base_seconds=1.0, factor=10.0, max_seconds=3600.0
        ),
        "flat": backoff_rules.BackoffPolicy(
            attempts=3, base_seconds=60.0, factor=1.0, max_seconds=600.0
        ),
        "none": backoff_rules.BackoffPolicy(attempts=2, base_seconds=0.0),
    }
    lockouts = []
    for name, policy in policies.items():
        for failures in (0, 1, 2, 3, 4, 5, 6, 7, 10, 17, 100, 2**31, 10**30):
            lockouts.append(
                {"policy": name, "failures": failures, "seconds": policy.lockout_seconds(failures)}
            )
    sequences = []
    for name, events in [
        ("default", "RRRRRRAR"),
        ("default", "RRRRR" + "R"),
        ("strict", "RRRR"),
        ("flat", "RRRRRA"),
        ("none", "RRRRR"),
    ]:
        policy, state, now, steps = policies[name], backoff_rules.BackoffState(), 1000.0, []
        for event in events:
            locked = now < state.locked_until
            steps.append(
                {"t": now, "result": "accept" if event == "A" else "reject", "locked": locked}
            )
            if not locked:
                state = backoff_rules.record(state, policy, event == "A", now)
            steps[-1].update(failures=state.failures, locked_until=state.locked_until)
            now += 7.0 if not locked else 0.0
            if locked:  # wait it out, then try again
                now = state.locked_until
                locked = False
                steps.append(
                    {"t": now, "result": "accept" if event == "A" else "reject", "locked": False}
                )
                state = backoff_rules.record(state, policy, event == "A", now)
                steps[-1].update(failures=state.failures, locked_until=state.locked_until)
                now += 7.0
        sequences.append({"policy": name, "steps": steps})
    invalid = [
        {"attempts": 0},
        {"attempts": 1001},
        {"base_seconds": -1.0},
        {"factor": 0.5},
        {"factor": 1001.0},
        {"max_seconds": 10 * 365 * 86400 + 1.0},
        {"max_seconds": -1.0},
    ]
    for fields in invalid:
        with contextlib.suppress(ValueError):
            backoff_rules.BackoffPolicy(**fields)
            raise AssertionError(f"{fields} was accepted")
    return document(
        "backoff",
        "Lock-out seconds after n consecutive rejections (base x factor^(n - attempts), capped, "
        "0 below attempts), and attempt sequences: at time t an attempt is refused while "
        "t < locked_until (locked: true, nothing recorded), else recorded; the state after each "
        "step (spec §8).",
        policies={k: dataclasses.asdict(v) for k, v in policies.items()},
        lockouts=lockouts,
        sequences=sequences,
        invalid_policies=invalid,
    )


# -- bundles ------------------------------------------------------------------------------------


def bundle() -> dict[str, Any]:
    source = HERE / "bundles/voice-codeword.uvb"
    with zipfile.ZipFile(source) as archive:
        base = json.loads(archive.read("manifest.json"))
    model_sha = base["model_sha256"]

    def patched(path: str, value: Any) -> dict[str, Any]:
        data = json.loads(json.dumps(base))
        *parents, last = path.split(".")
        target = data
        for key in parents:
            target = target[int(key)] if key.isdigit() else target[key]
        if value is _DELETE:
            del target[last]
        elif last.isdigit():
            target[int(last)] = value
        else:
            target[last] = value
        return data

    rows = "calibration.prototype.rows"
    changes = [
        ("valid", None, None),
        ("format", "format", "uvsdk-bundle/2"),
        ("method", "method", "magic"),
        ("modality", "modality", "smell"),
        ("sample-rate-low", "input.sample_rate", 999),
        ("sample-rate-float", "input.sample_rate", 16000.5),
        ("window-long", "input.window_seconds", 31.0),
        ("hop-above-window", "input.hop_seconds", 2.5),
        ("hop-tiny", "input.hop_seconds", 0.04),
        ("min-above-window", "input.min_seconds", 2.5),
        ("min-zero", "input.min_seconds", 0),
        ("kind", "output.kind", "vector"),
        ("dim-zero", "output.dim", 0),
        ("dim-not-n", "output.dim", 128),
        ("sha-upper", "model_sha256", model_sha.upper()),
        ("sha-other", "model_sha256", "0" * 64),
        ("code-missing", "code", _DELETE),
        ("id-bits-k", "code.id_bits", 64),
        ("generator-short", "code.generator", base["code"]["generator"][:-8]),
        ("calibration-version", "calibration.version", 2),
        ("calibration-unknown-key", "calibration.extra", 1),
        ("far-not-falling", f"{rows}.1.far", 0.5),
        ("far-too-large", f"{rows}.0.far", 0.6),
        ("threshold-falling", f"{rows}.1.threshold", -1.0),
        ("count-negative", "calibration.prototype.people", -1),
        ("codeword-table-in-embedding", "output.kind", "embedding"),
        ("extra-keys-kept", "licence", "CC0"),
        ("description", "description", "a line"),
    ]
    manifests = []
    for name, path, value in changes:
        data = base if path is None else patched(path, value)
        change: dict[str, Any] = (
            {}
            if path is None
            else ({"delete": [path]} if value is _DELETE else {"set": {path: value}})
        )
        if name == "codeword-table-in-embedding":
            del data["code"]
            change["delete"] = ["code"]
        _, error = outcome(lambda d=data: Manifest.from_dict(d))
        if error is None and data["model_sha256"] != model_sha:
            error = UvsdkError("model.onnx does not match the manifest's model_sha256")
        manifests.append(
            {
                "name": name,
                **change,
                "valid": error is None,
                **({"error": str(error)} if error is not None else {}),
            }
        )

    image = (HERE / "bundles/image-embedding.uvb").read_bytes()
    with zipfile.ZipFile(HERE / "bundles/image-embedding.uvb") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}

    def rezip(**changed: bytes | None) -> bytes:
        import io

        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for name, blob in {**members, **changed}.items():
                if blob is not None:
                    archive.writestr(zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0)), blob)
        return buffer.getvalue()

    public = (HERE / "keys/conformance.pub.hex").read_text().strip()
    other = hashlib.sha256(b"not the conformance key").digest()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    other_public = (
        Ed25519PrivateKey.from_private_bytes(other)
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        .hex()
    )
    manifest_bytes = members["manifest.json"]
    archives = [
        ("signed", rezip(), [public]),
        ("signed-no-trusted-keys", rezip(), []),
        ("signed-other-key", rezip(), [other_public]),
        ("signed-two-keys", rezip(), [other_public, public]),
        ("unsigned-trusted-keys", rezip(**{"signature.ed25519": None}), [public]),
        ("unsigned-no-keys", rezip(**{"signature.ed25519": None}), []),
        ("manifest-whitespace-edited", rezip(**{"manifest.json": manifest_bytes + b" "}), [public]),
        (
            "manifest-whitespace-edited-no-keys",
            rezip(**{"manifest.json": manifest_bytes + b" "}),
            [],
        ),
        ("model-edited", rezip(**{"model.onnx": members["model.onnx"] + b"\0"}), []),
        ("no-manifest", rezip(**{"manifest.json": None}), []),
        ("no-model", rezip(**{"model.onnx": None}), []),
        ("manifest-not-json", rezip(**{"manifest.json": b"{nope"}), []),
        ("truncated", image[: len(image) // 2], []),
        ("not-a-zip", b"hello, world" * 10, []),
    ]
    archive_cases = []
    with tempfile.TemporaryDirectory() as folder:
        for name, blob, keys in archives:
            path = Path(folder) / f"{name}.uvb"
            path.write_bytes(blob)
            pems = [_pem(k) for k in keys]
            loaded, error = outcome(lambda p=path, t=pems: Bundle(p, trusted_keys=t or None))
            archive_cases.append(
                {
                    "name": name,
                    "file_b64": b64(blob),
                    "trusted_keys_hex": keys,
                    "valid": error is None,
                    **(
                        {"error": type(error).__name__}
                        if error is not None
                        else {"signed_by": loaded.signed_by}
                    ),
                }
            )
    return document(
        "bundle",
        "Manifests to accept or refuse: base_manifest (the voice-codeword bundle's) with `set` "
        "(dotted paths, numbers index arrays) and `delete` applied; model_sha256 must match "
        "the bundle's model; `error` is the SDK's message, which names the key (a port's "
        "wording may differ). Then whole archives, with the trusted Ed25519 public keys (raw, hex) they are "
        "opened with: valid or the SDK's exception, and the signing key's fingerprint "
        "(first 16 hex digits of SHA-256 of the raw key) (spec §3).",
        base_manifest=base,
        manifests=manifests,
        archives=archive_cases,
    )


_DELETE = object()


def _pem(raw_hex: str) -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(raw_hex))
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


# -- the driver -----------------------------------------------------------------------------------

GENERATORS: dict[str, Callable[[], dict[str, Any]]] = {
    "media": media,
    "model": model,
    "enroll": enroll,
    "codeword": codeword,
    "template": template,
    "backoff": backoff,
    "bundle": bundle,
}


def render(document_: dict[str, Any]) -> str:
    return json.dumps(document_, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def differences(old: Any, new: Any, path: str = "", model: bool = False) -> list[str]:
    """Where two vector documents differ (model outputs within 1e-6, the rest exactly)."""
    if isinstance(old, dict) and isinstance(new, dict):
        if old.keys() != new.keys():
            return [f"{path}: keys {sorted(old.keys() ^ new.keys())}"]
        return [d for k in old for d in differences(old[k], new[k], f"{path}.{k}", model)]
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{path}: {len(old)} items, now {len(new)}"]
        return [
            d
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            for d in differences(a, b, f"{path}[{i}]", model)
        ]
    if model and isinstance(old, float) and isinstance(new, float):
        return (
            []
            if math.isclose(old, new, rel_tol=1e-6, abs_tol=1e-6)
            else [f"{path}: {old} -> {new}"]
        )
    return [] if old == new and type(old) is type(new) else [f"{path}: {old!r:.60} -> {new!r:.60}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--only", choices=sorted(GENERATORS), action="append")
    args = parser.parse_args(argv)
    changed = []
    for name in args.only or GENERATORS:
        text = render(GENERATORS[name]())
        path = VECTORS / f"{name}.json"
        if args.check:
            old = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
            found = (
                ["missing"]
                if old is None
                else differences(old, json.loads(text), name, model=name in ("model", "enroll"))
            )
            if found:
                changed.append(f"{path.name}: " + "; ".join(found[:5]))
        else:
            VECTORS.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"{path.relative_to(ROOT)}: {len(text)} bytes")
    for line in changed:
        print(line, file=sys.stderr)
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
