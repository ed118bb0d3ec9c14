"""What a malicious device can send the Flower server (issue 46): every reply is checked and its
message bounded before anything of it is read; a reply that is not what the method's device
sends stops the round in one line, the checkpoint intact (docs/deploy.md, "Malicious devices")."""

from __future__ import annotations

import io
import tracemalloc
import zipfile

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from tests.deploy.test_deploy import _replies, _server  # noqa: E402
from uvdeploy.errors import DeploymentError  # noqa: E402
from uvdeploy.settings import ArraySpec, pack, unpack, view_spec  # noqa: E402


def npz(members: dict[str, tuple[dict, bytes]], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    """An ``.npz`` written by hand: each member a ``.npy`` header declaring any shape, then the
    data given (which need not agree with it)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, (header, data) in members.items():
            with archive.open(name, "w", force_zip64=True) as member:
                head = io.BytesIO()
                np.lib.format.write_array_header_1_0(head, header)
                member.write(head.getvalue() + data)
    return buffer.getvalue()


def zeros_npz(name: str, count: int) -> bytes:
    """An honest ``.npz`` of ``count`` float64 zeros, deflated, streamed in 1 MiB pieces (2^24
    zeros: 128 MiB in 130 kB, never held at once)."""
    buffer = io.BytesIO()
    header = {"descr": "<f8", "fortran_order": False, "shape": (count,)}
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, header)
    with (
        zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open(f"{name}.npy", "w", force_zip64=True) as member,
    ):
        member.write(head.getvalue())
        chunk, left = bytes(1 << 20), count * 8
        while left > 0:
            member.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)
    return buffer.getvalue()


def _round_with(server, message_of_12: bytes | None = None, **changes):
    """A plain FedHide round in which device 12's reply carries ``message_of_12`` (or its
    count, loss or update changed by ``changes``)."""
    deltas = [{k: 0.1 * torch.randn_like(v) for k, v in server.params.items()} for _ in range(3)]
    proxies = [{"proxy": torch.nn.functional.normalize(torch.randn(8), dim=0)} for _ in range(3)]
    replies = _replies(server, deltas, proxies)
    at = replies.node_ids.index(12)
    if message_of_12 is not None:
        replies.metrics[at]["message"] = message_of_12
    if "count" in changes:
        replies.counts[at] = changes["count"]
    if "loss" in changes:
        replies.metrics[at]["loss"] = changes["loss"]
    if "update" in changes:
        replies.updates[at] = changes["update"]
    server._send = lambda instructions, number: replies
    return server.advance(server.plan(1), server).metrics


def _fedhide():
    return _server({"method": "fedhide"}, {11: 4, 12: 6, 13: 2})


def test_a_message_that_inflates_to_128_mib_is_refused_before_it_is_inflated() -> None:
    """The attack: a small npz of zeros that the old ``np.load`` inflated whole (2^28 zeros in
    2 MB cost the server 4.4 GB and 15 s). Refused from its size alone; the reader's peak
    memory stays far below one honest model."""
    server = _fedhide()
    before = {k: v.clone() for k, v in server.params.items()}
    bomb = zeros_npz("proxy", 1 << 24)
    assert len(bomb) < 200_000
    tracemalloc.start()
    try:
        with pytest.raises(DeploymentError) as caught:
            _round_with(server, bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith("round 1: device 12's reply's message: ")
    assert "more than the" in line and line.endswith("stopped (the last checkpoint is intact)")
    assert peak < 8 * 1024 * 1024
    for name, value in before.items():  # nothing of the round was applied
        assert torch.equal(server.params[name], value)


def test_a_message_declaring_more_than_it_can_hold_is_refused_from_its_zip_entry() -> None:
    """Small enough in bytes (2^16 zeros deflate to 600 bytes) but declaring 512 kB: refused
    from the zip directory, before any of it is inflated."""
    bomb = zeros_npz("proxy", 1 << 16)
    with pytest.raises(DeploymentError, match=r"proxy\.npy declares 524416 bytes, more than"):
        _round_with(_fedhide(), bomb)


@pytest.mark.parametrize(
    ("header", "data", "problem"),
    [
        ({"descr": "<f4", "fortran_order": False, "shape": (1 << 40,)}, b"", "shape"),
        ({"descr": "<f4", "fortran_order": False, "shape": (9,)}, bytes(36), "shape"),
        ({"descr": "<f8", "fortran_order": False, "shape": (8,)}, bytes(64), "float64"),
        ({"descr": "|O", "fortran_order": False, "shape": (8,)}, bytes(64), "object"),
        ({"descr": "<f4", "fortran_order": False, "shape": (8,)}, bytes(16), "bytes of data"),
    ],
    ids=["2^40-entries", "wrong-shape", "wrong-dtype", "pickled-objects", "cut-short"],
)
def test_a_message_whose_array_is_not_the_methods_is_refused_from_its_header(
    header: dict, data: bytes, problem: str
) -> None:
    """The ``.npy`` header is read and checked against the method's message (FedHide: one
    float32 proxy of the embedding's dimension) before any data: a declared 2^40 entries is
    refused without allocating them (the old reader's ``np.load`` allocated the declared shape
    first)."""
    blob = npz({"proxy.npy": (header, data)})
    with pytest.raises(DeploymentError, match=f"device 12's reply's message: proxy: .*{problem}"):
        _round_with(_fedhide(), blob)


def test_a_message_with_other_members_is_refused_and_their_names_printed_escaped() -> None:
    proxy = pack({"proxy": torch.ones(8)})
    extra = {"evil\x1b[2J\n.npy": ({"descr": "<f4", "fortran_order": False, "shape": (1,)}, b"")}
    with zipfile.ZipFile(io.BytesIO(proxy)) as archive:
        content = archive.read("proxy.npy")
    blob = io.BytesIO()
    with zipfile.ZipFile(blob, "w") as archive:
        archive.writestr("proxy.npy", content)
        for name in extra:
            archive.writestr(name, b"")
    with pytest.raises(DeploymentError) as caught:
        _round_with(_fedhide(), blob.getvalue())
    line = str(caught.value)
    assert "\x1b" not in line and "\n" not in line
    assert r"evil\x1b[2J\n.npy" in line and "not 1 member(s) (proxy.npy)" in line
    twice = io.BytesIO()
    with zipfile.ZipFile(twice, "w") as archive, pytest.warns(UserWarning, match="Duplicate"):
        archive.writestr("proxy.npy", content)
        archive.writestr("proxy.npy", content)
    with pytest.raises(DeploymentError, match="holds 2 member"):
        _round_with(_fedhide(), twice.getvalue())


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        (b"PK\x05\x06" + bytes(18), "holds no member"),
        (b"not a zip at all", "not a readable message"),
        (pack({"proxy": torch.full((8,), float("nan"))}), "not finite"),
        (pack({"proxy": torch.full((8,), float("inf"))}), "not finite"),
        ("a string", "not bytes"),
    ],
    ids=["empty-zip", "garbage", "nan", "inf", "not-bytes"],
)
def test_a_message_that_is_not_a_finite_array_is_refused(message, problem: str) -> None:
    with pytest.raises(DeploymentError, match=problem):
        _round_with(_fedhide(), message)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"count": 10**12}, "1000000000000 samples, registered 6"),
        ({"count": 0}, "0 samples"),
        ({"count": -5}, "-5 samples"),
        ({"loss": float("nan")}, "loss is not a finite number"),
        ({"loss": "low"}, "loss is not a finite number"),
        ({"update": [np.zeros((3, 2), np.float32)]}, "1 array"),
        ({"update": [np.zeros((1 << 10,), np.float32), np.zeros(4, np.float32)]}, "shapes"),
        ({"update": [np.zeros((3, 2), np.int64), np.zeros(4, np.int64)]}, "floating point"),
    ],
    ids=[
        "count-huge",
        "count-zero",
        "count-negative",
        "loss-nan",
        "loss-text",
        "update-short",
        "update-shape",
        "update-int",
    ],
)
def test_a_reply_whose_count_loss_or_update_is_not_a_devices_is_refused(
    change: dict, problem: str
) -> None:
    """A sample count outside 1 … the count the device registered (10^12 would outweigh every
    other device in the mean), a loss that is not a finite number, or an update that is not
    the model's shapes (the old server stacked it and failed with a traceback)."""
    server = _fedhide()
    before = {k: v.clone() for k, v in server.params.items()}
    with pytest.raises(DeploymentError, match=f"round 1: device 12's reply: .*{problem}") as e:
        _round_with(server, **change)
    assert "\n" not in str(e.value)
    for name, value in before.items():
        assert torch.equal(server.params[name], value)


