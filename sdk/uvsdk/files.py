"""Files of the template store: private folders, atomic never-recreating writes, regular-file
and bounded reads (the latter for bundle folders too) and the per-user lock.

Shared by the store (:mod:`uvsdk.template`) and the freshness records
(:mod:`uvsdk.freshness`). The lock is the same lock file the TypeScript port takes
(js/src/node.ts; docs/spec.md §10.1), so a Python and a Node process exclude each other.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import socket
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from .errors import NotEnrolledError, StorePermissionError, TemplateError, UvsdkError, printable

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


#: How long one holder may keep a user's lock before a waiting process gives up (store.locked).
#: The longest honest hold is one verification (a model run over at most 60 s of audio and a
#: template write: about a second); a holder that keeps it 30 s is stuck, or on another host.
LOCK_TIMEOUT_SECONDS = 30.0
#: How long a process waits in silence before it says what it is waiting for.
LOCK_NOTICE_SECONDS = 1.0
#: The tokens of the locks this process holds or is taking: a lock naming this process's id with
#: another token was left by an earlier process that had the same id (a container restarted).
_OWN_TOKENS: set[str] = set()


@contextlib.contextmanager
def user_lock(
    directory: Path,
    user: str,
    *,
    timeout: float | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold ``<directory>/.<user>.lock``, the per-user lock every uvsdk process takes (Python's
    and the TypeScript port's alike) for a read-modify-write of the user's template.

    The lock file holds ``<pid> <random token> <host name>``; it is made whole before it appears
    (written to a file of its own, then hard-linked into place, which fails while another holds
    the lock). A waiting process polls. A lock is broken when it is provably stale (docs/spec.md
    §10.1): not a line uvsdk writes, or naming a process of this host that no longer exists, or
    naming this very process with a token it did not draw; one process at a time breaks it
    (``.<user>.lock.break``, taken the same way). Any other lock is waited on: after
    :data:`LOCK_NOTICE_SECONDS` ``on_wait`` is told once what is awaited, and when one holder has
    kept it ``timeout`` seconds (default :data:`LOCK_TIMEOUT_SECONDS`; the clock restarts when
    the lock changes hands) the wait ends in a ``store.locked`` error naming the lock file.
    Releasing removes the file if it is still this holder's. Nothing is left behind when the
    attempt fails (a full disk included).
    """
    lock = directory / f".{user}{LOCK_SUFFIX}"
    token = secrets.token_hex(8)
    owner = f"{os.getpid()} {token} {socket.gethostname()}\n"
    candidate = directory / f".{user}{LOCK_SUFFIX}.{secrets.token_hex(6)}"
    _OWN_TOKENS.add(token)
    try:
        _write_candidate(candidate, owner, directory)
        try:
            _acquire(lock, candidate, owner, LOCK_TIMEOUT_SECONDS if timeout is None else timeout,
                     on_wait)  # fmt: skip
        finally:
            with contextlib.suppress(OSError):
                os.unlink(candidate)
        try:
            yield
        finally:
            with contextlib.suppress(OSError, UvsdkError):
                _remove_if_held_by(lock, owner)
    finally:
        _OWN_TOKENS.discard(token)


def _write_candidate(candidate: Path, owner: str, directory: Path) -> None:
    """The lock line, whole, in a file of its own; removed again if it cannot be written."""
    try:
        descriptor = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as error:
        raise UvsdkError(
            f"cannot lock {directory} ({error.strerror or error})", code="store.io"
        ) from None
    try:
        try:
            line = owner.encode("ascii")
            if os.write(descriptor, line) != len(line):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        finally:
            os.close(descriptor)
    except OSError as error:  # a full disk: the empty file must not stay behind
        with contextlib.suppress(OSError):
            os.unlink(candidate)
        raise UvsdkError(
            f"cannot lock {directory} ({error.strerror or error})", code="store.io"
        ) from None


def _acquire(
    lock: Path,
    candidate: Path,
    owner: str,
    timeout: float,
    on_wait: Callable[[str], None] | None,
) -> None:
    wait = _FIRST_WAIT_SECONDS
    started = time.monotonic()
    holder_seen, since = None, started
    told = False
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
        if not _holder_alive(holder) and _break_stale(lock, candidate, owner, holder):
            continue
        now = time.monotonic()
        if holder != holder_seen:  # the lock changed hands: progress, the clock restarts
            holder_seen, since = holder, now
        if on_wait is not None and not told and now - started >= LOCK_NOTICE_SECONDS:
            told = True
            on_wait(f"waiting for the lock {lock}, held by {_describe(holder)} "
                    f"(giving up if one holder keeps it {timeout:g} s)")  # fmt: skip
        if now - since >= timeout:
            raise UvsdkError(
                f"the lock {lock} has been held by {_describe(holder)} for {timeout:g} s: if no "
                f"uvsdk process runs there, remove {lock}",
                code="store.locked",
            )
        time.sleep(min(wait, max(timeout - (now - since), 0.0)))
        wait = min(2 * wait, _LONGEST_WAIT_SECONDS)


def _describe(holder: str) -> str:
    """``process 123 on host h``, escaped (the file's content is not trusted to be printable)."""
    fields = holder.split()
    if len(fields) != 3:
        return "a file that is not a uvsdk lock"
    return f"process {printable(fields[0])} on {printable(fields[2])}"


def _break_stale(lock: Path, candidate: Path, owner: str, stale: str) -> bool:
    """Remove ``lock`` if it still holds ``stale``, under the break lock (one breaker at once).
    False when another process holds the break lock (the caller waits, as on a live holder)."""
    guard = lock.with_name(lock.name + _BREAK_SUFFIX)
    try:
        os.link(candidate, guard)
    except FileExistsError:
        breaker = _read_lock(guard)
        if breaker is not None and not _holder_alive(breaker):
            _remove_if_held_by(guard, breaker)  # a breaker that crashed in turn
            return True
        return False
    except OSError as error:
        raise UvsdkError(
            f"cannot lock {lock.parent} ({error.strerror or error})", code="store.io"
        ) from None
    try:
        _remove_if_held_by(lock, stale)
    finally:
        _remove_if_held_by(guard, owner)
    return True


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
    one this platform cannot look up, is taken to). A lock naming this process is alive only
    with a token this process drew: another was left by an earlier process of the same id."""
    fields = holder.split()
    if len(fields) != 3 or not fields[0].isascii() or not fields[0].isdigit():
        return False  # not a lock any uvsdk wrote whole
    process, token, host = fields
    if host != socket.gethostname():
        return True
    if int(process) == os.getpid():
        return token in _OWN_TOKENS
    return _process_exists(int(process))


def _process_exists(process: int) -> bool:
    if process <= 0:
        return False
    if os.name == "nt":  # Windows' os.kill would end the process
        return True
    try:
        os.kill(process, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
