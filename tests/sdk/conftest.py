"""Fixtures only the SDK's tests use (the shared ones are tests/conftest.py's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from uvsdk import Verifier

from ..conftest import PASSPHRASE, enrollment_dir

IMPOSTOR = ("speaker7", "clip1.wav")


@pytest.fixture()
def memory_keyring():
    """An in-memory OS keyring for the test (``.entries``: ``(service, name) -> value``)."""
    keyring = pytest.importorskip("keyring")
    from keyring.backend import KeyringBackend

    class Memory(KeyringBackend):
        priority = 1

        def __init__(self) -> None:
            super().__init__()
            self.entries: dict[tuple[str, str], str] = {}

        def get_password(self, service: str, username: str) -> str | None:
            return self.entries.get((service, username))

        def set_password(self, service: str, username: str, password: str) -> None:
            self.entries[(service, username)] = password

        def delete_password(self, service: str, username: str) -> None:
            self.entries.pop((service, username), None)

    previous = keyring.get_keyring()
    backend = Memory()
    keyring.set_keyring(backend)
    yield backend
    keyring.set_keyring(previous)


class Clock:
    def __init__(self) -> None:
        self.now = 1.8e9

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def alice(spectral_bundle: Path, voice_dir: Path, tmp_path: Path):
    """Speaker 0 enrolled as 'alice' (prototype mode, passphrase store), a clock, an impostor."""
    clock = Clock()
    store = tmp_path / "store"
    verifier = Verifier(spectral_bundle, store=store, passphrase=PASSPHRASE, clock=clock)
    verifier.enroll(enrollment_dir(voice_dir, 0, tmp_path), user="alice")
    impostor = voice_dir.joinpath(*IMPOSTOR)
    assert not verifier.verify(impostor, user="alice", backoff=False).accepted
    return verifier, store, clock, impostor
