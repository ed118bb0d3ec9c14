"""A zip archive written entry by entry, recording whatever each entry claims: the one writer of
lying archives, used by the bundle vectors (``generators/bundle.py``) and by
``tests/sdk/test_bundle_reading.py``. Standard library only, so a test can load this file alone."""

from __future__ import annotations

import struct
import zipfile
import zlib
from typing import Any


def deflate(data: bytes) -> bytes:
    """Raw deflate (no zlib header), as a zip entry stores it."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


def entry(name: str, content: bytes, **lie: Any) -> dict[str, Any]:
    """A deflated entry for ``content`` with its true size and CRC-32; ``lie`` overrides what the
    archive records (``payload``, ``method``, ``size``, ``crc``, ``flags``, ``compressed``,
    ``repeat``)."""
    truth = {
        "name": name,
        "payload": deflate(content),
        "method": zipfile.ZIP_DEFLATED,
        "size": len(content),
        "crc": zlib.crc32(content),
        "flags": 0,
    }
    return {**truth, **lie}


def raw_zip(entries: list[dict[str, Any]]) -> bytes:
    """The archive of ``entries`` (``name``, ``payload`` as stored, ``method``, declared ``size``,
    ``crc``, ``flags``, optionally the ``compressed`` size declared); an entry with ``repeat`` is
    only a directory entry, pointing at the data of the first entry of its name."""
    local, central = b"", b""
    offsets: dict[bytes, int] = {}
    for item in entries:
        name, payload = item["name"].encode(), item["payload"]
        compressed = item.get("compressed", len(payload))
        fields = (item["flags"], item["method"], 0, 0x21, item["crc"], compressed)
        header = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, *fields, item["size"], len(name), 0)
        at = offsets[name] if item.get("repeat") else len(local)
        central += struct.pack(
            "<4s6H3L5H2L", b"PK\x01\x02", 20, 20, *fields, item["size"], len(name), 0, 0, 0, 0, 0,
            at,
        ) + name  # fmt: skip
        if not item.get("repeat"):
            offsets.setdefault(name, len(local))
            local += header + name + payload
    count = len(entries)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, count, count, len(central), len(local), 0)
    return local + central + end
