"""A torch model → one ONNX file, and its parity with torch.

The model is exported whole — the log-mel or pixel preprocessing is part of ``forward``, so it is
part of the graph — with ``torch.onnx.export(dynamo=True)``, one file (no external data), input
``input`` and output ``output``, a dynamic batch and, for audio, a dynamic length; the same model
gives the same bytes. :func:`max_abs_difference` is the check against torch that every export
passes before anything is written (within :data:`TOLERANCE`)."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

#: ONNX opset of the exported graphs (docs/trainer.md, "Export (``uvexport``)").
OPSET = 18
#: Largest absolute difference between ONNX Runtime and torch an export accepts. Codeword outputs
#: have norm √c (≈ 11.3 for c = 127), embeddings norm 1; float32 round-off is ~1e-6 of that.
TOLERANCE = 1e-3


@contextlib.contextmanager
def _quiet_exporter() -> Any:
    """Silence two messages of ``torch.onnx.export`` that are about torch, not about the user's
    model, and that every ``uvexport`` printed (torch 2.13, onnxscript 0.5):

    * four ``WARNING`` lines of the exporter's op registry, "torchvision is not installed.
      Skipping torchvision::nms" (roi_align, roi_pool, deform_conv2d): it registers torchvision's
      ops when torchvision is there, and our models use none of them. Only that logger is raised
      to ERROR, only for the export.
    * a ``FutureWarning`` from torch's own pytree code, "`isinstance(treespec, LeafSpec)` is
      deprecated": torch calling its own deprecated API. Only that message is filtered.
    """
    registry = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registry.level
    registry.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore",
                message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                category=FutureWarning,
            )
            # The same for recurrent models (the GE2E encoder's LSTM): torch's graph code calling
            # its own deprecated _check_is_size, and nn.LSTM's _flat_weights (torch's attribute,
            # not ours) reported as "assigned during export".
            warnings.filterwarnings(
                "ignore", message=r"_check_is_size will be removed", category=FutureWarning
            )
            warnings.filterwarnings(
                "ignore",
                message=r"The tensor attributes \S*lstm\._flat_weights",
                category=UserWarning,
            )
            yield
    finally:
        registry.setLevel(level)


def export_onnx(model: Any, example: Any, dynamic_shapes: dict[int, Any]) -> bytes:
    """``model`` as one ONNX file's bytes: opset :data:`OPSET`, input ``input``, output
    ``output``, the given dynamic axes of the input (``torch.export.Dim``), no external data.

    The exporter's per-node debug metadata is dropped (:func:`_drop_debug_metadata`: the same
    model gives the same bytes), and so is its ``value_info`` (intermediate shapes, optional in
    ONNX): it records some shapes as traced from the example (GroupNorm's reshape targets as ``[0, 32, 0, 0]``),
    ONNX Runtime ran the face network 5 % slower with it, and the quantizer's shape inference
    rejects it; ONNX Runtime infers the shapes itself."""
    import torch

    with _quiet_exporter():
        program = torch.onnx.export(
            model,
            (example,),
            None,
            dynamo=True,
            external_data=False,
            opset_version=OPSET,
            input_names=["input"],
            output_names=["output"],
            dynamic_shapes=(dynamic_shapes,),
            verbose=False,
        )
    proto = program.model_proto
    del proto.graph.value_info[:]
    _drop_debug_metadata(proto.graph)
    return proto.SerializeToString()


def _drop_debug_metadata(graph: Any) -> None:
    """Remove the exporter's per-node debug metadata (``pkg.torch.onnx.stack_trace``, ``fx_node``,
    ``namespace``, ...): it holds Python object addresses (``<function sym_max at 0x7f...>``) and
    source paths, so two exports of the same model differed in their bytes and ``model_sha256``.
    Without it an export is reproducible; ONNX Runtime never reads it."""
    for node in graph.node:
        del node.metadata_props[:]
        for attribute in node.attribute:
            if attribute.HasField("g"):
                _drop_debug_metadata(attribute.g)
            for subgraph in attribute.graphs:
                _drop_debug_metadata(subgraph)


def max_abs_difference(model: Any, onnx_bytes: bytes, inputs: Sequence[np.ndarray]) -> float:
    """The largest absolute difference between ONNX Runtime running ``onnx_bytes`` and torch
    running ``model`` on each batch of ``inputs`` (the parity check of an export)."""
    import onnxruntime as ort
    import torch

    session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    worst = 0.0
    for batch in inputs:
        with torch.no_grad():
            expected = model(torch.as_tensor(batch)).numpy()
        got = session.run(["output"], {"input": batch})[0]
        worst = max(worst, float(np.abs(got - expected).max()))
    return worst
