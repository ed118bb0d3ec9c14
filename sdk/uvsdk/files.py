"""Files of the template store: private folders and atomic, never-recreating writes.

Shared by the store (:mod:`uvsdk.template`) and the freshness records
(:mod:`uvsdk.freshness`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from .errors import NotEnrolledError, StorePermissionError, UvsdkError

_TEMPORARY = ".tmp"


def check_private(directory: Path, what: str) -> None:
    if not hasattr(os, "geteuid"):
        return  # Windows: ACLs, not mode bits; the user profile folder is private by default
    try:
        info = os.stat(directory)
    except FileNotFoundError:
        return
    except OSError as error:
        raise UvsdkError(
            f"cannot read the {what} {directory} ({error.strerror or error})"
        ) from None
    if info.st_uid not in (os.geteuid(), 0):
        raise StorePermissionError(
            f"the {what} {directory} belongs to another user (uid {info.st_uid}): "
            "refusing to use it; use a folder of your own"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StorePermissionError(
            f"the {what} {directory} is writable by other users "
            f"(mode {stat.S_IMODE(info.st_mode):04o}): refusing to use it; "
            f"run chmod go-w {directory}"
        )


def check_private_file(descriptor: int, path: Path) -> None:
    if not hasattr(os, "geteuid"):
        return
    info = os.fstat(descriptor)
    if info.st_uid not in (os.geteuid(), 0):
        raise StorePermissionError(
            f"{path.name} belongs to another user (uid {info.st_uid}): refusing to use it"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StorePermissionError(
            f"{path.name} is writable by other users (mode {stat.S_IMODE(info.st_mode):04o}): "
            f"refusing to use it; run chmod 600 {path}"
        )


def make_private_dir(directory: Path) -> None:
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise UvsdkError(
            f"cannot create the folder {directory} ({error.strerror or error})"
        ) from None


def atomic_write(path: Path, blob: bytes, *, must_exist: bool) -> None:
    """Write via a temporary file in the same folder, fsync, then ``os.replace`` (mode 0600).

    Every step is relative to the folder opened once, so if the folder is deleted meanwhile the
    write fails instead of recreating it; with ``must_exist`` the target must still be there just
    before the rename (an update never brings back a deleted file). The folder itself is never
    created here.
    """
    relative = hasattr(os, "O_DIRECTORY") and os.replace in os.supports_dir_fd
    try:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY) if relative else None
    except FileNotFoundError:
        raise NotEnrolledError(
            f"{path.parent} no longer exists (deleted?): nothing written"
        ) from None
    except OSError as error:
        raise UvsdkError(f"cannot write to {path.parent} ({error.strerror or error})") from None
    target = path.name if relative else str(path)
    name = f".{path.name}.{secrets.token_hex(6)}{_TEMPORARY}"
    temporary = name if relative else str(path.parent / name)
    created = False
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        descriptor = os.open(temporary, flags, 0o600, dir_fd=folder)
        created = True
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(blob)
            handle.flush()
            os.fsync(handle.fileno())
        if must_exist:
            try:
                os.stat(target, dir_fd=folder, follow_symlinks=False)
            except FileNotFoundError:
                raise NotEnrolledError(
                    f"{path.name} was deleted meanwhile: not written again"
                ) from None
        os.replace(temporary, target, src_dir_fd=folder, dst_dir_fd=folder)
        created = False
        if folder is not None:
            with contextlib.suppress(OSError):
                os.fsync(folder)
    except BaseException as error:
        if created:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=folder)
        if isinstance(error, FileNotFoundError) and not created:
            raise NotEnrolledError(
                f"{path.parent} no longer exists (deleted?): nothing written"
            ) from None
        if isinstance(error, OSError):
            raise UvsdkError(f"cannot write {path} ({error.strerror or error})") from None
        raise
    finally:
        if folder is not None:
            os.close(folder)
