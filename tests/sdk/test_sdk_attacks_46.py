"""The fourth attack tour of the SDK (issue 46): each test performs one attack that used to succeed.

Numbers in the test names are the rows of the tour. Every bad input must end in one clear line
and exit code 2 with nothing lost; secrets must never show; the back-off must always count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from uvsdk import Verifier
from uvsdk.bundle import Bundle
from uvsdk.errors import (
    BundleError,
    ModelMismatchError,
    UvsdkError,
)
from uvsdk.template import TemplateStore

from ..conftest import PASSPHRASE
from ..processes import finish, start
from .test_sdk_attacks import one_line_error, uvsdk

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"


def _rezipped(source: Path, target: Path, change_manifest=None, *, drop=()) -> Path:
    """``source`` (a zip bundle) written again as ``target``, its manifest passed through
    ``change_manifest`` (no signature: no trusted keys, the default)."""
    with zipfile.ZipFile(source) as archive, zipfile.ZipFile(target, "w") as out:
        for info in archive.infolist():
            if info.filename in drop:
                continue
            data = archive.read(info)
            if info.filename == "manifest.json" and change_manifest is not None:
                manifest = json.loads(data)
                change_manifest(manifest)
                data = json.dumps(manifest).encode()
            out.writestr(info.filename, data, zipfile.ZIP_DEFLATED)
    return target


def _plant_threshold(manifest: dict) -> None:
    for row in manifest["calibration"]["prototype"]["rows"]:
        row["threshold"] = -1.0


def _conformance_alice(bundle: Path, store: Path) -> Verifier:
    verifier = Verifier(bundle, store=TemplateStore(store, passphrase=PASSPHRASE, scrypt_log2_n=10))
    verifier.enroll([CONFORMANCE / "audio" / f"speaker0-{j}.wav" for j in range(5)], user="alice")
    return verifier


def test_46_a_manifest_cannot_plant_a_threshold_below_the_floor(tmp_path: Path) -> None:
    honest = CONFORMANCE / "bundles" / "voice-embedding.uvb"
    planted = _rezipped(honest, tmp_path / "planted.uvb", _plant_threshold)
    verifier = _conformance_alice(planted, tmp_path / "store")
    impostor = CONFORMANCE / "audio" / "speaker1-6.wav"
    decision = verifier.verify(impostor, user="alice", backoff=False)
    assert decision.score < 0 and not decision.accepted  # -0.478 was accepted at -1
    from uvsdk.calibration import THRESHOLD_FLOOR

    assert verifier.store.load("alice").threshold == THRESHOLD_FLOOR


def test_46_a_threshold_does_not_outlive_the_calibration_it_came_from(tmp_path: Path) -> None:
    honest = CONFORMANCE / "bundles" / "voice-embedding.uvb"
    planted = _rezipped(honest, tmp_path / "planted.uvb", _plant_threshold)
    store = tmp_path / "store"
    _conformance_alice(planted, store)
    impostor = CONFORMANCE / "audio" / "speaker1-6.wav"
    back = Verifier(honest, store=TemplateStore(store, passphrase=PASSPHRASE))
    with pytest.raises(ModelMismatchError, match="another calibration.*uvsdk enroll"):
        back.verify(impostor, user="alice")
    with pytest.raises(ModelMismatchError, match="another calibration"):
        back.verify(impostor, user="alice", backoff=False)
    uncalibrated = _rezipped(honest, tmp_path / "none.uvb", lambda m: m.pop("calibration"))
    with pytest.raises(ModelMismatchError, match="another calibration"):
        Verifier(uncalibrated, store=TemplateStore(store, passphrase=PASSPHRASE)).verify(
            impostor, user="alice"
        )
    result = uvsdk("verify", impostor, "--user", "alice", "--bundle", honest, "--store", store)
    one_line_error(result, "re-enroll with uvsdk enroll")
    assert "ACCEPT" not in result.stdout
    # enrolled again under the honest bundle, the user verifies as before
    _conformance_alice(honest, store)
    assert not back.verify(impostor, user="alice").accepted


def test_46_a_template_without_a_calibrated_threshold_is_not_bound_to_one(tmp_path: Path) -> None:
    """The warm-up rule alone (``far=None``) owes nothing to the manifest's table."""
    honest = CONFORMANCE / "bundles" / "voice-embedding.uvb"
    store = TemplateStore(tmp_path / "store", passphrase=PASSPHRASE, scrypt_log2_n=10)
    Verifier(honest, store=store, far=None).enroll(
        [CONFORMANCE / "audio" / f"speaker0-{j}.wav" for j in range(5)], user="alice"
    )
    other = _rezipped(honest, tmp_path / "other.uvb", _plant_threshold)
    clip = CONFORMANCE / "audio" / "speaker0-6.wav"
    assert Verifier(other, store=store).verify(clip, user="alice", backoff=False).accepted


