"""Issue 33, the reading side: zip entries that lie about their size, and hostile manifest JSON.

Each test performs the attack on the conformance bundles (small) and checks that the refusal is a
:class:`BundleError` that comes before the lie costs anything: the bombs count the bytes the
inflater produces, which must stop at the declared size + 1.
"""

from __future__ import annotations

import importlib.util
import json
import types
import zipfile
import zlib
from pathlib import Path
from typing import Any

import pytest

from uvsdk import archive
from uvsdk.bundle import Bundle
from uvsdk.errors import BundleError

CONFORMANCE = Path(__file__).parents[2] / "conformance" / "bundles"
BOMB_BYTES = 8 * 1024 * 1024  # what the lying entries inflate to beyond their real content


def _load_rawzip() -> types.ModuleType:
    """The conformance generators' zip writer (one copy: ``conformance/generators/rawzip.py``)."""
    path = CONFORMANCE.parent / "generators" / "rawzip.py"
    spec = importlib.util.spec_from_file_location("conformance_rawzip", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rawzip = _load_rawzip()
_deflate, _entry, _zip = rawzip.deflate, rawzip.entry, rawzip.raw_zip


def _members(name: str) -> dict[str, bytes]:
    with zipfile.ZipFile(CONFORMANCE / name) as bundle:
        return {member: bundle.read(member) for member in bundle.namelist()}


def _image_entries(**replaced: dict[str, Any]) -> list[dict[str, Any]]:
    members = _members("image-embedding.uvb")
    return [replaced.get(name) or _entry(name, content) for name, content in members.items()]


@pytest.fixture
def inflated(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bytes each inflater of ``uvsdk.archive`` produced (one count per decompressor)."""
    counts: list[int] = []

    class CountingInflater:
        def __init__(self, *args: Any) -> None:
            self._inner = zlib.decompressobj(*args)
            counts.append(0)
            self._index = len(counts) - 1

        def decompress(self, data: bytes, max_length: int = 0) -> bytes:
            out = self._inner.decompress(data, max_length)
            counts[self._index] += len(out)
            return out

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    spy = types.SimpleNamespace(**{k: getattr(zlib, k) for k in dir(zlib) if not k.startswith("_")})
    spy.decompressobj = CountingInflater
    monkeypatch.setattr(archive, "zlib", spy)
    return counts


def _write(tmp_path: Path, blob: bytes) -> Path:
    path = tmp_path / "attack.uvb"
    path.write_bytes(blob)
    return path


def test_the_hand_written_archive_loads(tmp_path: Path, inflated: list[int]) -> None:
    bundle = Bundle(_write(tmp_path, _zip(_image_entries())))
    assert bundle.manifest.dim == 16
    assert sum(inflated) == sum(len(c) for c in _members("image-embedding.uvb").values())


@pytest.mark.parametrize("member", ["model.onnx", "manifest.json"])
def test_a_member_inflating_past_its_declared_size_is_refused_early(
    tmp_path: Path, inflated: list[int], member: str
) -> None:
    """The declared size and CRC are those of the real content: a reader that stops quietly at
    the declared size would load the bundle; one that inflates everything pays for 8 MiB more."""
    content = _members("image-embedding.uvb")[member]
    lying = _entry(member, content, payload=_deflate(content + bytes(BOMB_BYTES)))
    path = _write(tmp_path, _zip(_image_entries(**{member: lying})))
    with pytest.raises(BundleError, match=f"{member} inflates to more than the {len(content)}"):
        Bundle(path)
    assert max(inflated) <= len(content) + 1


def test_a_small_declared_size_stops_a_large_bomb(tmp_path: Path, inflated: list[int]) -> None:
    """The issue's case: a manifest that declares 1,000 bytes and inflates to far more."""
    lying = _entry("manifest.json", bytes(BOMB_BYTES), size=1000)
    with pytest.raises(BundleError, match="inflates to more than the 1000 bytes"):
        Bundle(_write(tmp_path, _zip(_image_entries(**{"manifest.json": lying}))))
    assert max(inflated) <= 1001


def test_a_member_shorter_than_declared_is_refused(tmp_path: Path) -> None:
    model = _members("image-embedding.uvb")["model.onnx"]
    short = _entry("model.onnx", model, payload=_deflate(model[:-10]))
    with pytest.raises(BundleError, match=f"holds {len(model) - 10} bytes, not the {len(model)}"):
        Bundle(_write(tmp_path, _zip(_image_entries(**{"model.onnx": short}))))


@pytest.mark.parametrize("change", [-4, +4])
def test_a_stored_member_must_hold_its_declared_size(tmp_path: Path, change: int) -> None:
    model = _members("image-embedding.uvb")["model.onnx"]
    payload = model[:change] if change < 0 else model + bytes(change)
    stored = _entry("model.onnx", model, payload=payload, method=zipfile.ZIP_STORED)
    with pytest.raises(BundleError, match="its zip entry declares"):
        Bundle(_write(tmp_path, _zip(_image_entries(**{"model.onnx": stored}))))


@pytest.mark.parametrize(
    ("lie", "message"),
    [
        ({"crc": 12345}, "does not match its zip entry's CRC-32"),
        ({"flags": 1}, "model.onnx is encrypted"),
        ({"method": zipfile.ZIP_BZIP2}, "compression method 12"),
        ({"method": 99}, "compression method 99"),
        ({"payload": b"\xff" * 64}, "not a readable bundle"),
    ],
)
def test_other_lies_of_a_zip_entry_are_bundle_errors(
    tmp_path: Path, lie: dict[str, Any], message: str
) -> None:
    model = _members("image-embedding.uvb")["model.onnx"]
    entry = _entry("model.onnx", model, **lie)
    with pytest.raises(BundleError, match=message):
        Bundle(_write(tmp_path, _zip(_image_entries(**{"model.onnx": entry}))))


def test_a_truncated_deflate_stream_is_refused(tmp_path: Path) -> None:
    model = _members("image-embedding.uvb")["model.onnx"]
    entry = _entry("model.onnx", model)
    entry["payload"] = entry["payload"][: len(entry["payload"]) // 2]
    with pytest.raises(BundleError, match="not a readable bundle"):
        Bundle(_write(tmp_path, _zip(_image_entries(**{"model.onnx": entry}))))


def test_the_cli_refuses_a_bomb_in_one_line(tmp_path: Path) -> None:
    from .test_sdk_attacks import one_line_error, uvsdk

    lying = _entry("model.onnx", bytes(BOMB_BYTES), size=1000)
    path = _write(tmp_path, _zip(_image_entries(**{"model.onnx": lying})))
    one_line_error(uvsdk("info", "--bundle", path, "--store", tmp_path / "s"), "inflates")


# -- hostile JSON in manifest.json ------------------------------------------------------------


def _voice_manifest_bundle(tmp_path: Path, text: str) -> Path:
    """The voice-embedding bundle (calibrated) with ``text`` as its manifest, unsigned."""
    members = _members("voice-embedding.uvb")
    members["manifest.json"] = text.encode()
    del members["signature.ed25519"]
    path = tmp_path / "hostile.uvb"
    with zipfile.ZipFile(path, "w") as bundle:
        for name, content in members.items():
            bundle.writestr(name, content)
    return path


def _manifest_text() -> str:
    return _members("voice-embedding.uvb")["manifest.json"].decode()


def _with_key(value: str) -> str:
    """The manifest with an unknown member ``extra`` whose JSON text is ``value``."""
    text = _manifest_text().rstrip()
    assert text.endswith("}")
    return text[:-1] + f', "extra": {value}}}'


def _nested(levels: int) -> str:
    """A value whose brackets nest ``levels`` deep inside the manifest (itself one level)."""
    return "[" * (levels - 1) + "]" * (levels - 1)


HUGE_COUNT = "1" + "0" * 400


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_manifest_text().replace('"people": ', f'"people": {HUGE_COUNT}, "was": ', 1), "number"),
        (
            _manifest_text().replace(
                '"impostor_trials": ', f'"impostor_trials": {HUGE_COUNT}, "x": ', 1
            ),
            "number",
        ),
        (_with_key("9" * 4301), "number"),
        (_with_key(str(2**53)), "integer"),
        (_with_key(str(-(2**53))), "integer"),
        (_with_key("0." + "1" * 63), "number"),
        (_with_key(_nested(65)), "nested"),
        (_with_key(_nested(100_000)), "nested"),
    ],
)
def test_hostile_manifest_json_is_a_bundle_error(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(BundleError, match=f"manifest.json is not valid JSON .*{message}"):
        Bundle(_voice_manifest_bundle(tmp_path, text))


@pytest.mark.parametrize(
    "value",
    [
        str(2**53 - 1),
        str(-(2**53 - 1)),
        "0." + "1" * 62,
        "1e400",
        _nested(64),
        '"' + "[" * 100 + '"',
        '"\\"' + "{" * 100 + '"',
    ],
)
def test_json_at_the_limits_is_accepted(tmp_path: Path, value: str) -> None:
    bundle = Bundle(_voice_manifest_bundle(tmp_path, _with_key(value)))
    assert bundle.manifest.calibration is not None
    assert json.dumps(bundle.manifest.extra["extra"], allow_nan=True)
