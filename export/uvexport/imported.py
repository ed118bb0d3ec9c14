"""A speaker encoder you hold, as a bundle: ``uvexport import MODEL.onnx --out B.uvb``.

The project ships the strongest encoder the package registries carry (CAM++, docs/model-card.md,
"What bounds the owners' FRR"); stronger ones (WeSpeaker's ResNets, 3D-Speaker's ERes2Net, ...)
are published as ONNX files on model hubs this project may not download from. A deployment that
holds such a file imports it here and gets a bundle both SDKs run as they run the default one.

The bundle contract is raw samples in, one embedding out, with the preprocessing inside the
graph (docs/spec.md §3.8). Published encoders mostly take Kaldi filterbank features instead, so
``--features kaldi-fbank`` puts the project's own front end in front of the model
(:class:`uvtrain.models.frontends.KaldiFbank`, checked against kaldi-native-fbank: 25-ms frames
every 10 ms, ``--mel-bins`` bands, povey or hamming window, each band's mean over the clip
subtracted, as 3D-Speaker and WeSpeaker compute their inputs). The model's input may be
``[batch, frames, bands]`` or ``[batch, bands, frames]``, read from its declared shape.
``--features waveform`` takes a model that already has its front end (``[batch, samples]``).

The result is checked before it is written: on seeded probe windows, the joined graph's output
against the front end run in torch and the model run alone in ONNX Runtime. The bundle is
uncalibrated (enrollment by the warm-up threshold); calibrate it on real people with
``uvexport calibrate``. The manifest records the file's name, the SHA-256 of the model as loaded (its
external data included), the front end and the licence the user states (``--licence``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from uvsdk.inputs import AudioInput

from .bundle import make_manifest, write_bundle
from .errors import ExportError
from .fuse import probe_windows

FEATURES = ("kaldi-fbank", "waveform")
FBANK_WINDOWS = ("povey", "hamming")
#: The largest difference allowed between the joined graph and its two parts run apart, relative
#: to the largest output (float32 arithmetic on the same operators: a few ulps of each).
IMPORT_TOLERANCE = 1e-4
#: The front end's output, and the prefix of the imported model's names in the joined graph.
FEATURES_NAME = "features"
PREFIX = "encoder."


def _load(path: Path) -> Any:
    import onnx

    if not path.is_file():
        raise ExportError(f"{path}: no such file")
    try:
        model = onnx.load(str(path))  # external data beside it (MODEL.onnx.data) loaded too
        onnx.checker.check_model(model)
    except OSError as error:
        raise ExportError(f"{path}: cannot be read ({error.strerror or error})") from None
    except Exception as error:  # onnx's decode and checker errors have no common base
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ExportError(f"{path.name}: not a valid ONNX model ({first[:120]})") from None
    return model


def _dims(value: Any) -> list[int | None]:
    """A graph input's or output's shape, ``None`` for an axis without a fixed size."""
    shape = value.type.tensor_type.shape
    return [d.dim_value if d.HasField("dim_value") else None for d in shape.dim]


def _only(model: Any, name: str) -> tuple[Any, Any]:
    """The model's one input (initializers aside) and one output, else a one-line error."""
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    outputs = list(model.graph.output)
    if len(inputs) != 1 or len(outputs) != 1:
        raise ExportError(
            f"{name}: an encoder takes one input and gives one output, this one has "
            f"{len(inputs)} and {len(outputs)}"
        )
    return inputs[0], outputs[0]


def _layout(dims: list[int | None], bands: int, name: str) -> str:
    """``frames-first`` or ``bands-first``, from a features input's declared shape."""
    if len(dims) != 3:
        raise ExportError(
            f"{name}: a filterbank model's input is [batch, frames, bands] or [batch, bands, "
            f"frames], not rank {len(dims)} (a model with its own front end: --features waveform)"
        )
    if dims[2] == bands and dims[1] != bands:
        return "frames-first"
    if dims[1] == bands and dims[2] != bands:
        return "bands-first"
    raise ExportError(
        f"{name}: its input's shape {['?' if d is None else d for d in dims]} does not say "
        f"where the {bands} bands are (--mel-bins must match the model)"
    )