def test_a_message_from_a_method_that_sends_none_is_refused() -> None:
    """FedHide's proxy is the message; a method whose devices send none (the message spec is
    empty) refuses one."""
    server = _fedhide()
    server.message_spec = {}
    with pytest.raises(DeploymentError, match="sends? none"):
        _round_with(server)


def test_the_honest_message_passes_and_a_device_bounds_the_servers_view() -> None:
    """The bound is exact for what the method sends (FedHide's proxy, FedAwS's embedding), and
    a device reads the server's view of the shared state with the same bound."""
    expected = {"proxy": ArraySpec((8,), np.dtype("float32"))}
    honest = {"proxy": torch.randn(8)}
    torch.testing.assert_close(unpack(pack(honest), expected, "m")["proxy"], honest["proxy"])
    fedhide = _fedhide()
    assert fedhide.message_spec == expected
    fedaws = _server({"method": "fedaws"}, {11: 4, 12: 6, 13: 2})
    assert fedaws.message_spec == {"embedding": ArraySpec((8,), np.dtype("float32"))}
    view = view_spec(fedhide.algorithm, 5, 8)
    assert view == {"proxies": ArraySpec((5, 8), np.dtype("float32"))}
    with pytest.raises(DeploymentError, match="the server's shared state: "):
        unpack(zeros_npz("proxies", 1 << 20), view, "the server's shared state")


