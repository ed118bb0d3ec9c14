"""The encrypted template store: secrecy, authentication, atomic writes, keys."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import uvsdk.template as template_module
from uvsdk.errors import (
    KeyUnavailableError,
    NotEnrolledError,
    TemplateError,
    UvsdkError,
    WrongKeyError,
)
from uvsdk.template import Template, TemplateStore, parse_file

from ..conftest import PASSPHRASE


def _secret_template(user: str = "alice") -> Template:
    rng = np.random.default_rng(1)
    return Template(
        user=user,
        created=1.7e9,
        codeword=rng.integers(0, 2, 127).astype(np.uint8),
        user_id=42,
        code_sha256="ab" * 32,
        mode="codeword",
        threshold=0.612345,
        target_tpr=0.95,
        model_sha256="cd" * 32,
        enrolled=1.7e9,
        samples=7,
        prototype=rng.normal(size=40).astype(np.float32),
    )


def test_round_trip_and_file_mode(tmp_path: Path) -> None:
    store = TemplateStore(tmp_path / "store", passphrase=PASSPHRASE)
    original = _secret_template()
    path = store.save(original)
    assert path == tmp_path / "store" / "alice.uvt"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    loaded = TemplateStore(tmp_path / "store", passphrase=PASSPHRASE).load("alice")
    assert loaded == original
    np.testing.assert_array_equal(loaded.codeword, original.codeword)
    np.testing.assert_array_equal(loaded.prototype, original.prototype)
    assert store.users() == ["alice"]
    assert [p.name for p in path.parent.iterdir() if not p.name.startswith(".")] == ["alice.uvt"]


def test_nothing_secret_in_clear(tmp_path: Path) -> None:
    store = TemplateStore(tmp_path, passphrase=PASSPHRASE)
    original = _secret_template()
    blob = store.save(original).read_bytes()
    for secret in (
        np.packbits(original.codeword).tobytes(),
        original.prototype.tobytes(),
        b"0.612345",
        b"threshold",
        b"codeword",
        PASSPHRASE.encode(),
    ):
        assert secret not in blob
    assert "0.612345" not in repr(original) and "codeword=" not in repr(original)


def test_wrong_passphrase_is_told_apart_from_tampering(tmp_path: Path) -> None:
    path = TemplateStore(tmp_path, passphrase=PASSPHRASE).save(_secret_template())
    before = path.read_bytes()
    with pytest.raises(WrongKeyError, match="wrong passphrase"):
        TemplateStore(tmp_path, passphrase="wrong").load("alice")
    assert path.read_bytes() == before


@pytest.mark.parametrize("where", [0, 5, 7, 20, 40, 60, -1, -20])
def test_any_flipped_byte_is_detected(tmp_path: Path, where: int) -> None:
    path = TemplateStore(tmp_path, passphrase=PASSPHRASE).save(_secret_template())
    blob = bytearray(path.read_bytes())
    blob[where] ^= 0x40
    path.write_bytes(bytes(blob))
    with pytest.raises(TemplateError):
        TemplateStore(tmp_path, passphrase=PASSPHRASE).load("alice")


TRACED_TEMPLATE_LOAD = """
import sys, tracemalloc
from uvsdk.template import TemplateStore
store = TemplateStore(sys.argv[1], passphrase=sys.argv[2])
tracemalloc.start()
store.load("alice")
print(tracemalloc.get_traced_memory()[1])
"""


def test_an_oversized_template_is_refused_and_a_sound_one_read_at_its_size(
    tmp_path: Path,
) -> None:
    """A template file over the 16 MiB limit is refused without reading it whole (here a sparse
    3 GB file); a sound one is read into a buffer of its size, not of the limit."""
    store = TemplateStore(tmp_path, passphrase=PASSPHRASE)
    path = store.save(_secret_template())
    # traced in a fresh interpreter: tracemalloc counts every thread of a pytest worker
    traced = subprocess.run(
        [sys.executable, "-c", TRACED_TEMPLATE_LOAD, str(tmp_path), PASSPHRASE],
        capture_output=True,
        text=True,
        check=False,
    )
    assert traced.returncode == 0, traced.stderr[-2000:]
    peak = int(traced.stdout.split()[-1])
    assert peak < template_module._MAX_FILE_BYTES // 4, peak
    with open(path, "r+b") as handle:
        handle.truncate(3 * 1024**3)
    with pytest.raises(TemplateError, match="too large to be a template"):
        store.load("alice")


def test_renamed_template_is_refused(tmp_path: Path) -> None:
    path = TemplateStore(tmp_path, passphrase=PASSPHRASE).save(_secret_template("alice"))
    path.rename(tmp_path / "mallory.uvt")
    with pytest.raises(TemplateError, match="another user"):
        TemplateStore(tmp_path, passphrase=PASSPHRASE).load("mallory")


def test_missing_template_and_bad_names(tmp_path: Path) -> None:
    store = TemplateStore(tmp_path, passphrase=PASSPHRASE)
    with pytest.raises(NotEnrolledError, match="not enrolled"):
        store.load("bob")
    for name in ("../escape", "", "a/b", ".hidden", "x" * 65):
        with pytest.raises(UvsdkError, match="invalid user name"):
            store.path(name)


def test_crash_half_way_through_a_write_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = TemplateStore(tmp_path, passphrase=PASSPHRASE)
    path = store.save(_secret_template())
    before = path.read_bytes()

    def crash(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(template_module.os, "replace", crash)
    with pytest.raises(UvsdkError, match="No space left"):
        store.save(_secret_template().replace(threshold=0.1))
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alice.uvt"]  # no temp file left

    monkeypatch.undo()
    monkeypatch.setattr(template_module.os, "fsync", crash)
    with pytest.raises(UvsdkError):
        store.save(_secret_template().replace(threshold=0.1))
    assert path.read_bytes() == before


def test_no_passphrase_and_no_tty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    devnull = open(os.devnull)  # noqa: SIM115
    request.addfinalizer(devnull.close)
    monkeypatch.setattr("sys.stdin", devnull)
    store = TemplateStore(tmp_path)
    with pytest.raises(KeyUnavailableError, match="UVSDK_PASSPHRASE"):
        store.save(_secret_template())
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("UVSDK_PASSPHRASE", PASSPHRASE)
    TemplateStore(tmp_path).save(_secret_template())
    with pytest.raises(KeyUnavailableError, match="empty"):
        TemplateStore(tmp_path, passphrase=lambda confirm: "").load("alice")


def test_keyring_keys(tmp_path: Path, memory_keyring) -> None:
    backend = memory_keyring
    store = TemplateStore(tmp_path, use_keyring=True, passphrase=lambda c: pytest.fail())
    path = store.save(_secret_template())
    assert parse_file(path.read_bytes())[0].kdf == template_module.KDF_KEYRING
    assert len(backend.entries) == 1
    assert TemplateStore(tmp_path).load("alice") == _secret_template()
    backend.entries.clear()
    with pytest.raises(WrongKeyError, match="not in this keyring"):
        TemplateStore(tmp_path).load("alice")
    store = TemplateStore(tmp_path, use_keyring=True)
    store.save(_secret_template("bob"))
    store.delete("bob")
    assert backend.entries == {} and store.users() == ["alice"]


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(blob=st.binary(max_size=400), keep_header=st.booleans())
def test_parser_on_random_bytes_raises_only_our_error(
    tmp_path: Path, blob: bytes, keep_header: bool
) -> None:
    if keep_header:
        blob = template_module.MAGIC + bytes([1, 12, 8, 1]) + blob
    path = tmp_path / "random.uvt"
    path.write_bytes(blob)
    with contextlib.suppress(UvsdkError):  # any other exception fails the test
        TemplateStore(tmp_path, passphrase=PASSPHRASE).load("random")


@settings(max_examples=100, deadline=None)
@given(payload=st.binary(max_size=300) | st.text(max_size=200).map(str.encode))
def test_payload_parser_on_random_bytes(payload: bytes) -> None:
    with contextlib.suppress(TemplateError):  # any other exception fails the test
        Template.from_payload(payload)


def test_payload_version_3_records_the_cohort_and_version_2_still_reads() -> None:
    import json

    original = _secret_template().replace(mode="prototype", cohort="ef" * 32)
    data = json.loads(original.to_payload())
    assert (data["version"], data["cohort"]) == (3, "ef" * 32)
    loaded = Template.from_payload(original.to_payload())
    assert loaded == original and loaded.cohort == "ef" * 32
    # a version-2 payload (before AS-norm) has no cohort: raw cosines
    del data["cohort"]
    data["version"] = 2
    older = Template.from_payload(json.dumps(data).encode())
    assert older.cohort is None and older.threshold == original.threshold
    # version 3 without a cohort member, or with one that is not a SHA-256: refused
    for broken in ({"version": 3}, {"version": 3, "cohort": "xyz"}, {"version": 3, "cohort": 5}):
        changed = {**data, **broken}
        if "cohort" not in broken:
            changed.pop("cohort", None)
        with pytest.raises(TemplateError):
            Template.from_payload(json.dumps(changed).encode())
