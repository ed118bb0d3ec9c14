"""On CUDA, every training path computes what it computes on the CPU (``gpu``-marked: skipped
without CUDA, run on a GPU machine with ``python -m pytest -m gpu``).

Each case trains a tiny run twice from the same seed, on ``--device cpu`` and ``--device cuda``,
through the same command a user runs, and compares the final checkpoints: the batched vmap path
(FedUV, FedHide, FedAwS, softmax), local epochs (clients with different step counts), the
per-client DP path, and the cross-silo trainer (FedFace). The data, the batches and the noise
are drawn on the CPU from the seed, so the two devices see the same numbers and differ only in
float32 arithmetic.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from uvtrain.checkpoints import read_checkpoint  # noqa: E402
from uvtrain.cli import app  # noqa: E402
from uvtrain.data.base import FederatedDataset  # noqa: E402
from uvtrain.data.stream import write_stream_folder  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

TINY = ["--clients", "8", "--fraction", "0.5", "--batch-size", "4"]
CASES = {
    "feduv": ["--method", "feduv"],
    "fedhide": ["--method", "fedhide"],
    "fedaws": ["--method", "fedaws"],
    "softmax": ["--method", "softmax"],
    "feduv-local-epochs": ["--method", "feduv", "--local-epochs", "1"],
    "feduv-dp": ["--method", "feduv", "--dp", "central", "--dp-epsilon", "50"],
    # an LSTM under DP: cuDNN's LSTM cannot run under vmap, so CUDA takes the loop
    "ge2e-dp": [
        "--method",
        "feduv",
        "--backbone",
        "ge2e-lstm",
        "--dp",
        "central",
        "--dp-epsilon",
        "50",
    ],  # fmt: skip
    "fedface": ["--method", "fedface", "--parties", "2", "--validators", "1"],
}


def _train(
    args: list[str], device: str, out: Path, data: Path, dataset: str = "formant-voices"
) -> dict:
    result = CliRunner().invoke(
        app,
        ["run", "--dataset", dataset, *TINY, *args, "--rounds", "3", "--device", device,
         "--out", str(out)],
        env={"UVTRAIN_DATA": str(data)},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    if dataset != "formant-voices":
        assert "streamed from disk" in result.stderr, result.stderr
    return read_checkpoint(out / "checkpoint.pt")


@pytest.fixture
def float32_on_cuda():
    """Plain float32 on CUDA: cuDNN's convolutions default to TF32 on Ampere and later (10-bit
    mantissas), which is not the arithmetic the CPU run does; the first H100 run of this test
    (2026-11-26) failed every case at the first convolution's weights."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_cuda_run_matches_the_cpu_run(case: str, tmp_path: Path, float32_on_cuda) -> None:
    cpu = _train(CASES[case], "cpu", tmp_path / "cpu", tmp_path / "data")
    cuda = _train(CASES[case], "cuda", tmp_path / "cuda", tmp_path / "data")
    _assert_same_parameters(case, cpu, cuda)


def test_a_streamed_run_on_cuda_matches_the_cpu_run(tmp_path: Path, float32_on_cuda) -> None:
    """Samples kept on disk (a stream folder, memory-mapped) stay on the host and each round's
    drawn batches move to the GPU (``uvtrain.engine``'s HostSamples): the CUDA run from the
    folder trains what the CPU run from the in-memory ``.npz`` trains."""
    data = tmp_path / "data"
    cpu = _train(CASES["feduv"], "cpu", tmp_path / "cpu", data)
    (npz,) = data.glob("formant-voices-*.npz")
    folder = write_stream_folder(FederatedDataset.load(npz), tmp_path / "voices.stream")
    cuda = _train(CASES["feduv"], "cuda", tmp_path / "cuda", data, dataset=str(folder))
    _assert_same_parameters("feduv-streamed", cpu, cuda)


def _assert_same_parameters(case: str, cpu: dict, cuda: dict) -> None:
    params = cpu.get("params") or cpu.get("backbone") or cpu
    assert isinstance(params, dict) and params, f"no parameters in the {case} checkpoint"
    other = cuda.get("params") or cuda.get("backbone") or cuda
    for name, value in params.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            largest = float((other[name].cpu() - value).abs().max())
            torch.testing.assert_close(other[name], value, rtol=1e-3, atol=1e-4,
                                       msg=f"{name}: largest difference {largest:.3g}")  # fmt: skip