def frontend_model(frontend: Any) -> bytes:
    """A :class:`~uvtrain.models.frontends.KaldiFbank` as an ONNX graph: ``input [batch,
    samples]`` → ``output [batch, frames, bands]``, mean-normalised over frames."""
    import torch
    from torch.export import Dim

    from .onnx_export import export_onnx

    example = torch.zeros(2, frontend.sample_rate)
    shapes = {0: Dim("batch", min=1), 1: Dim("samples", min=int(frontend.min_samples))}
    return export_onnx(frontend, example, shapes)


def joined_model(front: bytes | None, encoder: Any, layout: str | None) -> bytes:
    """One graph: ``input`` → front end (if any) → the encoder → ``output``."""
    import onnx
    from onnx import compose, helper, version_converter

    from .onnx_export import OPSET

    opset = {o.domain: o.version for o in encoder.opset_import}.get("", 0)
    if opset != OPSET:
        try:
            encoder = version_converter.convert_version(encoder, OPSET)
        except Exception as error:
            raise ExportError(
                f"the model's ONNX opset {opset} cannot be brought to {OPSET} ({error})"
            ) from None
    encoder = compose.add_prefix(encoder, PREFIX)
    source, result = _only(encoder, "the model")
    nodes = []
    ir_version = encoder.ir_version
    if front is None:
        nodes.append(helper.make_node("Identity", ["input"], [source.name]))
        head_nodes, head_inits, functions = [], [], []
    else:
        head = onnx.load_from_string(front)
        _rename(head.graph, "output", FEATURES_NAME)
        head_nodes, head_inits = list(head.graph.node), list(head.graph.initializer)
        functions = list(head.functions)
        ir_version = max(ir_version, head.ir_version)
        if layout == "bands-first":
            nodes.append(
                helper.make_node("Transpose", [FEATURES_NAME], [source.name], perm=[0, 2, 1])
            )
        else:
            nodes.append(helper.make_node("Identity", [FEATURES_NAME], [source.name]))
    nodes += list(encoder.graph.node)
    nodes.append(helper.make_node("Identity", [result.name], ["output"]))
    graph = helper.make_graph(
        head_nodes + nodes,
        "imported",
        [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, ["batch", "samples"])],
        [helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, ["batch", "dim"])],
        head_inits + list(encoder.graph.initializer),
    )
    imports = {o.domain: o.version for o in encoder.opset_import}
    imports[""] = OPSET
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid(d, v) for d, v in imports.items()],
        functions=functions + list(encoder.functions),
        ir_version=ir_version,
        producer_name="uvexport import",
    )
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _rename(graph: Any, old: str, new: str) -> None:
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
        for i, name in enumerate(node.output):
            if name == old:
                node.output[i] = new


