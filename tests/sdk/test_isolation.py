"""The SDK stays light: a full enroll + verify loads no torch, galois, onnx, trainer or exporter."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..conftest import PASSPHRASE, enrolled_clip, enrollment_dir
from ..processes import run_until_stalled

FORBIDDEN = ("torch", "galois", "numba", "onnx", "uvtrain", "uvexport", "torchaudio", "torchvision")

SCRIPT = """
import json, sys
from uvsdk import Verifier
verifier = Verifier(sys.argv[1], store=sys.argv[2], passphrase=sys.argv[5])
if verifier.bundle.manifest.code is not None:
    verifier.new_codeword()  # codeword mode: the codeword is made on the device
report = verifier.enroll(sys.argv[3])
decision = verifier.verify(sys.argv[4])
loaded = sorted({name.split(".")[0] for name in sys.modules})
print(json.dumps({"mode": report.mode, "used": report.used, "modules": loaded}))
"""


def test_enroll_and_verify_load_nothing_heavy(
    initial_codeword_bundle: Path, spectral_bundle: Path, voice_dir: Path, tmp_path: Path
) -> None:
    store, samples = tmp_path / "store", enrollment_dir(voice_dir, 5, tmp_path)
    clip = enrolled_clip(voice_dir, 5)
    modes = []
    for bundle in (spectral_bundle, initial_codeword_bundle):
        args = [
            sys.executable,
            "-c",
            SCRIPT,
            bundle,
            store / bundle.stem,
            samples,
            clip,
            PASSPHRASE,
        ]
        output = run_until_stalled(args, stall_seconds=300, check=True)
        result = json.loads(output.stdout)
        assert result["used"] == 6
        assert not set(FORBIDDEN) & set(result["modules"]), result["modules"]
        assert "onnxruntime" in result["modules"]  # the check is real: the model did run
        modes.append(result["mode"])
    assert modes == ["prototype", "codeword"]


def test_no_heavy_import_in_sdk_sources() -> None:
    sources = Path(__file__).resolve().parents[2] / "sdk" / "uvsdk"
    for path in sources.rglob("*.py"):
        for line in path.read_text().splitlines():
            words = line.split()
            if words[:1] in (["import"], ["from"]) and len(words) > 1:
                assert words[1].split(".")[0] not in FORBIDDEN, f"{path.name}: {line.strip()}"