@pytest.mark.parametrize(
    ("status", "problem"),
    [
        ({"user_id": "x", "codeword": False, "samples": 5}, "user id not -1"),
        ({"user_id": 2**40, "codeword": False, "samples": 5}, "user id not -1"),
        ({"user_id": -1, "codeword": False, "samples": 10**12}, "sample count not an integer"),
        ({"user_id": -1, "codeword": False, "samples": 0}, "sample count not an integer"),
        ({"user_id": -1, "codeword": False, "samples": 2.5}, "sample count not an integer"),
        ({"user_id": -1, "codeword": "yes", "samples": 5}, "codeword not true or false"),
        ({"user_id": -1, "samples": 5}, "codeword not true or false"),
    ],
)
def test_a_devices_registration_that_is_not_a_devices_leaves_it_out(
    tmp_path, status: dict, problem: str
) -> None:
    """A status reply whose user id, sample count or codeword flag is not what a device sends
    (before: int("x") raised in the ServerApp, and 10^12 samples weighed that device 10^12 times)
    leaves that device out of the run with one log line; the others register."""
    from uvdeploy.server import FederatedServer
    from uvdeploy.settings import DeploySettings

    settings = DeploySettings.from_run_config({"method": "fedhide", "out": str(tmp_path)})
    lines: list[str] = []
    server = FederatedServer(settings, grid=None, context=None, echo=lines.append)
    honest = {"user_id": -1, "codeword": False, "samples": 4}
    replies = {11: honest, 12: status, 13: honest}
    server._query = lambda requests: {n: replies[n] for n in requests}
    rows = server.register([11, 12, 13], None)
    assert sorted(rows) == [11, 13] and server.samples == {11: 4, 13: 4}
    assert f"device 12's status refused ({problem}" in "\n".join(lines)