def _run(model: bytes, feed: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    (name,) = [i.name for i in session.get_inputs()]
    return np.asarray(session.run(None, {name: feed})[0])


def import_model(
    model_path: str | Path,
    out: str | Path,
    *,
    features: str,
    sample_rate: int = 16000,
    mel_bins: int = 80,
    fbank_window: str = "povey",
    window_seconds: float = 2.0,
    hop_seconds: float = 1.0,
    min_seconds: float = 0.5,
    about: str | None = None,
    licence: str | None = None,
    sign_key: Any | None = None,
) -> tuple[Path, float, int]:
    """Write ``out``: the encoder in ``model_path`` behind the front end ``features`` names.
    Returns the bundle's path, the check's relative difference and the embedding's size.

    Raises
    ------
    ExportError
        An unreadable or invalid model, a shape the front end cannot feed, an opset that does
        not convert, an output that is not one embedding per input, or a joined graph that does
        not reproduce its parts; each in one line.
    """
    import torch

    if features not in FEATURES:
        raise ExportError(f"--features must be one of {', '.join(FEATURES)}, not {features!r}")
    if fbank_window not in FBANK_WINDOWS:
        raise ExportError(
            f"--fbank-window must be one of {', '.join(FBANK_WINDOWS)}, not {fbank_window!r}"
        )
    if not 8 <= mel_bins <= 256:
        raise ExportError(f"--mel-bins must be between 8 and 256, not {mel_bins}")
    try:
        source = AudioInput(
            sample_rate=sample_rate,
            window_seconds=window_seconds,
            hop_seconds=hop_seconds,
            min_seconds=min_seconds,
        )
    except Exception as error:  # the manifest's own validation: one line
        raise ExportError(str(error).removeprefix("manifest: input.")) from None
    path = Path(model_path)
    encoder = _load(path)
    encoder_bytes = encoder.SerializeToString()
    given, _ = _only(encoder, path.name)
    windows = probe_windows(source)
    front = layout = fbank = None
    if features == "kaldi-fbank":
        from uvtrain.models.frontends import KaldiFbank

        layout = _layout(_dims(given), mel_bins, path.name)
        fbank = KaldiFbank(sample_rate, mel_bins, window=fbank_window).eval()
        front = frontend_model(fbank)
        with torch.no_grad():
            feed = fbank(torch.from_numpy(windows)).numpy()
        if layout == "bands-first":
            feed = np.ascontiguousarray(feed.transpose(0, 2, 1))
    elif len(_dims(given)) != 2:
        raise ExportError(
            f"{path.name}: a waveform model's input is [batch, samples], not rank "
            f"{len(_dims(given))} (a filterbank model: --features kaldi-fbank)"
        )
    else:
        feed = windows
    try:
        expected = _run(encoder_bytes, feed)
    except Exception as error:
        first = str(error).strip().splitlines()[0][:160]
        raise ExportError(
            f"{path.name}: ONNX Runtime cannot run it on the probes ({first})"
        ) from None
    if expected.ndim != 2 or expected.shape[0] != len(windows) or not np.all(np.isfinite(expected)):
        raise ExportError(
            f"{path.name}: its output on {len(windows)} probe windows is {list(expected.shape)}, "
            f"not one finite embedding per window"
        )
    model = joined_model(front, encoder, layout)
    output = _run(model, windows)
    scale = float(np.max(np.abs(expected))) or 1.0
    difference = float(np.max(np.abs(output - expected))) / scale
    if not difference <= IMPORT_TOLERANCE:
        raise ExportError(
            f"the bundle's graph differs from its parts run apart by {difference:.2g} of the "
            f"largest output (tolerance {IMPORT_TOLERANCE:g}): not written"
        )
    dim = int(expected.shape[1])
    frontend: dict[str, Any] = {"kind": "waveform"}
    if fbank is not None:
        ms = 1000 / sample_rate
        frontend = {"kind": "kaldi-fbank", "mel_bins": mel_bins, "window": fbank_window,
                    "frame_ms": fbank.frame_length * ms, "hop_ms": fbank.hop * ms,
                    "mean_normalised": fbank.mean_normalise, "layout": layout}  # fmt: skip
    extra: dict[str, Any] = {
        "description": about or f"{path.name}, imported (uvexport import)",
        "imported": {
            "file": path.name,
            "sha256": hashlib.sha256(encoder_bytes).hexdigest(),
            "frontend": frontend,
            "max_rel_diff": difference,
            "tolerance": IMPORT_TOLERANCE,
        },
        "training": {"method": "reference", "privacy": None, "enrollment": "prototype"},
    }
    if licence:
        extra["weights_licence"] = licence
    manifest = make_manifest(
        model,
        name=Path(out).stem,
        method="reference",
        source=source,
        output_kind="embedding",
        dim=dim,
        extra=extra,
    )
    return write_bundle(out, model, manifest, sign_key=sign_key), difference, dim
