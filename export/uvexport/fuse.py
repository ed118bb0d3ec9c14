"""Two encoders as one model: ``uvexport fuse FIRST.uvb SECOND.uvb --out FUSED.uvb``.

Encoders trained differently make different mistakes: on the real voices of
docs/model-card.md ("A second encoder"), CAM++ and GE2E together separate a held-out source's
voices better than either (mean EER 0.079 → 0.061). This writes one ONNX graph that runs both on
the same input and joins their unit embeddings, each scaled so that the cosine of two joined
vectors is the weighted mean of the two encoders' cosines::

    output = [√w · a/‖a‖, √(1 − w) · b/‖b‖]          a = first(x), b = second(x)

The bundle contract is unchanged (one ``input``, one ``output`` of ``dim_a + dim_b``), so both
SDKs run it as any embedding model; its scores are checked against the two bundles run apart.
A fused bundle has no calibration and no cohort (the scores are new ones): calibrate it with
``uvexport calibrate``, as ``benchmarks/far_generalisation.py --fuse`` measures it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from uvsdk.bundle import Bundle
from uvsdk.errors import UvsdkError
from uvsdk.scoring import rescale

from .bundle import make_manifest, write_bundle
from .errors import ExportError

#: The largest difference allowed between the fused graph's output and the two bundles' outputs
#: joined by hand (float32 arithmetic on the same graph nodes: a few ulps).
FUSION_TOLERANCE = 1e-5
#: The smallest norm divided by (a zero embedding stays zero instead of becoming NaN).
NORM_FLOOR = 1e-12
#: Probe inputs the parity check runs (seeded noise and tones, as long as a window).
PROBES = 4


def fuse_models(first: bytes, second: bytes, weight: float) -> bytes:
    """One ONNX model that runs ``first`` and ``second`` (each with one ``input`` and one
    ``output``) on the same input and outputs their unit embeddings joined, weighted by ``√w`` and
    ``√(1 − w)``. The second model's names get the prefix ``second.``, the first's ``first.``."""
    import onnx
    from onnx import compose, helper, numpy_helper

    models = [onnx.load_from_string(first), onnx.load_from_string(second)]
    opsets = [{o.domain: o.version for o in m.opset_import} for m in models]
    if opsets[0].get("", 0) != opsets[1].get("", 0):
        raise ExportError(
            f"the two models use ONNX opsets {opsets[0].get('')} and {opsets[1].get('')}: "
            "export both with the same uvexport"
        )
    opset = opsets[0].get("", 0)
    graphs = []
    for model, prefix in zip(models, ("first.", "second."), strict=True):
        names = ([i.name for i in model.graph.input], [o.name for o in model.graph.output])
        if names != (["input"], ["output"]):
            raise ExportError("each model needs one input 'input' and one output 'output'")
        graphs.append(compose.add_prefix(model, prefix).graph)
    head = [
        helper.make_node("Identity", ["input"], ["first.input"]),
        helper.make_node("Identity", ["input"], ["second.input"]),
    ]
    nodes = []
    constants = [numpy_helper.from_array(np.array(NORM_FLOOR, np.float32), "fusion.floor")]
    if opset >= 18:
        constants.append(numpy_helper.from_array(np.array([-1], np.int64), "fusion.axes"))
    parts = []
    for name, scale in (("first", math.sqrt(weight)), ("second", math.sqrt(1 - weight))):
        constants.append(numpy_helper.from_array(np.array(scale, np.float32), f"{name}.weight"))
        norm = (  # ReduceL2 takes its axes as an input since opset 18, an attribute before
            helper.make_node(
                "ReduceL2", [f"{name}.output", "fusion.axes"], [f"{name}.norm"], keepdims=1
            )
            if opset >= 18
            else helper.make_node(
                "ReduceL2", [f"{name}.output"], [f"{name}.norm"], axes=[-1], keepdims=1
            )
        )
        nodes += [
            norm,
            helper.make_node("Max", [f"{name}.norm", "fusion.floor"], [f"{name}.floored"]),
            helper.make_node("Div", [f"{name}.output", f"{name}.floored"], [f"{name}.unit"]),
            helper.make_node("Mul", [f"{name}.unit", f"{name}.weight"], [f"{name}.joined"]),
        ]
        parts.append(f"{name}.joined")
    tail = [helper.make_node("Concat", parts, ["output"], axis=-1)]
    graph = helper.make_graph(
        head + [n for g in graphs for n in g.node] + nodes + tail,
        "fused",
        [models[0].graph.input[0]],
        [helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, ["batch", "dim"])],
        [t for g in graphs for t in g.initializer] + constants,
        value_info=[v for g in graphs for v in g.value_info],
    )
    functions = [f for m in models for f in m.functions]
    imports = {**opsets[1], **opsets[0]}
    fused = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid(domain, version) for domain, version in imports.items()],
        functions=functions,
        ir_version=max(m.ir_version for m in models),
        producer_name="uvexport fuse",
    )
    onnx.checker.check_model(fused)
    return fused.SerializeToString()


def probe_windows(spec: Any, count: int = PROBES) -> np.ndarray:
    """Seeded inputs of one window each: noise plus a tone, at the audio input ``spec``'s rate
    (the probes a joined graph is checked on here and in :mod:`uvexport.imported`)."""
    samples = int(round(spec.window_seconds * spec.sample_rate))
    rng = np.random.default_rng(0)
    t = np.arange(samples) / spec.sample_rate
    tones = [np.sin(2 * np.pi * f * t) for f in np.linspace(120, 900, count)]
    return np.stack([0.3 * tone + 0.05 * rng.standard_normal(samples) for tone in tones]).astype(
        np.float32
    )


def join(first: np.ndarray, second: np.ndarray, weight: float) -> np.ndarray:
    """Two encoders' embeddings of the same inputs (rows) as the fused model's:
    ``[√w · a/‖a‖, √(1 − w) · b/‖b‖]``, whose cosine with another such row is
    ``w · cos(a, a') + (1 − w) · cos(b, b')`` (what :func:`fuse_models`' graph computes)."""
    return np.concatenate(
        [rescale(first, math.sqrt(weight)), rescale(second, math.sqrt(1 - weight))], axis=-1
    )


def _method(bundles: list[Bundle]) -> str:
    """The fused manifest's method: ``reference`` when no part was trained by a federated
    method (a ``reference`` model, or 0 rounds), else the parts' one method."""
    methods = set()
    for bundle in bundles:
        provenance = bundle.manifest.extra.get("provenance") or {}
        if bundle.manifest.method != "reference" and provenance.get("rounds") != 0:
            methods.add(bundle.manifest.method)
    if len(methods) > 1:
        raise ExportError(
            f"the two models were trained by different methods ({', '.join(sorted(methods))}): "
            "a fused bundle states one"
        )
    return methods.pop() if methods else "reference"


def fuse(
    first: str | Path,
    second: str | Path,
    out: str | Path,
    *,
    weight: float = 0.5,
    sign_key: Any | None = None,
) -> tuple[Path, float]:
    """Write ``out``, the two embedding bundles as one (:func:`fuse_models`); returns its path and
    the largest difference between its outputs and the two bundles' outputs joined by hand on
    :data:`PROBES` probe windows.

    Raises
    ------
    ExportError
        A bundle that does not load, a codeword model, inputs that differ, a part trained with
        differential privacy (its guarantee would have to hold for the other part's training
        too), or a weight outside (0, 1); each in one line.
    """
    if not 0 < weight < 1:
        raise ExportError(f"--weight must be between 0 and 1, not {weight}")
    try:
        bundles = [Bundle(first), Bundle(second)]
    except UvsdkError as error:
        raise ExportError(str(error)) from None
    a, b = (bundle.manifest for bundle in bundles)
    for bundle in bundles:
        manifest = bundle.manifest
        if manifest.output_kind != "embedding":
            raise ExportError(
                f"{bundle.path.name}: a {manifest.output_kind} model; only embedding models fuse"
            )
        if manifest.training is not None and manifest.training.privacy is not None:
            raise ExportError(
                f"{bundle.path.name}: trained with differential privacy; a fused bundle cannot "
                "state one guarantee for both parts"
            )
    if a.input != b.input:
        raise ExportError(
            f"the two models take different inputs ({a.input.describe()} against "
            f"{b.input.describe()}): they must decode and window audio alike"
        )
    method = _method(bundles)
    model = fuse_models(bundles[0].model_bytes, bundles[1].model_bytes, weight)
    probes = probe_windows(bundles[0].manifest.input)
    expected = join(bundles[0].run(probes), bundles[1].run(probes), weight)
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    (output,) = session.run(["output"], {"input": probes})
    difference = float(np.max(np.abs(output - expected)))
    if not difference <= FUSION_TOLERANCE:
        raise ExportError(
            f"the fused model's outputs differ from the two models' by {difference:.2g} "
            f"(tolerance {FUSION_TOLERANCE:g})"
        )
    parts = []
    for bundle in bundles:
        manifest = bundle.manifest
        parts.append(
            {
                "name": manifest.name,
                "model_sha256": manifest.model_sha256,
                "dim": manifest.dim,
                "method": manifest.method,
                "provenance": manifest.extra.get("provenance"),
                "description": manifest.extra.get("description"),
            }
        )
    licences = [bundle.manifest.extra.get("weights_licence") for bundle in bundles]
    extra: dict[str, Any] = {
        "description": (
            f"{a.name} and {b.name} fused: their unit embeddings joined, weights {weight:g} and "
            f"{1 - weight:g} in the cosine"
        ),
        "fusion": {
            "weight": weight,
            "parts": parts,
            "max_abs_diff": difference,
            "tolerance": FUSION_TOLERANCE,
        },
        "training": {"method": method, "privacy": None, "enrollment": "prototype"},
    }
    if any(licences):
        extra["weights_licence"] = "; ".join(str(licence) for licence in licences if licence)
    manifest = make_manifest(
        model,
        name=Path(out).stem,
        method=method,
        source=a.input,
        output_kind="embedding",
        dim=a.dim + b.dim,
        extra=extra,
    )
    return write_bundle(out, model, manifest, sign_key=sign_key), difference