def _repeat_directory_entry(blob: bytes, name: str, copies: int) -> bytes:
    """``blob`` (a zip archive without a comment) with the directory entry of ``name`` repeated
    ``copies`` more times, each pointing at the same member data: 46 bytes and a name apiece."""
    import struct

    end = blob[-22:]
    signature, disk, start_disk, count, total, size, offset, comment = struct.unpack(
        "<4s4H2LH", end
    )
    assert signature == b"PK\x05\x06" and comment == 0
    directory = blob[offset : offset + size]
    at, repeated = 0, b""
    while at < len(directory):
        lengths = struct.unpack("<3H", directory[at + 28 : at + 34])
        entry = directory[at : at + 46 + sum(lengths)]
        if entry[46 : 46 + lengths[0]] == name.encode():
            repeated = entry * copies
        at += len(entry)
    assert repeated
    count, total = count + copies, total + copies
    end = struct.pack("<4s4H2LH", signature, disk, start_disk, count, total,
                      size + len(repeated), offset, 0)  # fmt: skip
    return blob[:offset] + directory + repeated + end


def test_46_duplicate_directory_entries_are_refused_before_any_member_is_read(
    tmp_path: Path, monkeypatch
) -> None:
    import uvsdk.archive as archive

    honest = (CONFORMANCE / "bundles" / "voice-embedding.uvb").read_bytes()
    inflated: list[str] = []
    inflate = archive._inflate_bounded
    monkeypatch.setattr(
        archive,
        "_inflate_bounded",
        lambda handle, info, bundle: (
            inflated.append(info.filename) or inflate(handle, info, bundle)
        ),
    )
    for name in ("model.onnx", "manifest.json"):
        bundle = tmp_path / f"{name}-8.uvb"
        bundle.write_bytes(_repeat_directory_entry(honest, name, 7))
        with pytest.raises(BundleError, match=f"names {name} more than once") as caught:
            Bundle(bundle)
        assert caught.value.code == "bundle.unreadable" and inflated == []
        result = uvsdk("info", "--bundle", bundle)
        one_line_error(result, "more than once")
    (tmp_path / "honest.uvb").write_bytes(honest)
    Bundle(tmp_path / "honest.uvb")
    assert "model.onnx" in inflated and len(set(inflated)) == len(inflated)  # each read once


def test_46_a_compressed_size_past_the_end_of_the_archive_is_refused(tmp_path: Path) -> None:
    import struct

    blob = bytearray((CONFORMANCE / "bundles" / "voice-embedding.uvb").read_bytes())
    offset = struct.unpack("<L", blob[-6:-2])[0]
    assert blob[offset : offset + 4] == b"PK\x01\x02"
    blob[offset + 20 : offset + 24] = struct.pack("<L", len(blob) * 2)  # the first entry's
    bundle = tmp_path / "long.uvb"
    bundle.write_bytes(bytes(blob))
    with pytest.raises(BundleError, match="more than the archive holds after it") as caught:
        Bundle(bundle)
    assert caught.value.code == "bundle.unreadable"


@pytest.mark.parametrize(
    ("privacy", "enrollment", "match"),
    [
        ({"epsilon": 8}, "codeword", "'codeword' contradicts training.privacy"),
        ({"epsilon": 1e-300, "membership_eer_floor": 0}, "prototype", "contradict each other"),
        ({"epsilon": 8, "membership_eer_floor": 0}, "prototype", "contradict each other"),
    ],
)
def test_46_contradictory_training_claims_are_refused(
    tmp_path: Path, privacy: dict, enrollment: str, match: str
) -> None:
    claimed = {"mechanism": "distributed", "delta": 1e-6, "simulated_deployment": False,
               "membership_eer_floor": 0.39, **privacy}  # fmt: skip

    def claim(manifest: dict) -> None:
        manifest["training"] = {"method": "feduv", "privacy": claimed, "enrollment": enrollment}

    bundle = _rezipped(CONFORMANCE / "bundles" / "voice-codeword.uvb", tmp_path / "t.uvb", claim)
    with pytest.raises(BundleError, match=match) as caught:
        Bundle(bundle)
    assert caught.value.code == "bundle.manifest"
    one_line_error(uvsdk("info", "--bundle", bundle), match)


