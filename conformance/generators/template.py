"""``vectors/template.json``: the encrypted template, UVT2 (spec §10)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from uvsdk import backoff as backoff_rules
from uvsdk import template as templates
from uvsdk.freshness import FileFreshness

from .shared import b64, bits, document, f32, outcome

PASSPHRASE = "correct horse battery staple"


def _seal(
    payload: bytes,
    passphrase: str,
    salt: bytes,
    nonce: bytes,
    log2_n: int,
    secret: bytes | None = None,
) -> tuple[bytes, bytes]:
    """The file the SDK writes (TemplateStore.save's bytes), with the salt and nonce given."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    key = templates._scrypt(secret or templates.passphrase_bytes(passphrase), salt, log2_n, 8, 1)
    header = templates._Header(1, log2_n, 8, 1, salt, templates._key_check(key), nonce)
    aad = header.pack()
    return aad + AESGCM(key).encrypt(nonce, payload, aad), key


def _open(blob: bytes, passphrase: str, user: str, record: int | None = None) -> dict[str, Any]:
    """Open the bytes with the SDK's own TemplateStore.load; the payload, or the error code."""
    with tempfile.TemporaryDirectory() as folder:
        store_dir = Path(folder) / "store"
        store_dir.mkdir(mode=0o700)
        (store_dir / f"{user}.uvt").write_bytes(blob)
        (store_dir / f"{user}.uvt").chmod(0o600)
        freshness = FileFreshness(Path(folder) / "state")
        if record is not None:
            freshness.set(blob[8:24], record)
        store = templates.TemplateStore(store_dir, passphrase=passphrase, freshness=freshness)
        loaded, error = outcome(lambda: store.load(user))
    if error is None:
        return {"ok": True, "generation": loaded.generation, "cohort": loaded.cohort}
    return {"ok": False, "error": error.code}


_FLOATS = ("created", "threshold", "target_tpr", "far", "enrolled")
_ORDER = ("version", "generation", "user", "created", "codeword", "codeword_length", "user_id",
          "code_sha256", "mode", "prototype", "threshold", "target_tpr", "far", "calibration",
          "cohort", "model_sha256", "enrolled", "samples", "policy", "backoff")  # fmt: skip


def _json_dumps_spelling(payload: bytes) -> bytes:
    """The payload as the SDK spelt it before spec version 7: ``json.dumps`` of the members in
    the order of docs/spec.md §10.5, floats written as floats (``1700000000.0``)."""
    data = json.loads(payload)
    ordered = {key: data[key] for key in _ORDER}
    for key in _FLOATS:
        ordered[key] = None if ordered[key] is None else float(ordered[key])
    policy = ordered["policy"]
    for key in ("base_seconds", "factor", "max_seconds"):
        policy[key] = float(policy[key])
    ordered["backoff"]["locked_until"] = float(ordered["backoff"]["locked_until"])
    return json.dumps(ordered, separators=(",", ":"), allow_nan=False).encode()


def _rehash(blob: bytearray) -> bytearray:
    """Recompute the header digest (as an attacker who edits the header would)."""
    blob[40:48] = hashlib.sha256(bytes(blob[:40])).digest()[:8]
    return blob


def generate() -> dict[str, Any]:
    prototype_template = templates.Template(
        user="alice",
        created=1700000000.0,
        mode="prototype",
        prototype=np.linspace(-0.5, 0.5, 40, dtype=np.float32) / np.float32(1.8),
        threshold=0.7158535914832873,
        target_tpr=0.95,
        far=0.01,
        calibration="0" * 64,
        model_sha256="ab" * 32,
        enrolled=1700000100.5,
        samples=6,
        generation=3,
    )
    codeword_bits = np.array([int(b) for b in "10110011" * 15 + "1011001"], np.uint8)
    codeword_template = templates.Template(
        user="bob.smith-2",
        created=1700000000.25,
        codeword=codeword_bits,
        user_id=7,
        code_sha256="cd" * 32,
        mode="codeword",
        threshold=0.5,
        target_tpr=0.9,
        model_sha256="ef" * 32,
        enrolled=1700000200.0,
        samples=5,
        policy=backoff_rules.BackoffPolicy(
            attempts=3, base_seconds=10.0, factor=3.0, max_seconds=600.0
        ),
        backoff=backoff_rules.BackoffState(failures=2, locked_until=0.0),
        generation=9,
    )
    # prototype mode against a bundle's cohort: the payload records its score scale (spec §3.9)
    cohort_template = dataclasses.replace(
        prototype_template,
        user="carol",
        threshold=2.375,
        cohort="c0" * 32,
        generation=1,
    )
    seal_cases = []
    files = {}
    for name, tmpl, passphrase, log2_n, secret in [
        ("prototype-alice", prototype_template, PASSPHRASE, 10, None),
        ("codeword-bob", codeword_template, "pässwörd ünïcode", 10, None),
        ("prototype-cohort-carol", cohort_template, PASSPHRASE, 10, None),
        ("default-cost", prototype_template, PASSPHRASE, 15, None),
        (
            "nfkc-composed",
            prototype_template,
            "\u00c5ngstr\u00f6m \uff50\uff41\uff53\uff53",
            10,
            None,
        ),
    ]:
        salt = hashlib.sha256(f"salt {name}".encode()).digest()[:16]
        nonce = hashlib.sha256(f"nonce {name}".encode()).digest()[:12]
        payload = tmpl.to_payload()
        blob, key = _seal(payload, passphrase, salt, nonce, log2_n, secret)
        files[name] = (blob, passphrase, tmpl.user)
        seal_cases.append(
            {
                "name": name,
                "passphrase": passphrase,
                "salt_hex": salt.hex(),
                "nonce_hex": nonce.hex(),
                "log2_n": log2_n,
                "payload": payload.decode("utf-8"),
                "key_hex": key.hex(),
                "file_b64": b64(blob),
            }
        )
        assert _open(blob, passphrase, tmpl.user)["ok"], name
    fields = []
    for name, tmpl in (
        ("prototype-alice", prototype_template),
        ("codeword-bob", codeword_template),
        ("prototype-cohort-carol", cohort_template),
    ):
        parsed = templates.Template.from_payload(tmpl.to_payload())
        fields.append(
            {
                "name": name,
                "user": parsed.user,
                "mode": parsed.mode,
                "codeword": None if parsed.codeword is None else bits(parsed.codeword),
                "prototype": None if parsed.prototype is None else f32(parsed.prototype),
                "threshold": parsed.threshold,
                "cohort": parsed.cohort,
                "generation": parsed.generation,
                "policy": dataclasses.asdict(parsed.policy),
                "backoff": dataclasses.asdict(parsed.backoff),
            }
        )

    good, passphrase, user = files["prototype-alice"]
    nfkc, nfkc_pass, _ = files["nfkc-composed"]
    malformed, _ = _seal(b'{"version": 2, "generation": 1', PASSPHRASE, bytes(16), bytes(12), 10)

    def sealed(text: bytes) -> bytes:
        return _seal(text, PASSPHRASE, bytes(16), bytes(12), 10)[0]

    payload = prototype_template.to_payload()
    assert b'"version":3}' in payload and b'"cohort":null,' in payload
    # what the SDK wrote before spec version 7 (json.dumps: insertion order, floats as 30.0)
    json_dumps_spelling = sealed(_json_dumps_spelling(payload))

    wrong_version = sealed(payload.replace(b'"version":3', b'"version":7'))
    # payload version 2 (written before cohorts): no cohort member, read as null
    version_2 = sealed(
        payload.replace(b'"version":3', b'"version":2').replace(b'"cohort":null,', b"")
    )
    # version 2 with a cohort member: ignored (read from version 3 only)
    version_2_cohort = sealed(
        payload.replace(b'"version":3', b'"version":2').replace(b'"cohort":null', b'"cohort":7')
    )
    no_cohort = sealed(payload.replace(b'"cohort":null,', b""))
    short_cohort = sealed(payload.replace(b'"cohort":null', b'"cohort":"' + b"c0" * 31 + b'"'))
    number_cohort = sealed(payload.replace(b'"cohort":null', b'"cohort":1'))

    def edit(position: int, value: int | None = None, rehash: bool = False) -> bytes:
        blob = bytearray(good)
        blob[position] = (blob[position] ^ 0x01) if value is None else value
        return bytes(_rehash(blob) if rehash else blob)

    opens = [
        ("valid", good, passphrase, user, None),
        ("nfkc-decomposed-passphrase", nfkc, "A\u030angstro\u0308m pass", user, None),
        ("nfkc-fullwidth-as-typed", nfkc, nfkc_pass, user, None),
        ("wrong-passphrase", good, passphrase + "!", user, None),
        ("too-short", good[:30], passphrase, user, None),
        ("header-only", good[:64], passphrase, user, None),
        ("bad-magic", b"UVT9" + good[4:], passphrase, user, None),
        ("salt-edited", edit(10), passphrase, user, None),
        ("salt-edited-digest-recomputed", edit(10, rehash=True), passphrase, user, None),
        ("check-edited-digest-recomputed", edit(30, rehash=True), passphrase, user, None),
        ("log2n-17-digest-recomputed", edit(5, 17, rehash=True), passphrase, user, None),
        ("log2n-9-digest-recomputed", edit(5, 9, rehash=True), passphrase, user, None),
        ("r-edited-digest-recomputed", edit(6, 9, rehash=True), passphrase, user, None),
        ("kdf-3-digest-recomputed", edit(4, 3, rehash=True), passphrase, user, None),
        ("nonce-edited", edit(50), passphrase, user, None),
        ("ciphertext-edited", edit(100), passphrase, user, None),
        ("tag-edited", edit(len(good) - 1), passphrase, user, None),
        ("truncated-tag", good[:-1], passphrase, user, None),
        ("malformed-payload", malformed, PASSPHRASE, "alice", None),
        ("unknown-payload-version", wrong_version, PASSPHRASE, "alice", None),
        ("payload-json-dumps-spelling", json_dumps_spelling, PASSPHRASE, "alice", None),
        ("payload-version-2", version_2, PASSPHRASE, "alice", None),
        ("payload-version-2-cohort-ignored", version_2_cohort, PASSPHRASE, "alice", None),
        ("payload-version-3-without-cohort", no_cohort, PASSPHRASE, "alice", None),
        ("payload-cohort-not-a-sha256", short_cohort, PASSPHRASE, "alice", None),
        ("payload-cohort-a-number", number_cohort, PASSPHRASE, "alice", None),
        ("another-user", good, passphrase, "mallory", None),
        ("rolled-back", good, passphrase, user, 4),
        ("record-equal", good, passphrase, user, 3),
    ]
    open_cases = []
    for name, blob, words, who, record in opens:
        result = _open(blob, words, who, record)
        open_cases.append(
            {
                "name": name,
                "file_b64": b64(blob),
                "passphrase": words,
                "user": who,
                "generation_record": record,
                **result,
            }
        )
    key_check = templates._key_check(bytes(range(32))).hex()
    return document(
        "template",
        "The UVT2 file: seal (passphrase, salt, nonce, scrypt cost, payload -> file bytes), "
        "the payload's fields, and opening (file, passphrase, the user it is opened as, the "
        "generation recorded outside the file -> ok with the generation and the payload's "
        "cohort, or the error code); payloads are written as version 3 (with `cohort`) in RFC 8785 "
        "canonical JSON, any other spelling is read (payload-json-dumps-spelling: what the SDK "
        "wrote before spec version 7), and versions 1 and 2 are read (cohort null); user names, "
        "valid or the error code "
        "(spec §10).",
        key_check_example={"key_hex": bytes(range(32)).hex(), "check_hex": key_check},
        seal=seal_cases,
        fields=fields,
        open=open_cases,
        user_names=_user_names(),
    )


def _user_names() -> list[dict[str, Any]]:
    """User names (spec §10.1): valid, or the error code (``store.user-name``; issue 46: the
    reference said ``store.io``)."""
    store = templates.TemplateStore(Path(tempfile.gettempdir()) / "uvsdk-conformance-names")
    names = ["alice", "bob.smith-2", "A", "9" * 64, "9" * 65, "", ".alice", "-x", "al ice",
             "al/ice", "../alice", "alice\n", "ålice", "alice.uvt"]  # fmt: skip
    cases = []
    for name in names:
        _, error = outcome(lambda n=name: store.path(n))
        cases.append(
            {"user": name, "valid": error is None, **({"error": error.code} if error else {})}
        )
    return cases
