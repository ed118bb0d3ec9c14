"""The OS keyring (``pip install 'uvsdk[keyring]'``): template keys and generation records.

Service ``uvsdk``. A keyring key's entry ``template-key-<salt hex>`` holds ``base64(key):generation``
(0.1.0 wrote the key alone); a passphrase template whose records live in the keyring has an entry
``template-generation-<salt hex>`` holding the generation.
"""

from __future__ import annotations

import base64
import contextlib
from typing import Any

from .errors import KeyUnavailableError, TemplateError

KEYRING_SERVICE = "uvsdk"


def _keyring() -> Any:
    try:
        import keyring
        import keyring.errors
    except ImportError:
        raise KeyUnavailableError(
            "the OS keyring needs the 'keyring' package: pip install 'uvsdk[keyring]'"
        ) from None
    return keyring


def key_entry(key_id: bytes) -> str:
    return f"template-key-{key_id.hex()}"


def generation_entry(key_id: bytes) -> str:
    return f"template-generation-{key_id.hex()}"


def encode_key_entry(key: bytes, generation: int) -> str:
    """A keyring key's entry: the key and the template's generation (``key:generation``)."""
    return f"{base64.b64encode(key).decode()}:{generation}"


def decode_key_entry(entry: str) -> tuple[bytes, int | None]:
    encoded, _, generation = entry.partition(":")  # entries written by 0.1 hold the key alone
    try:
        return base64.b64decode(encoded, validate=True), (int(generation) if generation else None)
    except ValueError:
        raise TemplateError(
            "the template's keyring entry is damaged", code="template.wrong-key"
        ) from None


def read(entry: str) -> str | None:
    keyring = _keyring()
    try:
        return keyring.get_password(KEYRING_SERVICE, entry)
    except keyring.errors.KeyringError as error:
        raise KeyUnavailableError(f"the OS keyring is not available ({error})") from None


def write(entry: str, value: str) -> None:
    keyring = _keyring()
    try:
        keyring.set_password(KEYRING_SERVICE, entry, value)
    except keyring.errors.KeyringError as error:
        raise KeyUnavailableError(f"the OS keyring is not available ({error})") from None


def remove(entry: str) -> None:
    keyring = _keyring()
    with contextlib.suppress(keyring.errors.KeyringError):
        keyring.delete_password(KEYRING_SERVICE, entry)


def set_key(key_id: bytes, key: bytes) -> None:
    write(key_entry(key_id), encode_key_entry(key, 0))


def get_key(key_id: bytes) -> bytes | None:
    entry = read(key_entry(key_id))
    return None if entry is None else decode_key_entry(entry)[0]


def delete_key(key_id: bytes) -> None:
    remove(key_entry(key_id))
