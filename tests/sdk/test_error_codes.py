"""Error codes (docs/spec.md §14): one table, the same in the spec, the Python SDK and the
TypeScript port; every code raised somewhere, every raised code in the table."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from uvsdk.errors import (
    ERROR_CODES,
    BundleError,
    LockedOutError,
    MediaError,
    SignatureError,
    UvsdkError,
    WrongKeyError,
)
from uvsdk.template import Template, TemplateStore

from ..conftest import PASSPHRASE

ROOT = Path(__file__).parents[2]
PYTHON_SOURCES = sorted((ROOT / "sdk" / "uvsdk").glob("*.py"))
TYPESCRIPT_SOURCES = sorted((ROOT / "js" / "src").glob("*.ts"))


def _spec_codes() -> list[str]:
    """The codes of the spec's error table, in its order."""
    text = (ROOT / "docs" / "spec.md").read_text()
    section = text.split("## 14. Errors", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z-]+\.[a-z-]+)` \|", section, flags=re.MULTILINE)


def _typescript_codes() -> list[str]:
    text = (ROOT / "js" / "src" / "errors.ts").read_text()
    listing = text.split("export const ERROR_CODES = [", 1)[1].split("] as const", 1)[0]
    return re.findall(r'"([^"]+)"', listing)


def _quoted_codes(paths: list[Path]) -> set[str]:
    """Every string literal in the sources that looks like an error code."""
    found = set()
    for path in paths:
        found |= set(re.findall(r"""["']([a-z]+\.[a-z]+(?:-[a-z]+)*)["']""", path.read_text()))
    prefixes = {code.split(".")[0] for code in ERROR_CODES}
    file_names = {"bundle.uvb"}  # a default file name, not a code
    return {code for code in found if code.split(".")[0] in prefixes} - file_names


def test_the_spec_python_and_typescript_list_the_same_codes_in_the_same_order() -> None:
    assert len(set(ERROR_CODES)) == len(ERROR_CODES)
    assert _spec_codes() == list(ERROR_CODES)
    assert _typescript_codes() == list(ERROR_CODES)


@pytest.mark.parametrize("sources", [PYTHON_SOURCES, TYPESCRIPT_SOURCES], ids=["python", "ts"])
def test_every_code_in_the_sources_is_in_the_table_and_every_other_code_is_raised(
    sources: list[Path],
) -> None:
    quoted = _quoted_codes(sources)
    assert quoted - set(ERROR_CODES) == set()
    # media codes come from MediaError's reason (media.too-short: reason "too_short")
    unused = {code for code in ERROR_CODES if code not in quoted}
    reasons = {"media." + reason.replace("_", "-") for reason in _quoted_reasons(sources)}
    assert unused - reasons == set()


def _quoted_reasons(paths: list[Path]) -> set[str]:
    found = set()
    for path in paths:
        found |= set(re.findall(r"""["']([a-z_]+)["']""", path.read_text()))
    return found


def test_a_code_comes_from_the_class_or_the_raise_site() -> None:
    assert BundleError("x").code == "bundle.manifest"
    assert BundleError("x", code="bundle.model").code == "bundle.model"
    assert SignatureError("x").code == "bundle.signature"
    assert MediaError("x", "too_short").code == "media.too-short"
    assert LockedOutError("x", until=5.0).code == "verify.locked-out"


def test_an_error_without_a_code_or_with_an_unknown_one_is_a_bug() -> None:
    with pytest.raises(TypeError, match="needs an error code"):
        UvsdkError("x")
    with pytest.raises(TypeError, match="needs an error code"):
        BundleError("x", code="bundle.no-such-code")


def _header_edited_with_its_digest_recomputed(path: Path, offset: int) -> bytes:
    blob = bytearray(path.read_bytes())
    blob[offset] ^= 0x01
    blob[40:48] = hashlib.sha256(bytes(blob[:40])).digest()[:8]
    path.write_bytes(bytes(blob))
    return bytes(blob)


@pytest.mark.parametrize("offset", [8, 23, 24, 39])  # the salt's and the key check's bytes
def test_an_edited_header_with_its_digest_recomputed_reads_as_a_wrong_passphrase(
    tmp_path: Path, offset: int
) -> None:
    """What docs/sdk.md's threat model states: the key derives from the header's salt and the
    key check is in it, so whoever edits them and recomputes the unkeyed digest makes every
    passphrase wrong; the file is still refused, and left as it was."""
    path = TemplateStore(tmp_path, passphrase=PASSPHRASE, scrypt_log2_n=10).save(
        Template(user="alice", created=0.0)
    )
    edited = _header_edited_with_its_digest_recomputed(path, offset)
    with pytest.raises(WrongKeyError) as caught:
        TemplateStore(tmp_path, passphrase=PASSPHRASE).load("alice")
    assert caught.value.code == "template.wrong-passphrase"
    assert path.read_bytes() == edited
