"""Freshness records: the last generation of each template, kept outside the template file.

Every write of a template stores a generation one higher than the last, and records it here,
keyed by the template's salt; a template below its record was rolled back (an older copy put
back) and is refused. Where the record lives decides what that promises (docs/sdk.md, threat
model): a file in a state folder outside the store detects a template put back on its own; the OS
keyring stops anyone who cannot edit the user's unlocked keyring.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from . import oskeyring
from .errors import KeyUnavailableError, TemplateError
from .files import atomic_write, check_private, check_private_file, make_private_dir, open_regular


def default_state_dir() -> Path:
    """``$UVSDK_STATE_DIR``, else the platform's user state folder (``.../uvsdk``)."""
    from_environment = os.environ.get("UVSDK_STATE_DIR")
    if from_environment:
        return Path(from_environment).expanduser()
    import platformdirs

    return Path(platformdirs.user_state_dir("uvsdk", appauthor=False))


class FileFreshness:
    """Generations in small files in a state folder outside the store (passphrase templates).

    It detects a template file rolled back on its own (a copy put back, a store folder restored
    from a backup or a sync). It cannot stop whoever can write both folders as the same OS user
    (or as root) from rolling back both together: a file-only store cannot be rollback-proof.
    """

    kind = "file"

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_state_dir()

    def _path(self, key_id: bytes) -> Path:
        return self.directory / "freshness" / f"{key_id.hex()}.gen"

    def check_permissions(self) -> None:
        """Refuse a state or freshness folder another user could write to (as the store's): they
        could put a higher generation in a record and lock the owner out of their template."""
        check_private(self.directory, "state folder")
        check_private(self.directory / "freshness", "freshness folder")

    def get(self, key_id: bytes) -> int | None:
        path = self._path(key_id)
        self.check_permissions()
        try:
            with os.fdopen(open_regular(path), "rb") as handle:
                check_private_file(handle.fileno(), path)
                text = handle.read(64).decode("ascii")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as error:
            raise TemplateError(
                f"cannot read the template's freshness record {path} ({error})",
                code="template.freshness",
            ) from None
        try:
            value = int(text.strip())
        except ValueError:
            raise TemplateError(
                f"the template's freshness record {path} is damaged", code="template.freshness"
            ) from None
        return value

    def set(self, key_id: bytes, generation: int) -> None:
        path = self._path(key_id)
        make_private_dir(path.parent)
        self.check_permissions()
        atomic_write(path, f"{generation}\n".encode("ascii"), must_exist=False)

    def delete(self, key_id: bytes) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(key_id).unlink()


class KeyringFreshness:
    """Generations in the OS keyring, outside the reach of anyone who can only touch files.

    With a keyring key the generation lives in the same keyring entry as the key; a passphrase
    template gets an entry of its own. Rolling a template back then needs the user's unlocked
    keyring as well, so keyring mode is rollback-proof against file-level attackers (a copied
    file, a restored backup, another local user); a process running as the same user with the
    keyring unlocked, or root, can still edit the keyring.
    """

    kind = "keyring"

    def check_permissions(self) -> None:
        """Nothing to check: the keyring is the user's own."""

    def get(self, key_id: bytes) -> int | None:
        entry = oskeyring.read(oskeyring.generation_entry(key_id))
        return None if entry is None else _parse_generation(entry)

    def set(self, key_id: bytes, generation: int) -> None:
        oskeyring.write(oskeyring.generation_entry(key_id), str(generation))

    def delete(self, key_id: bytes) -> None:
        oskeyring.remove(oskeyring.generation_entry(key_id))


def _parse_generation(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise TemplateError(
            "the template's keyring freshness record is damaged", code="template.freshness"
        ) from None


class KeyringKeyFreshness:
    """The generation of a keyring-key template, kept in the key's own keyring entry."""

    kind = "keyring"

    def check_permissions(self) -> None:
        """Nothing to check: the keyring is the user's own."""

    def get(self, key_id: bytes) -> int | None:
        entry = oskeyring.read(oskeyring.key_entry(key_id))
        return None if entry is None else oskeyring.decode_key_entry(entry)[1]

    def set(self, key_id: bytes, generation: int) -> None:
        entry = oskeyring.read(oskeyring.key_entry(key_id))
        if entry is None:
            raise KeyUnavailableError("the template's key is no longer in the keyring")
        key, _ = oskeyring.decode_key_entry(entry)
        oskeyring.write(oskeyring.key_entry(key_id), oskeyring.encode_key_entry(key, generation))

    def delete(self, key_id: bytes) -> None:
        pass  # the entry goes with the key


KEYRING_KEY_FRESHNESS = KeyringKeyFreshness()


Freshness = FileFreshness | KeyringFreshness | KeyringKeyFreshness
