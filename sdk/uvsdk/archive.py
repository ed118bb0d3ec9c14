"""Bounded reading of a bundle's zip members: no entry may cost more than it declares.

The zip directory states each entry's inflated size; nothing makes the deflate stream agree. A
reader that inflates whole entries pays for whatever the stream holds (a 2 MB archive can inflate
to gigabytes), and one that stops quietly at the declared size reads a bundle whose entries lie.
Here every entry is inflated in bounded steps, stopping as soon as it yields one byte more than it
declares, and it must yield exactly its declared size, end its deflate stream and match its CRC-32
(spec §3.1). Entries are read from the offsets of the zip directory that :mod:`zipfile` parses.

The zip directory may also name one member twice, or point many entries at one member's data: 8
entries of one honest 500 MiB member cost 74 s and 1.6 GB before any signature check (issue 46).
So the names read must be unique (an archive naming a member twice is refused before anything is
read), each entry's local header must name it, and its data must lie within the archive: every
member is read once, and what reading costs is bounded by the sum of the limits.
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from collections.abc import Mapping
from typing import BinaryIO

from .errors import BundleError

LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # signature, versions ... name length, extra length
LOCAL_SIGNATURE = b"PK\x03\x04"
READ_BYTES = 64 * 1024  # compressed bytes read from the archive at a time
ENCRYPTED = 0x1  # general-purpose flag bit 0
UTF8_NAME = 0x800  # general-purpose flag bit 11: the name is UTF-8, not code page 437


def read_zip_members(handle: BinaryIO, limits: Mapping[str, int], bundle: str) -> dict[str, bytes]:
    """The members of the zip archive ``handle`` named in ``limits``, each checked and bounded.

    Parameters
    ----------
    handle
        The archive, open for binary reading and seekable.
    limits
        The largest size accepted for each member read; other members are ignored.
    bundle
        What messages call the archive.

    Returns
    -------
    dict
        The content of each member present.

    Raises
    ------
    BundleError
        A member named twice, over its limit, encrypted, neither stored nor deflated, whose data
        run past the end of the archive, whose content is not its declared size or does not
        match its CRC-32.
    zipfile.BadZipFile, zlib.error, EOFError
        An archive that cannot be read (the caller reports them as one).
    """
    members: dict[str, bytes] = {}
    with zipfile.ZipFile(handle) as archive:
        entries = [info for info in archive.infolist() if info.filename in limits]
    seen: set[str] = set()
    for info in entries:  # one pass: a directory may hold 100,000 entries of one name
        if info.filename in seen:
            raise BundleError(
                f"{bundle}: the zip directory names {info.filename} more than once (a bundle's "
                "members are unique)",
                code="bundle.unreadable",
            )
        seen.add(info.filename)
    size = handle.seek(0, 2)
    for info in entries:
        _check_entry(info, limits[info.filename], bundle)
        start = _data_offset(handle, info)
        if start + info.compress_size > size:
            raise BundleError(
                f"{bundle}: {info.filename}'s zip entry declares {info.compress_size} compressed "
                "bytes, more than the archive holds after it (damaged?)",
                code="bundle.unreadable",
            )
        handle.seek(start)
        if info.compress_type == zipfile.ZIP_STORED:
            content = _read_stored(handle, info, bundle)
        else:
            content = _inflate_bounded(handle, info, bundle)
        if zlib.crc32(content) != info.CRC:
            raise BundleError(
                f"{bundle}: {info.filename} does not match its zip entry's CRC-32 (damaged)",
                code="bundle.unreadable",
            )
        members[info.filename] = content
    return members


def too_large(bundle: str, member: str, size: int, limit: int) -> str:
    """The message refusing ``member`` of ``size`` bytes, over its ``limit``."""
    return f"{bundle}: {member} is {size} bytes, more than the {limit} accepted (not a bundle?)"


def _check_entry(info: zipfile.ZipInfo, limit: int, bundle: str) -> None:
    """What the zip directory says of an entry, checked before any of it is read."""
    if info.file_size > limit:
        raise BundleError(
            too_large(bundle, info.filename, info.file_size, limit), code="bundle.unreadable"
        )
    if info.flag_bits & ENCRYPTED:
        raise BundleError(
            f"{bundle}: {info.filename} is encrypted (a bundle's members are not)",
            code="bundle.unreadable",
        )
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise BundleError(
            f"{bundle}: {info.filename} uses zip compression method {info.compress_type} "
            "(a bundle's members are stored or deflated)",
            code="bundle.unreadable",
        )


def _data_offset(handle: BinaryIO, info: zipfile.ZipInfo) -> int:
    """Where the entry's data start: after its local header, which must name it."""
    handle.seek(info.header_offset)
    header = handle.read(LOCAL_HEADER.size)
    if len(header) != LOCAL_HEADER.size:
        raise EOFError("a local header is cut short")
    signature, *_, name_length, extra_length = LOCAL_HEADER.unpack(header)
    if signature != LOCAL_SIGNATURE:
        raise zipfile.BadZipFile(f"bad local header of {info.filename}")
    encoding = "utf-8" if info.flag_bits & UTF8_NAME else "cp437"
    if handle.read(name_length) != info.orig_filename.encode(encoding):
        raise zipfile.BadZipFile(f"the local header of {info.filename} names another file")
    return info.header_offset + LOCAL_HEADER.size + name_length + extra_length


def _size_mismatch(bundle: str, info: zipfile.ZipInfo, size: int) -> BundleError:
    return BundleError(
        f"{bundle}: {info.filename} holds {size} bytes, not the {info.file_size} "
        "its zip entry declares (damaged?)",
        code="bundle.unreadable",
    )


def _read_stored(handle: BinaryIO, info: zipfile.ZipInfo, bundle: str) -> bytes:
    """A stored entry: its stored size must be its declared size."""
    if info.compress_size != info.file_size:
        raise _size_mismatch(bundle, info, info.compress_size)
    content = handle.read(info.file_size)
    if len(content) != info.file_size:
        raise EOFError(f"{info.filename} is cut short")
    return content


def _inflate_bounded(handle: BinaryIO, info: zipfile.ZipInfo, bundle: str) -> bytes:
    """A deflated entry, inflated never more than one byte past its declared size."""
    declared = info.file_size
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    parts: list[bytes] = []
    produced, left = 0, info.compress_size
    while left > 0 and not inflater.eof:
        pending = handle.read(min(READ_BYTES, left))
        if not pending:
            raise EOFError(f"{info.filename} is cut short")
        left -= len(pending)
        while pending and not inflater.eof:
            part = inflater.decompress(pending, declared + 1 - produced)
            produced += len(part)
            if produced > declared:
                raise BundleError(
                    f"{bundle}: {info.filename} inflates to more than the {declared} bytes its "
                    "zip entry declares (not a bundle?)",
                    code="bundle.unreadable",
                )
            parts.append(part)
            pending = inflater.unconsumed_tail
    if not inflater.eof:
        raise EOFError(f"the deflate stream of {info.filename} is cut short")
    if produced != declared:
        raise _size_mismatch(bundle, info, produced)
    return b"".join(parts)