def test_46_the_floor_bound_holds_for_every_guarantee_the_trainer_states() -> None:
    """``membership_floor_bound`` against the trainer's own figures: a consistent bundle is never
    refused (the grid issue 46 measured: noise 0.3-5, sampling 0.01-1, 1-200 rounds)."""
    from uvsdk.training import FLOOR_TOLERANCE, membership_floor_bound

    uvtrain_privacy = pytest.importorskip("uvtrain.accounting")
    for noise, rate, rounds, delta in [(0.3, 0.01, 200, 1e-6), (1.0, 1.0, 200, 1e-3),
                                       (5.0, 0.1, 10, 1e-6), (0.7, 0.5, 1, 1e-3)]:  # fmt: skip
        epsilon = uvtrain_privacy.epsilon_release(noise, rate, rounds, delta)
        floor = uvtrain_privacy.membership_eer_floor(noise, rate, rounds)
        assert floor >= membership_floor_bound(epsilon, delta) - FLOOR_TOLERANCE


def test_46_an_invalid_user_name_is_store_user_name(alice) -> None:
    verifier, store, _, impostor = alice
    for name in ("al/ice", "", "alice\n", "-x"):
        with pytest.raises(UvsdkError, match="invalid user name") as caught:
            verifier.verify(impostor, user=name)
        assert caught.value.code == "store.user-name"
    assert sorted(p.name for p in store.iterdir()) == ["alice.uvt"]  # "alice\n.uvt" never made


def _wav_header(rate: int, frames: int, *, bits: int = 16, align: int = 2, byte_rate=None) -> bytes:
    import struct

    data = bytes(2 * frames)
    fmt = struct.pack("<HHIIHH", 1, 1, rate, byte_rate or rate * 2, align, bits)
    body = b"WAVEfmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", len(data))
    return b"RIFF" + struct.pack("<I", len(body) + len(data)) + body + data


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ({"bits": 12}, "undecodable"),  # libsndfile read it as 16-bit; the port refused it
        ({"align": 0}, "undecodable"),  # libsndfile guessed the block align
        ({"rate": 1, "frames": 61, "byte_rate": 32000}, "too_long"),  # was called truncated
    ],
)
def test_46_wav_headers_are_read_as_the_spec_says(
    tmp_path: Path, header: dict, reason: str
) -> None:
    from uvsdk.errors import MediaError
    from uvsdk.media import load_audio

    settings = {"rate": 8000, "frames": 800, **header}
    path = tmp_path / "odd.wav"
    path.write_bytes(_wav_header(**settings))
    with pytest.raises(MediaError) as caught:
        load_audio(path, settings["rate"])
    assert caught.value.reason == reason


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_46_a_fifo_given_as_the_bundle_is_refused_at_once(alice, tmp_path: Path) -> None:
    _, store, _, impostor = alice
    fifo = tmp_path / "bundle.uvb"
    os.mkfifo(fifo, 0o600)
    folder = tmp_path / "folder-bundle"
    folder.mkdir()
    os.mkfifo(folder / "manifest.json", 0o600)
    environment = {**os.environ, "UVSDK_PASSPHRASE": PASSPHRASE}
    for bundle in (fifo, folder):
        for command in (["info"], ["verify", impostor, "--user", "alice", "--store", store]):
            full = [sys.executable, "-m", "uvsdk.cli", *command, "--bundle", bundle]
            result = finish(start(full, env=environment), stall_seconds=60, cpu_is_progress=False)
            assert result.returncode == 2, (result.stdout, result.stderr)
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and "is not a regular file" in lines[0], lines
    assert sorted(p.name for p in store.iterdir()) == ["alice.uvt"]  # no lock left held


@pytest.mark.parametrize(
    "command",
    [["info", "--bundle", str(CONFORMANCE / "bundles" / "voice-embedding.uvb")], ["--help"],
     ["verify", "--help"], ["codeword", "new", "--help"]],
)  # fmt: skip
def test_46_output_to_a_reader_that_went_away_ends_quietly(command: list[str]) -> None:
    """``uvsdk info | head -1``: the reader is gone before the first line is written (its end
    of the pipe closed here at once, so the test does not depend on timing)."""
    from uvsdk.commandline import BROKEN_PIPE_EXIT

    reader, writer = os.pipe()
    os.close(reader)
    full = [sys.executable, "-m", "uvsdk.cli", *command]
    try:
        process = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=writer,
                                   stderr=subprocess.PIPE, text=True)  # fmt: skip
    finally:
        os.close(writer)
    _, stderr = process.communicate(timeout=600)  # a guard against a hang, not a measurement
    result = subprocess.CompletedProcess(full, process.returncode, "", stderr)
    assert result.returncode == BROKEN_PIPE_EXIT, result.stderr
    assert result.stderr == ""
