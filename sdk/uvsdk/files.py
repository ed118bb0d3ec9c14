"""Files of the template store: private folders, atomic never-recreating writes, regular-file
and bounded reads (the latter for bundle folders too) and the per-user lock.

Shared by the store (:mod:`uvsdk.template`) and the freshness records
(:mod:`uvsdk.freshness`). The lock is the same lock file the TypeScript port takes
(js/src/node.ts; docs/spec.md §10.1), so a Python and a Node process exclude each other.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .errors import NotEnrolledError, StorePermissionError, TemplateError, UvsdkError

TEMPORARY_SUFFIX = ".tmp"
LOCK_SUFFIX = ".lock"
"""A user's lock file is ``<store>/.<user>.lock`` (docs/spec.md §10.1)."""
_BREAK_SUFFIX = ".break"
_FIRST_WAIT_SECONDS = 0.002
_LONGEST_WAIT_SECONDS = 0.05


def read_at_most(handle: BinaryIO, limit: int) -> bytes:
    """Up to ``limit + 1`` bytes of an open file (one more than the limit tells a file over it),
    read into a buffer of the size the file has, not of ``limit``; more is read only if the file
    grew since its size was taken. Shared by the template store and bundle folders."""
    size = min(os.fstat(handle.fileno()).st_size, limit)
    data = handle.read(size + 1)
    if len(data) > size:
        data += handle.read(limit + 1 - len(data))
    return data


def check_private(directory: Path, what: str) -> None:
    if not hasattr(os, "geteuid"):
        return  # Windows: ACLs, not mode bits; the user profile folder is private by default
    try:
        info = os.stat(directory)
    except FileNotFoundError:
        return
    except OSError as error:
        raise UvsdkError(
            f"cannot read the {what} {directory} ({error.strerror or error})", code="store.io"
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
            f"cannot create the folder {directory} ({error.strerror or error})", code="store.io"
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
        raise UvsdkError(
            f"cannot write to {path.parent} ({error.strerror or error})", code="store.io"
        ) from None
    target = path.name if relative else str(path)
    name = f".{path.name}.{secrets.token_hex(6)}{TEMPORARY_SUFFIX}"
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
            raise UvsdkError(
                f"cannot write {path} ({error.strerror or error})", code="store.io"
            ) from None
        raise
    finally:
        if folder is not None:
            os.close(folder)


def open_regular(path: Path) -> int:
    """Open ``path`` for reading, only if it is a regular file: a symbolic link is not followed
    and a FIFO or device never blocks the open (``O_NONBLOCK``, then ``fstat``).

    Raises ``FileNotFoundError`` when there is no such file, :class:`TemplateError` when it is
    not a regular file, ``OSError`` otherwise; the caller closes the descriptor.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        descriptor = os.open(path, flags | getattr(os, "O_BINARY", 0))
    except OSError as error:
        if os.path.islink(path):
            raise TemplateError(
                f"{path.name} is a symbolic link, not a regular file", code="template.unreadable"
            ) from None
        raise error
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise TemplateError(f"{path.name} is not a regular file", code="template.unreadable")
    return descriptor


@contextlib.contextmanager
def user_lock(directory: Path, user: str) -> Iterator[None]:
    """Hold ``<directory>/.<user>.lock``, the per-user lock every uvsdk process takes (Python's
    and the TypeScript port's alike) for a read-modify-write of the user's template.

    The lock file holds ``<pid> <random token> <host name>``; it is made whole before it appears
    (written to a file of its own, then hard-linked into place, which fails while another holds
    the lock). A waiting process polls; a lock whose process no longer exists on this host was
    left by a crash and is removed, by one process at a time (``.<user>.lock.break``, taken the
    same way). Releasing removes the file if it is still this holder's.
    """
    lock = directory / f".{user}{LOCK_SUFFIX}"
    owner = f"{os.getpid()} {secrets.token_hex(8)} {socket.gethostname()}\n"
    candidate = directory / f".{user}{LOCK_SUFFIX}.{secrets.token_hex(6)}"
    try:
        descriptor = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="ascii") as handle:
            handle.write(owner)
    except OSError as error:
        raise UvsdkError(
            f"cannot lock {directory} ({error.strerror or error})", code="store.io"
        ) from None
    try:
        _acquire(lock, candidate, owner)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(candidate)
    try:
        yield
    finally:
        with contextlib.suppress(OSError, UvsdkError):
            _remove_if_held_by(lock, owner)


def _acquire(lock: Path, candidate: Path, owner: str) -> None:
    wait = _FIRST_WAIT_SECONDS
    while True:
        try:
            os.link(candidate, lock)
            return
        except FileExistsError:
            pass
        except OSError as error:
            raise UvsdkError(
                f"cannot lock {lock.parent} ({error.strerror or error})", code="store.io"
            ) from None
        holder = _read_lock(lock)
        if holder is None:
            continue  # released meanwhile
        if _holder_alive(holder):
            time.sleep(wait)
            wait = min(2 * wait, _LONGEST_WAIT_SECONDS)
        else:
            _break_stale(lock, candidate, owner, holder)


def _break_stale(lock: Path, candidate: Path, owner: str, stale: str) -> None:
    """Remove ``lock`` if it still holds ``stale``, under the break lock (one breaker at once)."""
    guard = lock.with_name(lock.name + _BREAK_SUFFIX)
    try:
        os.link(candidate, guard)
    except FileExistsError:
        breaker = _read_lock(guard)
        if breaker is not None and not _holder_alive(breaker):
            _remove_if_held_by(guard, breaker)  # a breaker that crashed in turn
        else:
            time.sleep(_FIRST_WAIT_SECONDS)
        return
    except OSError as error:
        raise UvsdkError(
            f"cannot lock {lock.parent} ({error.strerror or error})", code="store.io"
        ) from None
    try:
        _remove_if_held_by(lock, stale)
    finally:
        _remove_if_held_by(guard, owner)


def _read_lock(lock: Path) -> str | None:
    """The lock file's text, or None when there is none."""
    try:
        descriptor = open_regular(lock)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise UvsdkError(
            f"cannot read the lock {lock} ({error.strerror or error})", code="store.io"
        ) from None
    with os.fdopen(descriptor, "rb") as handle:
        return handle.read(256).decode("ascii", "replace")


def _remove_if_held_by(lock: Path, holder: str) -> None:
    if holder and _read_lock(lock) == holder:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)


def _holder_alive(holder: str) -> bool:
    """Whether the process a lock file names may still hold it (a process on another host, or
    one this platform cannot look up, is taken to)."""
    fields = holder.split()
    if len(fields) != 3 or not fields[0].isdigit():
        return False  # not a lock any uvsdk wrote whole
    process, _, host = fields
    if host != socket.gethostname():
        return True
    return _process_exists(int(process))


def _process_exists(process: int) -> bool:
    if process <= 0:
        return False
    if process == os.getpid() or os.name == "nt":  # Windows' os.kill would end the process
        return True
    try:
        os.kill(process, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
