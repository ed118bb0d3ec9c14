"""The red-team tour of the SDK (issue 16): each test performs one attack that used to succeed.

Numbers in the test names are the rows of the tour. Every bad input must end in one clear line
and exit code 2 with nothing lost; secrets must never show; the back-off must always count.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import unicodedata
import zipfile
from pathlib import Path

import pytest
import soundfile as sf
from typer.testing import CliRunner

import uvsdk.template as template_module
from uvsdk import Verifier
from uvsdk.backoff import BackoffPolicy, BackoffState, record
from uvsdk.bundle import Bundle
from uvsdk.cli import app
from uvsdk.errors import (
    AttemptNotRecordedError,
    BundleError,
    KeyUnavailableError,
    LockedOutError,
    NotEnrolledError,
    RollbackError,
    StorePermissionError,
    TemplateError,
    WrongKeyError,
)
from uvsdk.template import TemplateStore, parse_file

from ..conftest import PASSPHRASE, enrolled_clip, enrollment_dir
from ..processes import finish, run_until_stalled, start

runner = CliRunner()


def uvsdk(*args: str | Path, env: dict | None = None):
    return runner.invoke(
        app, [str(a) for a in args], env={"UVSDK_PASSPHRASE": PASSPHRASE, **(env or {})}
    )


def one_line_error(result, match: str) -> str:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("uvsdk: error: "), result.stderr
    assert match.lower() in lines[0].lower(), lines[0]
    assert "Traceback" not in result.stdout + result.stderr and "╭" not in result.stderr
    return lines[0]


def fail_until_locked(verifier: Verifier, impostor: Path, user: str = "alice") -> None:
    for _ in range(5):
        assert not verifier.verify(impostor, user=user).accepted
    with pytest.raises(LockedOutError):
        verifier.verify(impostor, user=user)


# -- 1. rolling back a template resets the back-off ---------------------------------------------


def test_01_a_template_put_back_is_refused(alice) -> None:
    verifier, store, _, impostor = alice
    saved = (store / "alice.uvt").read_bytes()
    fail_until_locked(verifier, impostor)
    (store / "alice.uvt").write_bytes(saved)  # the attack: the pre-failure copy put back
    fresh = Verifier(verifier.bundle, store=store, passphrase=PASSPHRASE, clock=verifier.clock)
    with pytest.raises(RollbackError, match="rolled back or restored"):
        fresh.verify(impostor, user="alice")
    assert (store / "alice.uvt").read_bytes() == saved  # left as it was
    result = uvsdk(
        "verify", impostor, "--user", "alice", "--bundle", verifier.bundle.path, "--store", store
    )
    one_line_error(result, "rolled back")
    assert "REJECT" not in result.stdout and "ACCEPT" not in result.stdout


def test_01_thirty_attempts_with_a_restore_every_four_are_not_all_scored(alice) -> None:
    verifier, store, clock, impostor = alice
    saved = (store / "alice.uvt").read_bytes()
    scored = refused = 0
    for attempt in range(30):
        if attempt % 4 == 0:
            (store / "alice.uvt").write_bytes(saved)
        clock.now += 1
        try:
            verifier.verify(impostor, user="alice")
            scored += 1
        except (RollbackError, LockedOutError):
            refused += 1
    assert scored <= 5 and refused >= 25, (scored, refused)


def test_01_keyring_mode_is_rollback_proof(
    alice, memory_keyring, spectral_bundle, voice_dir, tmp_path
) -> None:
    _, _, clock, impostor = alice
    store = tmp_path / "keyring-store"
    verifier = Verifier(spectral_bundle, store=store, use_keyring=True, clock=clock)
    verifier.enroll(tmp_path / "enroll0", user="alice")  # made by the alice fixture
    state = Path(os.environ["UVSDK_STATE_DIR"])
    saved = (store / "alice.uvt").read_bytes()
    state_before = {p: p.read_bytes() for p in state.rglob("*") if p.is_file()}
    fail_until_locked(verifier, impostor)
    # The attacker restores every file: the template and the whole state folder.
    (store / "alice.uvt").write_bytes(saved)
    for path in [p for p in state.rglob("*") if p.is_file()]:
        if path not in state_before:
            path.unlink()
    for path, data in state_before.items():
        path.write_bytes(data)
    with pytest.raises(RollbackError):
        Verifier(spectral_bundle, store=store, use_keyring=True, clock=clock).verify(
            impostor, user="alice"
        )
    assert sum(key.startswith("template-key-") for _, key in memory_keyring.entries) == 1


def test_01_passphrase_keys_with_keyring_records_from_the_command(alice, memory_keyring) -> None:
    verifier, store, _, impostor = alice
    other = store.parent / "kr"
    env = {"UVSDK_FRESHNESS": "keyring"}
    args = ["--bundle", verifier.bundle.path, "--store", other]
    samples = store.parent / "enroll0"
    assert uvsdk("enroll", "--samples", samples, *args, env=env).exit_code == 0
    saved = (other / "default.uvt").read_bytes()
    assert parse_file(saved)[0].kdf == template_module.KDF_SCRYPT
    assert any(k.startswith("template-generation-") for _, k in memory_keyring.entries)
    assert uvsdk("verify", impostor, *args, env=env).exit_code == 1
    (other / "default.uvt").write_bytes(saved)
    one_line_error(uvsdk("verify", impostor, *args, env=env), "rolled back")
    one_line_error(uvsdk("verify", impostor, *args, env={"UVSDK_FRESHNESS": "cloud"}), "freshness")


def test_01_file_only_store_cannot_stop_a_rollback_of_both_folders(alice) -> None:
    """What docs/sdk.md states: without a keyring, whoever can rewrite both the store and the
    state folder (the same OS user, root) can roll back; this test keeps that statement true."""
    verifier, store, _, impostor = alice
    state = Path(os.environ["UVSDK_STATE_DIR"]) / "freshness"
    header, _ = parse_file((store / "alice.uvt").read_bytes())
    record_file = state / f"{header.salt.hex()}.gen"
    saved, saved_record = (store / "alice.uvt").read_bytes(), record_file.read_bytes()
    fail_until_locked(verifier, impostor)
    (store / "alice.uvt").write_bytes(saved)
    record_file.write_bytes(saved_record)
    fresh = Verifier(verifier.bundle, store=store, passphrase=PASSPHRASE, clock=verifier.clock)
    assert not fresh.verify(impostor, user="alice").accepted  # scored again: the stated limit


# -- 2. the lock never engaged when the attempt could not be saved ------------------------------


def test_02_an_attempt_that_cannot_be_recorded_is_not_scored(alice, monkeypatch) -> None:
    verifier, store, _, impostor = alice
    before = (store / "alice.uvt").read_bytes()
    scored = []
    real_score = Verifier._score
    monkeypatch.setattr(
        Verifier, "_score", lambda self, *a: scored.append(1) or real_score(self, *a)
    )

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(template_module.os, "replace", disk_full)
    for _ in range(8):
        with pytest.raises(AttemptNotRecordedError, match="cannot be recorded.*No space left"):
            verifier.verify(impostor, user="alice")
    assert scored == [] and (store / "alice.uvt").read_bytes() == before
    assert [p.name for p in store.iterdir()] == ["alice.uvt"]  # no temporary left behind
    result = uvsdk(
        "verify", impostor, "--user", "alice", "--bundle", verifier.bundle.path, "--store", store
    )
    one_line_error(result, "verification refused")
    assert "score=" not in result.stdout
    # --no-backoff (the owner evaluating files) neither needs nor writes the counter
    assert not verifier.verify(impostor, user="alice", backoff=False).accepted


def test_02_the_failure_is_on_disk_before_the_score_is_computed(alice, monkeypatch) -> None:
    verifier, store, _, impostor = alice
    seen = []

    def score(self, template, vector):
        on_disk = TemplateStore(store, passphrase=PASSPHRASE).load("alice")
        seen.append(on_disk.backoff.failures)
        return -1.0

    monkeypatch.setattr(Verifier, "_score", score)
    verifier.verify(impostor, user="alice")
    verifier.verify(impostor, user="alice")
    assert seen == [1, 2]


# -- 3. scrypt parameters from the header were trusted ------------------------------------------


def _rewrite_header(path: Path, log2_n: int, r: int, p: int, *, fix_digest: bool) -> None:
    blob = bytearray(path.read_bytes())
    blob[5:8] = bytes([log2_n, r, p])
    if fix_digest:
        blob[40:48] = hashlib.sha256(bytes(blob[:40])).digest()[:8]
    path.write_bytes(bytes(blob))


@pytest.mark.parametrize(("log2_n", "r", "p"), [(22, 8, 16), (22, 32, 16), (17, 8, 1), (15, 8, 2)])
def test_03_scrypt_parameters_out_of_the_written_set_are_refused_before_deriving(
    alice, monkeypatch, log2_n: int, r: int, p: int
) -> None:
    verifier, store, _, impostor = alice
    path = store / "alice.uvt"
    _rewrite_header(path, log2_n, r, p, fix_digest=True)
    monkeypatch.setattr(template_module, "_scrypt", lambda *a: pytest.fail("derived a key"))
    with pytest.raises(TemplateError, match="not ones this SDK writes"):
        TemplateStore(store, passphrase=PASSPHRASE).load("alice")
    with pytest.raises(Exception, match="must be in"):
        TemplateStore(store, scrypt_log2_n=22)


# -- 4. parallel codeword new into a store folder that does not exist yet -----------------------


def test_04_parallel_codeword_new_into_a_new_store(
    initial_codeword_bundle: Path, tmp_path: Path
) -> None:
    store = tmp_path / "NEWDIR"
    env = {**os.environ, "UVSDK_PASSPHRASE": PASSPHRASE}
    command = [sys.executable, "-m", "uvsdk.cli", "codeword", "new", "--user", "carol",
               "--store", str(store), "--bundle", str(initial_codeword_bundle)]  # fmt: skip
    processes = [start(command, env=env) for _ in range(4)]  # all four at once
    finished = [finish(process, stall_seconds=300) for process in processes]
    results = [(result.returncode, result.stdout, result.stderr) for result in finished]
    made = [out for code, out, _ in results if code == 0]
    refused = [err for code, _, err in results if code == 2]
    assert len(made) == 1 and len(refused) == 3, results
    assert all("already has a codeword" in err for err in refused)
    printed_id = int(made[0].split("user id ")[1].split(";")[0])
    assert TemplateStore(store, passphrase=PASSPHRASE).load("carol").user_id == printed_id


# -- 5. manifest values and member sizes were unbounded -----------------------------------------


def _bundle_folder(source: Path, folder: Path, **input_changes: float) -> Path:
    folder.mkdir()
    with zipfile.ZipFile(source) as archive:
        archive.extractall(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["input"].update(input_changes)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


#: memory (bytes, as tracemalloc counts Python's and numpy's) that refusing a bundle may take
#: beyond what loading a sound one takes
REFUSAL_MEMORY = 16 * 1024**2


#: tracemalloc counts every thread's allocations, and a pytest worker's state is not this load's
#: (the same exposure failed a CI run of tests/trainer/test_stream.py once): each load is traced
#: in a fresh interpreter, its peak and any BundleError coming back as JSON
_TRACED_LOAD = """
import gc, json, sys, threading, tracemalloc
from uvsdk.bundle import Bundle
from uvsdk.errors import BundleError
assert threading.active_count() == 1, threading.enumerate()
gc.collect()
tracemalloc.start()
try:
    Bundle(sys.argv[1])
    error = None
except BundleError as refused:
    error = str(refused)
peak = tracemalloc.get_traced_memory()[1]
print(json.dumps({"peak": peak, "error": error}))
"""


def _traced_load(folder: Path) -> tuple[int, str | None]:
    """The peak memory allocated while loading the bundle ``folder`` (tracemalloc, in a fresh
    interpreter: a load-free measure of "refused before reading or allocating"; a time limit would
    fail on a busy machine), and the BundleError it raised (``None``: it loaded)."""

    loaded = subprocess.run(
        [sys.executable, "-c", _TRACED_LOAD, str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    result = json.loads(loaded.stdout.splitlines()[-1])
    return result["peak"], result["error"]


def _sound_bundle_memory(spectral_bundle: Path, folder: Path) -> int:
    """The peak memory of loading the unchanged bundle from a folder."""
    peak, error = _traced_load(_bundle_folder(spectral_bundle, folder))
    assert error is None, error
    return peak


def test_05_a_folder_bundle_is_read_into_buffers_of_its_size_not_of_its_limits(
    spectral_bundle: Path, tmp_path: Path
) -> None:
    """Each member of a bundle folder is read into a buffer of the size it has: reading into
    one of its limit (512 MiB for the model) reserved that much for every load."""
    folder = _bundle_folder(spectral_bundle, tmp_path / "sound")
    size = sum(path.stat().st_size for path in folder.iterdir())
    peak, error = _traced_load(folder)
    assert error is None, error
    assert peak < 4 * size + REFUSAL_MEMORY, (peak, size)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"window_seconds": 1e5}, "window_seconds"),
        ({"hop_seconds": 1e-4}, "hop_seconds"),
        ({"hop_seconds": 1e-9}, "hop_seconds"),
        ({"hop_seconds": 3.0}, "hop_seconds"),
        ({"window_seconds": 30.0, "sample_rate": 48000}, "more than 1048576 samples"),
    ],
)
def test_05_implausible_window_settings(
    spectral_bundle: Path, tmp_path: Path, change, match
) -> None:
    folder = _bundle_folder(spectral_bundle, tmp_path / "b", **change)
    with pytest.raises(BundleError, match=match):
        Bundle(folder)
    peak, error = _traced_load(folder)
    assert error is not None and re.search(match, error), error
    sound = _sound_bundle_memory(spectral_bundle, tmp_path / "sound")
    assert peak < sound + REFUSAL_MEMORY  # refused before sizing anything by the settings
    one_line_error(uvsdk("info", "--bundle", folder, "--store", tmp_path / "s"), match)


def test_05_oversized_members_are_refused_before_reading(
    spectral_bundle: Path, tmp_path: Path
) -> None:
    folder = _bundle_folder(spectral_bundle, tmp_path / "huge-model")
    with open(folder / "model.onnx", "r+b") as handle:
        handle.truncate(3 * 1024**3)  # a sparse 3 GB model: costs no disk, would cost 3 GB of RAM
    with pytest.raises(BundleError, match="model.onnx is 3221225472 bytes"):
        Bundle(folder)
    peak, error = _traced_load(folder)
    assert error is not None and "model.onnx is 3221225472 bytes" in error, error
    sound = _sound_bundle_memory(spectral_bundle, tmp_path / "sound")
    assert peak < sound + REFUSAL_MEMORY  # refused before reading it
    folder = _bundle_folder(spectral_bundle, tmp_path / "huge-manifest")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["padding"] = "x" * (2 * 1024 * 1024)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="manifest.json is"):
        Bundle(folder)
    archive_path = tmp_path / "huge-manifest.uvb"
    with zipfile.ZipFile(archive_path, "w", zipfile.ZIP_DEFLATED) as archive:
        for member in ("model.onnx", "manifest.json"):
            if member == "model.onnx":
                archive.writestr(member, b"\0")
            else:
                archive.write(folder / member, member)
    one_line_error(
        uvsdk("info", "--bundle", archive_path, "--store", tmp_path / "s"), "manifest.json is"
    )


# -- 6. deleted templates came back ---------------------------------------------------------------


def test_06_a_store_deleted_during_verify_is_not_recreated(alice, monkeypatch) -> None:
    verifier, store, _, impostor = alice
    real_embed = Verifier.embed

    def embed_while_the_owner_deletes(self, source, **kwargs):
        vector = real_embed(self, source, **kwargs)
        shutil.rmtree(store)
        return vector

    monkeypatch.setattr(Verifier, "embed", embed_while_the_owner_deletes)
    with pytest.raises(NotEnrolledError, match="no longer exists|deleted"):
        verifier.verify(impostor, user="alice")
    assert not store.exists()


def test_06_a_template_deleted_during_verify_is_not_recreated(alice, monkeypatch) -> None:
    verifier, store, _, impostor = alice
    real_embed = Verifier.embed

    def embed_while_deleted(self, source, **kwargs):
        vector = real_embed(self, source, **kwargs)
        (store / "alice.uvt").unlink()
        return vector

    monkeypatch.setattr(Verifier, "embed", embed_while_deleted)
    with pytest.raises(NotEnrolledError, match="deleted meanwhile"):
        verifier.verify(impostor, user="alice")
    assert list(store.iterdir()) == []


def test_06_stale_temporaries_are_cleaned_and_deleted(alice) -> None:
    verifier, store, _, impostor = alice
    stale = store / ".alice.uvt.k3j4h5g6"  # a write killed just before its rename (0.1 naming)
    stale.write_bytes((store / "alice.uvt").read_bytes())
    result = uvsdk("info", "--bundle", verifier.bundle.path, "--store", store)
    assert (
        result.exit_code == 0 and "k3j4" not in result.stdout and "1 template(s)" in result.stdout
    )
    verifier.verify(impostor, user="alice")  # a locked write cleans the user's leftovers
    assert not stale.exists()
    stale.write_bytes(b"leftover")
    assert uvsdk("delete", "--user", "alice", "--store", store).exit_code == 0
    assert list(store.iterdir()) == []


# -- 7. a mistyped passphrase was kept forever -----------------------------------------------------


def test_07_a_wrong_passphrase_is_asked_again(alice) -> None:
    verifier, store, _, impostor = alice
    answers = ["mistyped", PASSPHRASE]
    asked = []

    def ask(confirm: bool) -> str:
        asked.append(confirm)
        return answers[len(asked) - 1]

    app_verifier = Verifier(verifier.bundle, store=store, passphrase=ask)
    with pytest.raises(WrongKeyError):
        app_verifier.verify(impostor, user="alice")
    assert not app_verifier.verify(impostor, user="alice").accepted
    assert len(asked) == 2


# -- 8. out-of-range float samples aborted enrollment and verify batches --------------------------


def test_08_out_of_range_samples_are_bad_input(spectral_bundle, voice_dir, tmp_path) -> None:
    folder = enrollment_dir(voice_dir, 0, tmp_path, count=6)
    clip, rate = sf.read(folder / "clip0.wav", dtype="float32")
    clip[100] = 3e38
    sf.write(folder / "loud.wav", clip, rate, subtype="FLOAT")
    verifier = Verifier(spectral_bundle, store=tmp_path / "s", passphrase=PASSPHRASE)
    report = verifier.enroll(folder)
    skipped = [s for s in report.samples if not s.used]
    assert [(Path(s.file).name, s.reason) for s in skipped] == [("loud.wav", "out_of_range")]
    result = uvsdk("verify", folder / "loud.wav", enrolled_clip(voice_dir, 0), "--bundle",
                   spectral_bundle, "--store", tmp_path / "s")  # fmt: skip
    assert result.exit_code == 2
    assert "loud.wav: samples reach 3e+38" in result.stderr
    assert result.stdout.count("ACCEPT") == 1


# -- 9. store permissions were not checked ---------------------------------------------------------


def test_09_a_store_others_can_write_is_refused(alice, tmp_path) -> None:
    verifier, store, _, impostor = alice
    for mode in (0o777, 0o770, 0o702):
        store.chmod(mode)
        with pytest.raises(StorePermissionError, match="writable by other users"):
            Verifier(verifier.bundle, store=store, passphrase=PASSPHRASE).verify(
                impostor, user="alice"
            )
        result = uvsdk(
            "verify",
            impostor,
            "--user",
            "alice",
            "--bundle",
            verifier.bundle.path,
            "--store",
            store,
        )
        one_line_error(result, f"chmod go-w {store}")
    store.chmod(0o700)
    (store / "alice.uvt").chmod(0o666)
    with pytest.raises(StorePermissionError, match="chmod 600"):
        Verifier(verifier.bundle, store=store, passphrase=PASSPHRASE).verify(impostor, user="alice")
    (store / "alice.uvt").chmod(0o600)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown")
def test_09_a_store_owned_by_another_user_is_refused(alice) -> None:
    verifier, store, _, impostor = alice
    os.chown(store, 65534, 65534)
    try:
        with pytest.raises(StorePermissionError, match="belongs to another user"):
            Verifier(verifier.bundle, store=store, passphrase=PASSPHRASE).verify(
                impostor, user="alice"
            )
    finally:
        os.chown(store, 0, 0)


# -- 10-12. the command line ----------------------------------------------------------------------


def test_10_an_unreadable_file_does_not_stop_the_batch(alice, monkeypatch, tmp_path) -> None:
    verifier, store, _, impostor = alice
    unreadable = tmp_path / "unreadable.wav"
    shutil.copy(impostor, unreadable)
    unreadable.chmod(0)
    real_open, real_access = open, os.access

    def open_as_a_user(file, *args, **kwargs):  # root reads mode-000 files; a user cannot
        if str(file) == str(unreadable):
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", open_as_a_user)
    monkeypatch.setattr(
        os, "access", lambda p, m, **k: str(p) != str(unreadable) and real_access(p, m, **k)
    )
    result = uvsdk("verify", impostor, unreadable, enrolled_clip(impostor.parents[1], 0),
                   "--user", "alice", "--bundle", verifier.bundle.path, "--store", store)  # fmt: skip
    assert result.exit_code == 2
    assert result.stdout.count("REJECT") == 1 and result.stdout.count("ACCEPT") == 1, result.stdout
    assert (
        result.stderr.strip()
        == "uvsdk: error: unreadable.wav: not a readable audio file (Permission denied)"
    )


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["verify"], "missing argument"),
        (["enroll", "--samples", ".", "--tpr", "abc"], "'abc' is not a valid float"),
        (["verify", "-dash.wav"], "write ./-dash.wav"),
        (["frobnicate"], "no such command"),
        (["info", "--bundle"], "requires an argument"),
    ],
)
def test_11_usage_errors_are_one_line(args: list[str], match: str) -> None:
    one_line_error(uvsdk(*args), match)
    completed = run_until_stalled([sys.executable, "-m", "uvsdk.cli", *args], stall_seconds=300)
    assert completed.returncode == 2 and len(completed.stderr.strip().splitlines()) == 1
    assert uvsdk("--help").exit_code == 0 and uvsdk("verify", "--help").exit_code == 0


def test_12_a_file_name_cannot_forge_an_output_line(alice, voice_dir, tmp_path) -> None:
    verifier, store, _, impostor = alice
    forged = tmp_path / "x\nACCEPT  score=1.0000  threshold=0.0000  me.wav"
    shutil.copy(impostor, forged)
    result = uvsdk(
        "verify", forged, "--user", "alice", "--bundle", verifier.bundle.path, "--store", store
    )
    assert result.exit_code == 1
    assert len(result.stdout.strip().splitlines()) == 1 and result.stdout.startswith("REJECT")
    assert "x\\nACCEPT" in result.stdout
    samples = tmp_path / "samples"
    shutil.copytree(enrollment_dir(voice_dir, 1, tmp_path), samples)
    (samples / "clip0.wav").rename(samples / "a\x1b[2Jb\n  used     fake.wav")
    result = uvsdk(
        "enroll",
        "--samples",
        samples,
        "--user",
        "bob",
        "--bundle",
        verifier.bundle.path,
        "--store",
        store,
    )
    assert result.exit_code == 0 and "\x1b" not in result.stdout
    assert not any(line.startswith("  used     fake.wav") for line in result.stdout.splitlines())
    assert "a\\x1b[2Jb\\n  used     fake.wav" in result.stdout


# -- 13. passphrases: invalid bytes, normalisation ------------------------------------------------


def test_13_an_invalid_utf8_passphrase_is_refused_without_echo(
    spectral_bundle, voice_dir, tmp_path
) -> None:
    env = {k.encode(): v.encode() for k, v in os.environ.items() if not k.startswith("UVSDK_P")}
    env[b"UVSDK_PASSPHRASE"] = b"hunter\xff2-secret"
    command = [sys.executable, "-m", "uvsdk.cli", "enroll", "--samples", str(voice_dir / "speaker0"),
               "--bundle", str(spectral_bundle), "--store", str(tmp_path / "s")]  # fmt: skip
    completed = run_until_stalled(command, stall_seconds=300, env=env)
    assert completed.returncode == 2
    error = completed.stderr
    assert error.strip() == (
        "uvsdk: error: the passphrase is not valid UTF-8 text; type it again or fix UVSDK_PASSPHRASE"
    )
    for part in ("hunter", "secret", "position", "\\xff", "udcff"):
        assert part not in error


def test_13_composed_and_decomposed_passphrases_open_the_same_template(alice) -> None:
    verifier, store, _, impostor = alice
    composed = "Ærøskøbing café ｐａｓｓ"
    other = store.parent / "nfkc-store"
    TemplateStore(other, passphrase=composed).save(
        TemplateStore(store, passphrase=PASSPHRASE).load("alice").replace(user="bob")
    )
    for typed in (unicodedata.normalize("NFD", composed), "Ærøskøbing café pass"):
        assert TemplateStore(other, passphrase=typed).load("bob").user == "bob"
    with pytest.raises(WrongKeyError):
        TemplateStore(other, passphrase="Ærøskøbing cafe pass").load("bob")


# -- 14. info on stray entries -------------------------------------------------------------------


def test_14_info_skips_and_reports_stray_entries(alice) -> None:
    verifier, store, _, _ = alice
    (store / "bad name.uvt").write_bytes(b"x")
    (store / "x.uvt").symlink_to(store / "missing")
    (store / "dir.uvt").mkdir()
    result = uvsdk("info", "--bundle", verifier.bundle.path, "--store", store)
    assert result.exit_code == 0, result.stderr
    assert "1 template(s)" in result.stdout and "  alice  (updated" in result.stdout
    assert "ignored: bad name.uvt (not a valid user name)" in result.stdout
    assert "ignored: x.uvt (a symbolic link, not a template file)" in result.stdout
    assert "ignored: dir.uvt (not a regular file)" in result.stdout


# -- 16. the back-off arithmetic -----------------------------------------------------------------


def test_16_backoff_never_overflows() -> None:
    policy = BackoffPolicy()
    assert policy.lockout_seconds(1029) == policy.max_seconds
    assert policy.lockout_seconds(10**12) == policy.max_seconds
    assert BackoffPolicy(base_seconds=0).lockout_seconds(5000) == 0.0
    assert BackoffPolicy(factor=1000, max_seconds=3e8).lockout_seconds(10**6) == 3e8
    state = BackoffState(failures=10**9)
    after = record(state, policy, False, now=100.0)
    assert after.failures == 10**9 + 1 and after.locked_until == 100.0 + policy.max_seconds
    for bad in ({"attempts": 0}, {"factor": float("inf")}, {"base_seconds": float("nan")}):
        with pytest.raises(ValueError):
            BackoffPolicy(**bad)


# -- 17. held, but wrong ---------------------------------------------------------------------------


@pytest.mark.parametrize("offset", [5, 6, 7, 8, 15, 23])  # scrypt fields and salt bytes
def test_17_a_modified_header_is_not_called_a_wrong_passphrase(alice, offset: int) -> None:
    _, store, _, _ = alice
    path = store / "alice.uvt"
    blob = bytearray(path.read_bytes())
    blob[offset] ^= 0x01
    path.write_bytes(bytes(blob))
    with pytest.raises(TemplateError) as caught:
        TemplateStore(store, passphrase=PASSPHRASE).load("alice")
    assert caught.value.code == "template.header-modified"
    assert not isinstance(caught.value, WrongKeyError)


def test_17_trusted_keys_that_name_no_key_are_an_error(enrolled_store) -> None:
    store, bundle, clip = enrolled_store
    for value in (":", " : ", os.pathsep * 3):
        result = uvsdk(
            "verify", clip, "--bundle", bundle, "--store", store, env={"UVSDK_TRUSTED_KEYS": value}
        )
        one_line_error(result, "UVSDK_TRUSTED_KEYS is set but names no key file")


def test_17_the_command_drops_the_passphrase_from_its_environment(enrolled_store) -> None:
    store, bundle, clip = enrolled_store
    script = (
        "import os, sys\n"
        "from uvsdk.cli import app\n"
        f"code = app(['verify', {str(clip)!r}, '--bundle', {str(bundle)!r}, '--store', {str(store)!r}],"
        " standalone_mode=False)\n"
        "print(code, 'UVSDK_PASSPHRASE' in os.environ)\n"
    )
    env = {**os.environ, "UVSDK_PASSPHRASE": PASSPHRASE}
    completed = run_until_stalled([sys.executable, "-c", script], stall_seconds=300, env=env)
    assert completed.stdout.strip().splitlines()[-1] == "0 False", completed


@pytest.fixture()
def enrolled_store(spectral_bundle, voice_dir, tmp_path):
    store = tmp_path / "store"
    Verifier(spectral_bundle, store=store, passphrase=PASSPHRASE).enroll(
        enrollment_dir(voice_dir, 0, tmp_path)
    )
    return store, spectral_bundle, enrolled_clip(voice_dir, 0)


def test_templates_written_by_version_1_still_open(alice) -> None:
    """Format 1 files (0.1.0) open with the passphrase as given, and become format 2 on the
    next write."""
    verifier, store, _, impostor = alice
    template = TemplateStore(store, passphrase=PASSPHRASE).load("alice")
    path = store.parent / "v1" / "alice.uvt"
    path.parent.mkdir(mode=0o700)
    salt = os.urandom(16)
    key = template_module._scrypt(PASSPHRASE.encode(), salt, 12, 8, 1)
    check = template_module._key_check(key)
    v1 = template_module._Header(1, 12, 8, 1, salt, check, os.urandom(12), version=1)
    payload = json.loads(template.to_payload())
    payload["version"] = 1
    del payload["generation"]
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    aad = v1.pack()
    path.write_bytes(aad + AESGCM(key).encrypt(v1.nonce, json.dumps(payload).encode(), aad))
    assert path.read_bytes()[:4] == b"UVT1"
    verifier_v1 = Verifier(verifier.bundle, store=path.parent, passphrase=PASSPHRASE)
    assert not verifier_v1.verify(impostor, user="alice").accepted
    assert path.read_bytes()[:4] == b"UVT2"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(KeyUnavailableError):
        TemplateStore(store, passphrase="\udcff").load("alice")
