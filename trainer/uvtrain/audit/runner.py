"""``uvtrain audit``: what an honest-but-curious server learns from what the clients send.

The server follows the protocol and keeps everything it sees. Three measurements on real models
(the initial one and a trained one), from the simulation engine's per-client updates:

1. **Codeword-bit recovery (FedUV).** The positive loss ``ℓ = max(0, 1 − vᵀσ(W g(x))/c)`` has

       ∂ℓ/∂W = −(1/(√c ‖z‖)) (v − (ẑᵀv) ẑ) g(x)ᵀ,    z = W g(x),  ẑ = z / ‖z‖,

   so a client's update of the last layer, ``ΔW = −η ∂ℓ/∂W``, is close to the rank-one ``v ḡᵀ``:
   its rows carry the signs of the secret codeword ``v``. Two estimators
   (:func:`codeword_estimates`): ``projection``, ``sign(ΔW ḡ)`` with ``ḡ`` the mean hidden
   activation ``g(x)`` of *public* samples (the dataset's identities held out of training) under
   the current global model — no sign ambiguity, since a descent step raises ``vᵀσ``; and
   ``svd``, the top left singular vector of ``ΔW`` with its sign fixed so that the right singular
   vector sums to a positive number — no public data, but one coin shared by every client of a
   model. Both are scored; the stronger on the plain updates is the headline. They are scored on
   one client's plain update; on the secure aggregate of cohorts of m clients, against every
   member (mean and max over the members, and a random guess scored the same way as the chance
   reference); and, since the server sees every round's aggregate and knows who took part, by
   least squares over the training rounds (:func:`disaggregate`). Exact recovery is counted on
   the raw signs and after BCH decoding (galois).

2. **Prototype leakage** ``P_leak`` of FedAwS, FedGN, FedCS, FedHide and softmax after training:
   each method's ``prototypes(params, private, shared)`` hook and
   :func:`uvtrain.evaluation.prototype_leakage`, as the run report computes it.

3. **Gradient inversion** (Geiping et al., "Inverting Gradients — How easy is it to break privacy
   in federated learning?", NeurIPS 2020): a dummy input is optimised with Adam (signed gradients,
   the learning rate divided by 10 at 3/8, 5/8 and 7/8 of the steps, pixels kept in [0, 1]) to
   maximise the cosine between its parameter gradient and the observed update, with a total
   variation prior (:func:`invert_update`); scored with PSNR and SSIM (:func:`psnr`, :func:`ssim`)
   against the target's images, beside the random start and the mean public face. The attacker
   needs the client's label: FedUV's codeword recovered from the same observed update by (1)
   (``label="recovered"``, the default) or the true one (``"true"``, an upper bound); FedAwS's
   class row and softmax's class index are known to the server; for FedHide, FedGN and FedCS the
   attacker stands the client's proxy in for its private prototype.

**Secure aggregation** is modelled as Flower's SecAgg+ computes it (``SecAggPlusWorkflow`` and
``secaggplus_mod`` of flwr 1.x; flwr is not needed here): client k multiplies what it sends — its
update ``θ_k − θ``, as ``uvtrain deploy`` does, or its parameters — by its weight
``r_k = round(n_k / max_weight · Q) / Q``, clips it to ``±clipping_range``, maps it to ``[0, Q]``
and rounds it stochastically to integers (``Q = 2**22``); the server unmasks only the sum,
dequantises it and divides by ``Σ r_k`` (:func:`secure_aggregate`, :func:`secure_update`). The
audit trains FedUV through the same arithmetic (:func:`secure_round`).

Nothing the audit writes holds a codeword or a prototype: rates, PSNR and SSIM only (and the
inversion figure, whose reconstructions are the point of it).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.func import functional_call, vmap

from ..algorithms.base import FedAvg, Tensors
from ..config import ConfigError, RunConfig
from ..data.base import FederatedDataset
from ..engine import Simulation

#: FedUV's class matrix W in :class:`uvtrain.models.CodewordModel`.
CODEWORD_WEIGHT = "class_embedding.weight"
#: The prototype methods whose ``P_leak`` a fresh audit measures by default.
LEAKAGE_METHODS = ("fedhide", "fedgn", "fedcs", "fedaws", "softmax")
ATTACKS = ("projection", "svd")
#: Public samples (held-out identities) the attacker averages ``g(x)`` over.
PUBLIC_SAMPLES = 64
#: Clients per call of the engine's per-client loop (a progress tick each).
CHUNK = 8
AUDIT_JSON, AUDIT_MD = "audit.json", "audit.md"


# ---------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------


def parse_sizes(text: str, name: str) -> tuple[int, ...]:
    """``"2,5,10"`` → ``(2, 5, 10)``; ``""`` or ``"none"`` → ``()``. Each an integer >= 1."""
    if text.strip().lower() in ("", "none"):
        return ()
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(f"--{name} {text!r}: give a comma-separated list of integers") from None
    if any(size < 1 for size in sizes):
        raise ConfigError(f"--{name} {text!r}: every value must be at least 1")
    return tuple(sorted(set(sizes)))


def parse_methods(text: str) -> tuple[str, ...]:
    """``"fedhide,fedaws"`` → those prototype methods; ``""`` or ``"none"`` → ``()``."""
    from ..algorithms import METHODS

    if text.strip().lower() in ("", "none"):
        return ()
    methods = tuple(dict.fromkeys(part.strip() for part in text.split(",")))
    for method in methods:
        if method not in METHODS:
            raise ConfigError(f"--methods: unknown method {method!r}: one of {', '.join(METHODS)}")
        if method == "feduv":
            raise ConfigError("--methods: feduv shares no prototypes (its codeword is part 1)")
    return methods


@dataclass(frozen=True)
class SecAggModel:
    """Flower's SecAgg+ arithmetic (``SecAggPlusWorkflow``'s clipping, quantisation and modulus
    ranges) on what the clients send.

    ``inputs``: ``"updates"`` — each client sends ``θ_k − θ``, as ``uvtrain deploy`` does — or
    ``"parameters"`` — ``θ_k``, as Flower's examples do. ``max_weight`` bounds a client's weight,
    its number of training samples: the values are multiplied by ``n_k / max_weight`` *before*
    they are quantised to steps of ``2 · 8 / 2**22 ≈ 3.8e-6``. ``None`` is what ``uvtrain deploy``
    sets, the cohort's largest sample count × 1.01 (weights near 1); Flower's default is 1000,
    with which 10 samples round a value to ``3.8e-6 / 0.01 ≈ 3.8e-4``.
    """

    clipping_range: float = 8.0
    quantization_range: int = 2**22
    modulus_range: int = 2**32
    max_weight: float | None = None
    inputs: str = "updates"

    def __post_init__(self) -> None:
        if not self.clipping_range > 0 or not (self.max_weight is None or self.max_weight > 0):
            raise ConfigError("SecAgg+: clipping_range and max_weight must be positive")
        if not 1 < self.quantization_range < self.modulus_range:
            raise ConfigError("SecAgg+: need 1 < quantization_range < modulus_range")
        if self.inputs not in ("updates", "parameters"):
            raise ConfigError("--secagg-inputs must be 'updates' or 'parameters'")


@dataclass(frozen=True)
class InversionSettings:
    """The gradient inversion: on ``dataset`` (a fresh audit; a run folder's own images), against
    one client's plain update and the secure aggregate of ``cohorts``, each client's update made
    on ``batch`` of its images; Adam on the pixels for ``steps`` steps at ``lr``, signed gradients,
    total-variation weight ``tv_weight``; the FedUV codeword ``label`` ``recovered`` or ``true``."""

    dataset: str = "orl-faces"
    cohorts: tuple[int, ...] = (2, 5, 10)
    batch: int = 1
    label: str = "recovered"
    steps: int = 1500
    lr: float = 0.1
    tv_weight: float = 0.2
    signed: bool = True
    skip_large_cohorts: bool = False

    def __post_init__(self) -> None:
        if self.steps < 1 or not self.lr > 0 or self.tv_weight < 0:
            raise ConfigError("inversion: need steps >= 1, lr > 0 and tv_weight >= 0")
        if self.batch < 1:
            raise ConfigError("--inversion-batch must be at least 1")
        if self.label not in ("recovered", "true"):
            raise ConfigError("--inversion-label must be 'recovered' or 'true'")


@dataclass(frozen=True)
class AuditSettings:
    """What to measure: ``cohorts`` (secure-aggregation cohort sizes) with ``cohort_draws`` random
    cohorts each; ``code_lengths`` (FedUV, fresh audits); ``methods`` (P_leak, fresh audits);
    ``decode`` (BCH decoding for exact recovery); ``inversion`` (``None``: none);
    ``skip_large_cohorts``: leave out cohorts larger than the clients (defaults) instead of
    refusing them (sizes given explicitly)."""

    cohorts: tuple[int, ...] = (2, 5, 10, 50)
    cohort_draws: int = 20
    code_lengths: tuple[int, ...] = (127, 255, 511)
    methods: tuple[str, ...] = LEAKAGE_METHODS
    decode: bool = True
    inversion: InversionSettings | None = InversionSettings()
    secagg: SecAggModel = SecAggModel()
    seed: int = 0
    skip_large_cohorts: bool = False

    def __post_init__(self) -> None:
        if self.cohort_draws < 1:
            raise ConfigError("--cohort-draws must be at least 1")
        for length in self.code_lengths:
            if length not in (127, 255, 511):
                raise ConfigError(f"--code-lengths: {length} is not 127, 255 or 511")


#: ``--small``: seconds, for tests and CI (any option given explicitly wins).
SMALL_PRESET: dict[str, Any] = {
    "clients": 12,
    "rounds": 3,
    "fraction": 0.25,
    "batch_size": 4,
    "cohorts": "2,5,10",
    "cohort_draws": 3,
    "code_lengths": "127",
    "methods": "fedhide,fedaws",
    "decode": False,
    "inversion_cohorts": "2",
    "inversion_steps": 10,
}
#: Defaults of the options (``uvtrain audit --help`` names them).
DEFAULTS: dict[str, Any] = {
    "rounds": 100,
    "cohorts": "2,5,10,50",
    "cohort_draws": 20,
    "code_lengths": "127,255,511",
    "methods": ",".join(LEAKAGE_METHODS),
    "decode": True,
    "max_weight": None,
    "secagg_inputs": "updates",
    "inversion": True,
    "inversion_dataset": "orl-faces",
    "inversion_cohorts": "2,5,10",
    "inversion_batch": 1,
    "inversion_label": "recovered",
    "inversion_steps": 1500,
    "seed": 0,
}
#: Options that describe a fresh setup (not allowed with a run folder, which has its own).
SETUP_OPTIONS = (
    "method",
    "dataset",
    "clients",
    "rounds",
    "fraction",
    "batch_size",
    "lr",
    "lr_decay",
    "code_lengths",
    "methods",
    "inversion_dataset",
    "config",
)


def resolve(
    run_dir: Path | None, given: dict[str, Any], small: bool = False
) -> tuple[RunConfig | None, AuditSettings]:
    """The fresh setup's run config (``None`` for a run folder) and what to measure.

    Precedence: an option given > the ``--small`` preset > :data:`DEFAULTS`. A run folder is
    audited as it is: the options of a fresh setup (:data:`SETUP_OPTIONS`) are refused with it.
    """
    from ..config import read_toml
    from ..config import resolve as resolve_run

    explicit = {key: value for key, value in given.items() if value is not None}
    if run_dir is not None:
        clashing = sorted(key for key in explicit if key in SETUP_OPTIONS)
        if clashing:
            flags = ", ".join("--" + key.replace("_", "-") for key in clashing)
            raise ConfigError(f"a run folder is audited as it was trained: drop {flags}")
        if not run_dir.is_dir():
            raise ConfigError(f"run folder not found: {run_dir}")
    elif "method" not in explicit or "dataset" not in explicit:
        raise ConfigError("give a run folder, or --method and --dataset for a fresh setup")
    options = {**DEFAULTS, **(SMALL_PRESET if small else {}), **explicit}
    inversion = None
    if options["inversion"]:
        inversion = InversionSettings(
            dataset=options["inversion_dataset"],
            cohorts=parse_sizes(options["inversion_cohorts"], "inversion-cohorts"),
            batch=options["inversion_batch"],
            label=options["inversion_label"],
            steps=options["inversion_steps"],
            skip_large_cohorts="inversion_cohorts" not in explicit,
        )
    settings = AuditSettings(
        cohorts=parse_sizes(options["cohorts"], "cohorts"),
        cohort_draws=options["cohort_draws"],
        code_lengths=parse_sizes(options["code_lengths"], "code-lengths"),
        methods=parse_methods(options["methods"]),
        decode=options["decode"],
        inversion=inversion,
        secagg=SecAggModel(max_weight=options["max_weight"], inputs=options["secagg_inputs"]),
        seed=options["seed"],
        skip_large_cohorts="cohorts" not in explicit,
    )
    if run_dir is not None:
        return None, settings
    # the run's own keys: given > preset > the TOML file > the audit's defaults (rounds, seed)
    chosen = {**(SMALL_PRESET if small else {}), **explicit}
    in_file = read_toml(options["config"]) if options.get("config") else {}
    run_keys = ("method", "dataset", "clients", "rounds", "fraction", "batch_size", "lr")
    cli = {key: chosen.get(key) for key in (*run_keys, "lr_decay", "seed")}
    for key in ("rounds", "seed"):
        if cli[key] is None and key not in in_file:
            cli[key] = DEFAULTS[key]
    config = resolve_run(cli, options.get("config"))
    return config, dataclasses.replace(settings, seed=config.seed)


# ---------------------------------------------------------------------------------------------
# Secure aggregation (Flower SecAgg+)
# ---------------------------------------------------------------------------------------------


def stochastic_round(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Unbiased rounding as flwr's ``_stochastic_round``: ``⌈x⌉``, minus one with probability
    ``⌈x⌉ − x`` (integers stay as they are)."""
    values = np.asarray(values, dtype=np.float64)
    ceiling = np.ceil(values)
    down = rng.random(values.shape) < (ceiling - values)
    return (ceiling - down).astype(np.int64)


def quantize(
    values: np.ndarray, clipping_range: float, quantization_range: int, rng: np.random.Generator
) -> np.ndarray:
    """flwr's ``quantize``: clip to ``±c``, map ``[−c, c]`` onto ``[0, Q]``, round stochastically."""
    scale = quantization_range / (2.0 * clipping_range)
    clipped = np.clip(np.asarray(values, dtype=np.float64), -clipping_range, clipping_range)
    return stochastic_round((clipped + clipping_range) * scale, rng)


def dequantize(
    total: np.ndarray, clipping_range: float, quantization_range: int, count: int = 1
) -> np.ndarray:
    """Back from the sum of ``count`` quantised vectors: ``q · 2c / Q − count · c`` (flwr's
    ``dequantize`` and the workflow's offset ``−(count − 1) c``)."""
    step = 2.0 * clipping_range / quantization_range
    return np.asarray(total, dtype=np.float64) * step - count * clipping_range


def secure_aggregate(
    parameters: np.ndarray,
    sizes: Sequence[float] | np.ndarray,
    model: SecAggModel,
    rng: np.random.Generator,
) -> np.ndarray:
    """What the server unmasks with SecAgg+: the cohort's weighted mean, as Flower computes it.

    Parameters
    ----------
    parameters
        ``[m, P]`` each member's parameters, flattened.
    sizes
        ``[m]`` each member's number of training samples (its FedAvg weight).
    model
        The SecAgg+ constants.
    rng
        The members' stochastic rounding.

    Returns
    -------
    numpy.ndarray
        ``[P]`` float64 ``Σ_k deq(quant(r_k θ_k)) / Σ_k r_k``, ``r_k = round(n_k / max_weight · Q) / Q``.
    """  # noqa: E501
    parameters = np.atleast_2d(np.asarray(parameters))
    count = parameters.shape[0]
    if count * model.quantization_range >= model.modulus_range:
        raise ValueError(f"a cohort of {count} would overflow SecAgg+'s modulus")
    sizes = np.asarray(sizes, np.float64)
    max_weight = model.max_weight or float(sizes.max()) * 1.01
    scaled = np.round(sizes / max_weight * model.quantization_range)
    if scaled.shape != (count,) or np.any(scaled < 1):
        raise ValueError("one weight per member, none rounding to 0 (n_k / max_weight · Q >= 1)")
    ratios = scaled / model.quantization_range
    total = np.zeros(parameters.shape[1], dtype=np.int64)
    for ratio, values in zip(ratios, parameters, strict=True):
        total += quantize(ratio * values.astype(np.float64), *_ranges(model), rng)
    # the pairwise masks cancel modulo modulus_range, which the sum stays below (checked above)
    return dequantize(total, *_ranges(model), count=count) / ratios.sum()


def secure_update(
    parameters: np.ndarray,
    base: np.ndarray,
    sizes: Sequence[float] | np.ndarray,
    model: SecAggModel,
    rng: np.random.Generator,
) -> np.ndarray:
    """The cohort's mean update ``Σ r_k θ_k / Σ r_k − θ`` as the server obtains it with SecAgg+,
    from the members' parameters ``[m, P]`` and the global ``θ`` (``base``): the members send
    their updates (``model.inputs == "updates"``) or their parameters."""
    base = np.asarray(base, np.float64)
    if model.inputs == "updates":
        return secure_aggregate(np.asarray(parameters, np.float64) - base, sizes, model, rng)
    return secure_aggregate(parameters, sizes, model, rng) - base


def _ranges(model: SecAggModel) -> tuple[float, int]:
    return model.clipping_range, model.quantization_range


# ---------------------------------------------------------------------------------------------
# Parameters as flat vectors, and per-client updates from the engine
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where each named parameter lies in a flat vector."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, params: Tensors, names: Iterable[str] | None = None) -> Layout:
        chosen = tuple(params if names is None else names)
        return cls(chosen, tuple(tuple(params[name].shape) for name in chosen))

    @property
    def sizes(self) -> list[int]:
        return [math.prod(shape) for shape in self.shapes]

    def flatten(self, params: Tensors, stacked: bool = False) -> np.ndarray:
        """``[P]`` (or ``[m, P]`` for stacked parameters) float32."""
        pieces = [
            params[name].detach().cpu().reshape(params[name].shape[0], -1)
            if stacked
            else params[name].detach().cpu().reshape(-1)
            for name in self.names
        ]
        return torch.cat(pieces, dim=-1).numpy().astype(np.float32, copy=False)

    def unflatten(self, flat: np.ndarray, like: Tensors) -> Tensors:
        """Tensors of ``like``'s dtypes and device from a ``[P]`` vector."""
        out, start = {}, 0
        for name, shape, size in zip(self.names, self.shapes, self.sizes, strict=True):
            piece = torch.as_tensor(np.asarray(flat[start : start + size]).reshape(shape))
            out[name] = piece.to(dtype=like[name].dtype, device=like[name].device)
            start += size
        return out


def client_parameters(
    simulation: Simulation,
    clients: np.ndarray,
    batches: Tensor,
    lr: float,
    layout: Layout,
    progress: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``[m, P]`` each client's parameters after its local training from the global ``θ`` (the
    engine's per-client loop), flattened by ``layout``, and the clients' mean losses."""
    rows, losses = [], []
    for start in range(0, len(clients), CHUNK):
        part = torch.as_tensor(clients[start : start + CHUNK], device=simulation.device)
        stacked, _, loss = simulation._local_loop(part, batches[start : start + CHUNK], lr)
        rows.append(layout.flatten(stacked, stacked=True))
        losses.append(loss.mean(dim=tuple(range(1, loss.dim()))).cpu().numpy())
        if progress is not None:
            progress.update(len(part))
    return np.concatenate(rows), np.concatenate(losses)


def receive(simulation: Simulation, clients: np.ndarray) -> None:
    """What a client takes from the server as its round begins (FedAwS: its class row), written
    into the simulated clients' state as a round does before local training."""
    algorithm = simulation.algorithm
    if type(algorithm).client_receive is FedAvg.client_receive:
        return
    index = torch.as_tensor(clients, device=simulation.device)
    constants = {k: v[index] for k, v in simulation.constants.items()}
    private = {k: v[index] for k, v in simulation.private.items()}
    received = vmap(algorithm.client_receive, in_dims=(0, 0, None))(
        private, constants, simulation.shared
    )
    for name, value in received.items():
        simulation.private[name][index] = value


def _plain_fedavg(simulation: Simulation) -> bool:
    """Whether a round is FedAvg of the model alone: no private state, messages or receive."""
    algorithm = type(simulation.algorithm)
    return (
        not simulation.private
        and algorithm.client_message is FedAvg.client_message
        and algorithm.client_receive is FedAvg.client_receive
        and algorithm.aggregate is FedAvg.aggregate
    )


def secure_round(
    simulation: Simulation,
    secagg: SecAggModel,
    rng: np.random.Generator,
    hidden: Tensor | None = None,
) -> tuple[np.ndarray, np.ndarray | None, float]:
    """One FedAvg round whose aggregate is the SecAgg+ sum (a method without private state or
    messages: FedUV). Returns the round's clients, ``ΔW ḡ`` of the aggregate's update of
    :data:`CODEWORD_WEIGHT` when ``hidden`` (``ḡ``) is given, and the mean loss."""
    if not _plain_fedavg(simulation):
        raise ValueError(f"{simulation.algorithm.name}: a secure round needs plain FedAvg")
    round_number = simulation.round + 1
    chosen = simulation.clients_of_round(round_number)
    batches = simulation.batches_of_round(round_number, chosen)
    layout = Layout.of(simulation.params)
    lr = simulation.config.learning_rate(round_number)
    parameters, losses = client_parameters(simulation, chosen, batches, lr, layout)
    before = layout.flatten(simulation.params).astype(np.float64)
    mean_update = secure_update(parameters, before, simulation.sizes[chosen].numpy(), secagg, rng)
    aggregate = before + mean_update
    observation = None
    if hidden is not None and CODEWORD_WEIGHT in layout.names:
        update = layout.unflatten(mean_update, _float64(simulation.params))
        observation = (update[CODEWORD_WEIGHT].cpu() @ hidden.double()).numpy()
    simulation.params = layout.unflatten(aggregate, simulation.params)
    simulation.round = round_number
    return chosen, observation, float(losses.mean())


def _float64(params: Tensors) -> Tensors:
    return {k: v.detach().to("cpu", torch.float64) for k, v in params.items()}


# ---------------------------------------------------------------------------------------------
# (1) Codeword bits
# ---------------------------------------------------------------------------------------------


def public_samples(
    dataset: FederatedDataset, config: RunConfig, limit: int = PUBLIC_SAMPLES
) -> Tensor | None:
    """Samples of the identities held out of training (what an attacker could collect), audio
    cut to the training window; ``None`` when the dataset holds none out."""
    if not dataset.unknown:
        return None
    each = max(1, math.ceil(limit / len(dataset.unknown)))
    pools = [np.concatenate([c.train, c.val, c.test])[:each] for c in dataset.unknown]
    samples = np.concatenate(pools)[:limit]
    if dataset.modality == "audio" and config.crop_seconds:
        window = max(1, round(config.crop_seconds * dataset.spec["sample_rate"]))
        samples = samples[:, :window]
    return torch.as_tensor(samples)


@torch.no_grad()
def mean_hidden(simulation: Simulation, samples: Tensor) -> Tensor:
    """``ḡ``: the mean of the backbone's output ``g(x)`` over ``samples`` under the global model."""
    model = simulation.load_into_model()
    return model.backbone(samples.to(simulation.device)).mean(0).double().cpu()


def _signs(values: Tensor) -> Tensor:
    return torch.where(values >= 0, 1.0, -1.0).to(torch.float64)


def codeword_estimates(delta_w: Tensor | np.ndarray, hidden: Tensor | None) -> dict[str, Tensor]:
    """The attacker's ±1 estimates of the codeword from an update ``ΔW`` (``[c, d]``).

    ``projection``: ``sign(ΔW ḡ)`` (needs ``hidden`` = ``ḡ``); ``svd``: the top left singular
    vector, signed so that the top right singular vector sums to a positive number.
    """
    delta_w = torch.as_tensor(delta_w, dtype=torch.float64)
    estimates = {}
    if hidden is not None:
        estimates["projection"] = _signs(delta_w @ hidden.double())
    left, _, right = torch.linalg.svd(delta_w, full_matrices=False)
    orientation = 1.0 if float(right[0].sum()) >= 0 else -1.0
    estimates["svd"] = _signs(left[:, 0] * orientation)
    return estimates


def bit_agreement(estimate: np.ndarray, codewords: np.ndarray) -> np.ndarray:
    """``[m]`` the fraction of each codeword's ±1 bits (rows of ``codewords``) that ``estimate``
    (``[c]``, or ``[m, c]`` one per row) gets right."""
    return np.mean(np.asarray(codewords) == np.asarray(estimate), axis=-1)


@functools.lru_cache(maxsize=4)
def bch_decoder(length: int) -> Callable[[np.ndarray], np.ndarray]:
    """Hard-decision BCH decoding of ±1 words (``[m, c]``) to the nearest codeword's ±1 bits (the
    FedUV code of :func:`uvtrain.codes.bch_code`; galois, about 10 s to compile once)."""
    import galois

    from ..codes import bch_code

    code = bch_code(length)
    bch = galois.BCH(code.n, code.k)
    if not np.array_equal(np.asarray(bch.G, dtype=np.uint8), code.generator):
        raise ValueError(f"galois's BCH({code.n}, {code.k}) is not the cached code")

    def decode(words: np.ndarray) -> np.ndarray:
        bits = (np.asarray(words) < 0).astype(np.uint8)  # v = 1 − 2b
        decoded = np.asarray(bch.decode(galois.GF2(np.atleast_2d(bits)), output="codeword"))
        return 1.0 - 2.0 * decoded.astype(np.float64)

    return decode


def _exact(estimates: np.ndarray, codewords: np.ndarray) -> np.ndarray:
    return np.all(np.asarray(estimates) == np.asarray(codewords), axis=-1)


def bit_recovery(
    simulation: Simulation,
    pool: np.ndarray,
    public: Tensor | None,
    settings: AuditSettings,
    rng: np.random.Generator,
    progress: bool = True,
) -> dict[str, Any]:
    """Codeword-bit recovery at the simulation's current model, for the clients of ``pool``.

    Every pool client trains one round's local steps from the same global ``θ`` (the engine's
    per-client loop, the batches of the next round); the attacks run on each plain update, and
    on the SecAgg+ aggregate of ``settings.cohort_draws`` random cohorts of each size.
    """
    from tqdm.auto import tqdm

    cohorts = _fitting(settings.cohorts, len(pool), settings.skip_large_cohorts, "cohorts")
    round_number = simulation.round + 1
    lr = simulation.config.learning_rate(round_number)
    layout = Layout.of(simulation.params, (CODEWORD_WEIGHT,))
    shape = layout.shapes[0]
    with tqdm(
        total=len(pool),
        desc=f"client updates, round {round_number}",
        unit="client",
        disable=None if progress else True,
        leave=False,
    ) as bar:
        batches = simulation.batches_of_round(round_number, pool)
        thetas, losses = client_parameters(simulation, pool, batches, lr, layout, bar)
    base = layout.flatten(simulation.params).astype(np.float64)
    hidden = mean_hidden(simulation, public) if public is not None else None
    codewords = simulation.constants["codeword"][torch.as_tensor(pool)].cpu().numpy()
    sizes = simulation.sizes[pool].numpy()
    decode = bch_decoder(shape[0]) if settings.decode else None

    plain: dict[str, np.ndarray] = {}
    for row in thetas:
        for attack, guess in codeword_estimates((row - base).reshape(shape), hidden).items():
            plain.setdefault(attack, []).append(guess.numpy())
    plain = {attack: np.stack(guesses) for attack, guesses in plain.items()}
    result: dict[str, Any] = {
        "round": simulation.round,
        "clients": len(pool),
        "lr": lr,
        "mean_loss": float(losses.mean()),
        "plain": {a: _plain_scores(g, codewords, decode) for a, g in plain.items()},
    }
    result["attack"] = max(result["plain"], key=lambda a: result["plain"][a]["mean"])
    result["cohorts"] = {}
    for size in cohorts:
        draws = []
        for _ in range(settings.cohort_draws):
            members = np.sort(rng.choice(len(pool), size=size, replace=False))
            update = secure_update(thetas[members], base, sizes[members], settings.secagg, rng)
            estimates = codeword_estimates(update.reshape(shape), hidden)
            estimates["random guess"] = torch.as_tensor(rng.choice([-1.0, 1.0], size=shape[0]))
            draws.append(_cohort_scores(estimates, codewords[members], decode))
        result["cohorts"][str(size)] = _mean_of(draws)
    return result


def _fitting(sizes: Sequence[int], clients: int, skip: bool, flag: str) -> list[int]:
    """The cohort sizes that fit ``clients``; a larger one is an error unless skipped."""
    large = [size for size in sizes if size > clients]
    if large and not skip:
        raise ConfigError(f"--{flag}: a cohort of {large[0]} needs more than the {clients} clients")
    return [size for size in sizes if size <= clients]


def _plain_scores(
    guesses: np.ndarray, codewords: np.ndarray, decode: Callable[[np.ndarray], np.ndarray] | None
) -> dict[str, float | None]:
    scores = bit_agreement(guesses, codewords)
    return {
        "mean": float(scores.mean()),
        "min": float(scores.min()),
        "exact": float(_exact(guesses, codewords).mean()),
        "exact_decoded": None
        if decode is None
        else float(_exact(decode(guesses), codewords).mean()),
    }


def _cohort_scores(
    estimates: dict[str, Tensor],
    members: np.ndarray,
    decode: Callable[[np.ndarray], np.ndarray] | None,
) -> dict[str, dict[str, float | None]]:
    """Each estimate against every member: mean and max agreement, the fraction of members whose
    codeword is recovered exactly (raw, decoded), and agreement with the members' majority."""
    majority = _signs(torch.as_tensor(members.sum(0))).numpy()
    scores = {}
    for attack, guess in estimates.items():
        guess = guess.numpy()
        agreement = bit_agreement(guess, members)
        decoded = None
        if decode is not None:
            decoded = float(_exact(decode(guess[None])[0], members).mean())
        scores[attack] = {
            "mean": float(agreement.mean()),
            "max": float(agreement.max()),
            "exact": float(_exact(guess, members).mean()),
            "exact_decoded": decoded,
            "majority": float(bit_agreement(guess, majority[None])[0]),
        }
    return scores


def _mean_of(draws: list[dict[str, dict[str, float | None]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attack in draws[0]:
        out[attack] = {}
        for key in draws[0][attack]:
            values = [draw[attack][key] for draw in draws]
            out[attack][key] = None if values[0] is None else float(np.mean(values))
    out["draws"] = len(draws)
    return out


def disaggregate(observations: np.ndarray, membership: np.ndarray) -> np.ndarray:
    """Per-client ±1 estimates from per-round aggregates: least squares of ``Y ≈ A X`` with
    ``A`` ``[R, K]`` the rounds' membership (known to the server: it picks the cohort) and ``Y``
    ``[R, c]`` each round's ``ΔW ḡ`` scaled to unit norm; ``sign(X)`` is ``[K, c]``."""
    rows = np.asarray(observations, np.float64)
    rows = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-30)
    solution, *_ = np.linalg.lstsq(np.asarray(membership, np.float64), rows, rcond=None)
    return np.where(solution >= 0, 1.0, -1.0)


def _checkpoints(rounds: int) -> list[int]:
    return sorted({r for r in (rounds // 8, rounds // 4, rounds // 2, rounds) if r >= 1})


def disaggregation_scores(
    observations: list[np.ndarray],
    membership: list[np.ndarray],
    codewords: np.ndarray,
    decode: Callable[[np.ndarray], np.ndarray] | None,
) -> dict[str, Any]:
    """Bit recovery by :func:`disaggregate` after each checkpoint's number of observed rounds,
    over the clients that took part at least once."""
    out = {}
    for rounds in _checkpoints(len(observations)):
        matrix = np.stack(membership[:rounds])
        seen = matrix.sum(0) > 0
        guesses = disaggregate(np.stack(observations[:rounds]), matrix)[seen]
        truth = codewords[seen]
        out[str(rounds)] = {
            "clients_seen": float(seen.mean()),
            "mean": float(bit_agreement(guesses, truth).mean()),
            "exact": float(_exact(guesses, truth).mean()),
            "exact_decoded": None
            if decode is None
            else float(_exact(decode(guesses), truth).mean()),
        }
    return out


# ---------------------------------------------------------------------------------------------
# (2) Prototype leakage
# ---------------------------------------------------------------------------------------------


def prototype_leak(simulation: Simulation) -> float | None:
    """``P_leak`` of the simulation's current state, as the run report computes it (``None`` for
    a method without class vectors)."""
    from .. import evaluation as ev

    vectors = simulation.algorithm.prototypes(
        simulation.params, simulation.private, simulation.shared
    )
    if vectors is None:
        return None
    learnt, seen = (value.detach().cpu().numpy() for value in vectors)
    return ev.prototype_leakage(learnt, seen)


def train_rounds(
    simulation: Simulation,
    rounds: int,
    progress: bool,
    description: str,
    step: Callable[[], float] | None = None,
) -> tuple[np.ndarray, float | None]:
    """Train ``rounds`` rounds (``simulation.step`` unless ``step`` is given, which returns the
    round's loss); returns how many times each client took part and the last loss."""
    from tqdm.auto import tqdm

    taken = np.zeros(simulation.num_clients, dtype=np.int64)
    loss = None
    for _ in tqdm(
        range(rounds),
        desc=description,
        unit="round",
        disable=None if progress else True,
        leave=False,
    ):
        taken[simulation.clients_of_round(simulation.round + 1)] += 1
        loss = step() if step is not None else float(simulation.step()["loss"])
    return taken, loss


def leakage_audit(
    methods: Sequence[str], config: RunConfig, dataset: FederatedDataset, progress: bool = True
) -> dict[str, Any]:
    """``P_leak`` of each prototype method after ``config.rounds`` rounds of training."""
    from ..run import make_simulation

    out = {}
    for method in methods:
        simulation = make_simulation(dataclasses.replace(config, method=method), dataset)
        taken, loss = train_rounds(simulation, config.rounds, progress, f"{method} (P_leak)")
        out[method] = {
            "p_leak": prototype_leak(simulation),
            "chance": 1.0 / simulation.num_clients,
            "rounds": simulation.round,
            "clients": simulation.num_clients,
            "clients_that_sent": float((taken > 0).mean()),
            "last_loss": loss,
        }
    return out


# ---------------------------------------------------------------------------------------------
# (3) Gradient inversion
# ---------------------------------------------------------------------------------------------


def psnr(reference: np.ndarray, image: np.ndarray, data_range: float = 1.0) -> float:
    """Peak signal-to-noise ratio ``10 log10(R² / MSE)`` in dB; ``inf`` for identical images."""
    error = np.mean((np.asarray(reference, np.float64) - np.asarray(image, np.float64)) ** 2)
    return math.inf if error == 0 else float(10.0 * math.log10(data_range**2 / error))


def _gaussian_window(size: int, sigma: float) -> Tensor:
    offsets = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    line = torch.exp(-(offsets**2) / (2 * sigma**2))
    line = line / line.sum()
    return torch.outer(line, line)[None, None]


def ssim(
    reference: np.ndarray,
    image: np.ndarray,
    data_range: float = 1.0,
    window: int = 11,
    sigma: float = 1.5,
    k1: float = 0.01,
    k2: float = 0.03,
) -> float:
    """Structural similarity (Wang et al., IEEE TIP 2004): the mean of the SSIM map over the
    positions where an ``window``×``window`` Gaussian window (σ ``sigma``) fits, with
    ``C1 = (k1 R)²``, ``C2 = (k2 R)²`` and the window's (biased) local moments; images ``[H, W]``
    or ``[H, W, C]`` (channels averaged). 1 for identical images."""
    a = torch.as_tensor(np.asarray(reference, np.float64))
    b = torch.as_tensor(np.asarray(image, np.float64))
    if a.shape != b.shape or a.dim() not in (2, 3):
        raise ValueError(f"ssim: two images of one shape [H, W(, C)], not {a.shape} and {b.shape}")
    if a.dim() == 2:
        a, b = a[..., None], b[..., None]
    if min(a.shape[:2]) < window:
        raise ValueError(f"ssim: images smaller than the {window}×{window} window")
    a, b = a.permute(2, 0, 1)[:, None], b.permute(2, 0, 1)[:, None]  # [C, 1, H, W]
    kernel = _gaussian_window(window, sigma)

    def local(x: Tensor) -> Tensor:
        return torch.nn.functional.conv2d(x, kernel)

    mean_a, mean_b = local(a), local(b)
    var_a = local(a * a) - mean_a**2
    var_b = local(b * b) - mean_b**2
    covariance = local(a * b) - mean_a * mean_b
    c1, c2 = (k1 * data_range) ** 2, (k2 * data_range) ** 2
    numerator = (2 * mean_a * mean_b + c1) * (2 * covariance + c2)
    denominator = (mean_a**2 + mean_b**2 + c1) * (var_a + var_b + c2)
    return float((numerator / denominator).mean())


def total_variation(images: Tensor) -> Tensor:
    """Anisotropic total variation of ``[B, H, W, C]`` images: mean absolute neighbour
    differences along the height plus along the width (Geiping et al.'s prior)."""
    return (images[:, 1:] - images[:, :-1]).abs().mean() + (
        images[:, :, 1:] - images[:, :, :-1]
    ).abs().mean()


def invert_update(
    loss_of: Callable[[Tensors, Tensor], Tensor],
    params: Tensors,
    update: Tensors,
    shape: Sequence[int],
    settings: InversionSettings,
    seed: int = 0,
    progress: Any = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Inverting Gradients (Geiping et al. 2020): images ``x ∈ [0, 1]^shape`` minimising
    ``1 − cos(∇_θ L(255 x), −Δθ) + tv_weight · TV(x)``.

    Parameters
    ----------
    loss_of
        ``(params, pixels) → loss``: the client's loss as the attacker can form it.
    params
        The global parameters ``θ`` the client started from.
    update
        The observed update ``Δθ`` (a plain one or a secure aggregate's), by parameter name; one
        descent step is ``−η ∇L``, so the gradient points along ``−Δθ``.
    shape
        ``[B, H, W, C]`` of the dummy batch.
    settings
        Steps, learning rate, TV weight, signed gradients.
    seed
        The random start (uniform in [0, 1]).
    progress
        A tqdm bar to tick once per step, or ``None``.

    Returns
    -------
    tuple
        The reconstruction and the random start (``[B, H, W, C]`` in [0, 1]), and the final cosine.
    """
    names = list(update)
    leaves = {name: params[name].detach().clone().requires_grad_(True) for name in names}
    frozen = {name: value.detach() for name, value in params.items() if name not in leaves}
    target = [-update[name].detach().to(leaves[name].dtype) for name in names]
    target_norm = torch.sqrt(sum((t * t).sum() for t in target))
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(*shape, generator=generator).requires_grad_(True)
    start = images.detach().clone()
    optimiser = torch.optim.Adam([images], lr=settings.lr)
    milestones = sorted({max(1, int(settings.steps * f)) for f in (3 / 8, 5 / 8, 7 / 8)})
    schedule = torch.optim.lr_scheduler.MultiStepLR(optimiser, milestones, gamma=0.1)
    cosine = torch.tensor(0.0)
    for _ in range(settings.steps):
        loss = loss_of({**frozen, **leaves}, images * 255.0)
        grads = torch.autograd.grad(loss, [leaves[n] for n in names], create_graph=True)
        dot = sum((g * t).sum() for g, t in zip(grads, target, strict=True))
        norm = torch.sqrt(sum((g * g).sum() for g in grads))
        cosine = dot / (norm * target_norm + 1e-30)
        objective = 1.0 - cosine + settings.tv_weight * total_variation(images)
        (gradient,) = torch.autograd.grad(objective, images)
        images.grad = gradient.sign() if settings.signed else gradient
        optimiser.step()
        schedule.step()
        with torch.no_grad():
            images.clamp_(0.0, 1.0)
        if progress is not None:
            progress.update(1)
    return images.detach().numpy(), start.numpy(), float(cosine.detach())


def attack_loss(
    simulation: Simulation, client: int, codeword: Tensor | None = None
) -> Callable[[Tensors, Tensor], Tensor]:
    """The client's loss as the server can form it: FedUV with the attacker's ``codeword``;
    FedHide/FedGN/FedCS with the client's proxy from the bank in place of its private prototype;
    FedAwS with the class row the server sent; softmax with the client's index."""
    from ..algorithms.fedhide import ProxyBank

    algorithm = simulation.algorithm
    constants = {k: v[client] for k, v in simulation.constants.items()}
    private = {k: v[client] for k, v in simulation.private.items()}
    if algorithm.output_kind == "codeword":
        if codeword is None:
            raise ValueError("FedUV's attack loss needs a codeword")
        constants["codeword"] = codeword.to(simulation.device, torch.float32)
    elif isinstance(algorithm, ProxyBank):
        private = {"prototype": simulation.shared["proxies"][client]}

    def loss_of(params: Tensors, pixels: Tensor) -> Tensor:
        outputs = functional_call(simulation.model, (params, simulation.buffers), (pixels,))
        shared = {**simulation.shared, **{n: params[n] for n in algorithm.loss_reads_model}}
        return algorithm.loss(outputs, private, constants, shared)

    return loss_of


def _matched(truth: np.ndarray, images: np.ndarray) -> tuple[float, float]:
    """Mean PSNR and SSIM of a batch against the truth's images under the best pairing."""
    count = len(truth)
    table = np.array([[psnr(t, r) for r in images] for t in truth])
    if count <= 6:
        order = max(
            itertools.permutations(range(count)),
            key=lambda p: sum(table[i, j] for i, j in enumerate(p)),
        )
    else:  # greedy for larger batches
        order = list(np.argmax(table, axis=1))
    values = [(table[i, j], ssim(truth[i], images[j])) for i, j in enumerate(order)]
    return float(np.mean([v[0] for v in values])), float(np.mean([v[1] for v in values]))


def _as_scores(pair: tuple[float, float]) -> dict[str, float]:
    return {"psnr": pair[0], "ssim": pair[1]}


def inversion_audit(
    simulation: Simulation,
    dataset: FederatedDataset,
    settings: InversionSettings,
    secagg: SecAggModel,
    public: Tensor | None,
    rng: np.random.Generator,
    seed: int,
    progress: bool = True,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Invert one target client's plain update and the secure aggregates of the cohorts it is in.

    Returns the scores (JSON) and the images for the figure (truth, mean public face, each
    reconstruction), all ``[B, H, W, C]`` in [0, 1].
    """
    from tqdm.auto import tqdm

    clients = len(dataset.clients)
    cohorts = _fitting(settings.cohorts, clients, settings.skip_large_cohorts, "inversion-cohorts")
    largest = max(cohorts, default=1)
    order = rng.permutation(clients)[:largest]
    target = int(order[0])
    receive(simulation, order)
    batch = settings.batch
    images = []
    for client in order:
        train = dataset.clients[client].train
        images.append(train[rng.choice(len(train), size=batch, replace=len(train) < batch)])
    images = np.stack(images)  # [m, B, H, W, C] uint8
    steps = simulation.config.local_steps
    batches = torch.as_tensor(images)[:, None].expand(-1, steps, *images.shape[1:])
    round_number = simulation.round + 1
    lr = simulation.config.learning_rate(round_number)
    layout = Layout.of(simulation.params)
    thetas, _ = client_parameters(simulation, order, batches.to(simulation.device), lr, layout)
    base = layout.flatten(simulation.params).astype(np.float64)
    sizes = simulation.sizes[order].numpy()
    updates = {"plain": thetas[0] - base}
    for size in cohorts:
        updates[f"cohort {size}"] = secure_update(thetas[:size], base, sizes[:size], secagg, rng)
    truth = images[0].astype(np.float64) / 255.0
    hidden = None
    pictures: dict[str, np.ndarray] = {"original": truth}
    baselines = {}
    if public is not None:
        mean_face = public.numpy().astype(np.float64).mean(0, keepdims=True) / 255.0
        mean_face = np.repeat(mean_face, batch, axis=0)
        pictures["public mean face"] = mean_face
        baselines["public_mean_face"] = _as_scores(_matched(truth, mean_face))
        if simulation.algorithm.output_kind == "codeword":
            hidden = mean_hidden(simulation, public)
    scores: dict[str, Any] = {}
    shape = (batch, *images.shape[2:])
    bar = tqdm(
        total=settings.steps * len(updates),
        desc=f"inversion, round {simulation.round}",
        unit="step",
        disable=None if progress else True,
        leave=False,
    )
    with bar:
        for name, flat in updates.items():
            update = layout.unflatten(flat, simulation.params)
            entry: dict[str, Any] = {}
            codeword = None
            if simulation.algorithm.output_kind == "codeword":
                truth_codeword = simulation.constants["codeword"][target].double().cpu()
                codeword = truth_codeword
                if settings.label == "recovered":
                    estimates = codeword_estimates(update[CODEWORD_WEIGHT].cpu(), hidden)
                    codeword = estimates["projection" if hidden is not None else "svd"]
                entry["codeword_bits_used"] = float(
                    bit_agreement(codeword.numpy(), truth_codeword.numpy()[None])[0]
                )
            loss_of = attack_loss(simulation, target, codeword)
            reconstruction, start, cosine = invert_update(
                loss_of, simulation.params, update, shape, settings, seed=seed, progress=bar
            )
            entry["psnr"], entry["ssim"] = _matched(truth, reconstruction)
            members = [images[i].astype(np.float64) / 255.0 for i in range(len(order))]
            size = 1 if name == "plain" else int(name.split()[1])
            best = max(_matched(member, reconstruction) for member in members[:size])
            entry["best_member_psnr"], entry["best_member_ssim"] = best
            entry["final_cosine"] = cosine
            scores[name] = entry
            pictures[name] = reconstruction
            baselines.setdefault("random_start", _as_scores(_matched(truth, start)))
    result = {
        "round": simulation.round,
        "dataset": dataset.name,
        "method": simulation.algorithm.name,
        "clients": clients,
        "batch": batch,
        "label": settings.label if simulation.algorithm.output_kind == "codeword" else None,
        "steps": settings.steps,
        "tv_weight": settings.tv_weight,
        "lr": settings.lr,
        "baselines": baselines,
        "updates": scores,
    }
    return result, pictures


# ---------------------------------------------------------------------------------------------
# Running an audit
# ---------------------------------------------------------------------------------------------


def _rng(seed: int, part: int) -> np.random.Generator:
    return np.random.default_rng([seed, 0xA0D17, part])


def _secure_trainer(
    simulation: Simulation,
    secagg: SecAggModel,
    rng: np.random.Generator,
    public: Tensor | None,
    record: dict[str, list[np.ndarray]],
) -> Callable[[], float]:
    """A ``step`` for :func:`train_rounds`: a secure round, its ``ΔW ḡ`` and membership recorded."""

    def step() -> float:
        hidden = mean_hidden(simulation, public) if public is not None else None
        chosen, observation, loss = secure_round(simulation, secagg, rng, hidden)
        if observation is not None:
            row = np.zeros(simulation.num_clients)
            row[chosen] = 1.0
            record["membership"].append(row)
            record["observations"].append(observation)
        return loss

    return step


def _feduv_states(
    initial: Simulation,
    trained: Simulation | None,
    rounds: int,
    dataset: FederatedDataset,
    config: RunConfig,
    settings: AuditSettings,
    progress: bool,
) -> dict[str, Any]:
    """Bit recovery at the initial model and a trained one; a fresh setup (``trained`` None) is
    trained here through SecAgg+, and the rounds' aggregates are disaggregated."""
    public = public_samples(dataset, config)
    pool = np.arange(initial.num_clients)
    out: dict[str, Any] = {}
    out["initial"] = bit_recovery(initial, pool, public, settings, _rng(settings.seed, 1), progress)
    if trained is None:
        record: dict[str, list[np.ndarray]] = {"membership": [], "observations": []}
        step = _secure_trainer(initial, settings.secagg, _rng(settings.seed, 2), public, record)
        train_rounds(initial, rounds, progress, f"feduv c={config.code_length} (SecAgg+)", step)
        trained = initial
        if record["observations"]:
            codewords = initial.constants["codeword"].cpu().numpy()
            decode = bch_decoder(config.code_length) if settings.decode else None
            out["disaggregation"] = {
                "cohort": max(1, round(config.fraction * initial.num_clients)),
                "rounds": disaggregation_scores(
                    record["observations"], record["membership"], codewords, decode
                ),
            }
    if trained.round > 0:
        out["trained"] = bit_recovery(
            trained, pool, public, settings, _rng(settings.seed, 3), progress
        )
    return out


def _inversion_states(
    initial: Simulation,
    trained: Simulation | None,
    rounds: int,
    dataset: FederatedDataset,
    config: RunConfig,
    settings: AuditSettings,
    progress: bool,
) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    inversion = settings.inversion
    assert inversion is not None
    public = public_samples(dataset, config)
    results, pictures = {}, {}
    for state in ("initial", "trained"):
        if state == "trained":
            if trained is None:
                if _plain_fedavg(initial):
                    step = _secure_trainer(
                        initial,
                        settings.secagg,
                        _rng(settings.seed, 5),
                        None,
                        {"membership": [], "observations": []},
                    )
                    train_rounds(
                        initial, rounds, progress, f"{config.method} ({dataset.name})", step
                    )
                else:
                    train_rounds(initial, rounds, progress, f"{config.method} ({dataset.name})")
                trained = initial
            if trained.round == 0:
                break
        simulation = initial if state == "initial" else trained
        results[state], pictures[state] = inversion_audit(
            simulation,
            dataset,
            inversion,
            settings.secagg,
            public,
            _rng(settings.seed, 4),
            settings.seed,
            progress,
        )
    return results, pictures


def run_audit(
    out: str | Path,
    run_dir: str | Path | None = None,
    config: RunConfig | None = None,
    settings: AuditSettings | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Audit a run folder (its initial and its trained model) or a fresh setup (``config``:
    built, measured, trained ``config.rounds`` rounds, measured again); write ``audit.json``,
    ``audit.md`` and the figures into ``out``; return the results."""
    from .. import evaluation as ev
    from ..run import load_data, load_run, make_simulation

    settings = settings or AuditSettings()
    folder = Path(out)
    started = time.perf_counter()
    seconds: dict[str, float] = {}
    results: dict[str, Any] = {
        "audit": "uvtrain audit",
        "threat_model": "honest-but-curious server: follows the protocol, keeps what it sees",
        "secagg": dataclasses.asdict(settings.secagg),
        "settings": {
            "cohorts": list(settings.cohorts),
            "cohort_draws": settings.cohort_draws,
            "decode": settings.decode,
            "seed": settings.seed,
            "public_samples": PUBLIC_SAMPLES,
        },
    }
    pictures: dict[str, dict[str, np.ndarray]] = {}
    if run_dir is not None:
        run_config, dataset, trained = load_run(run_dir)
        initial = make_simulation(run_config, dataset)
        results.update(mode="run", run_dir=str(run_dir), setup=run_config.to_dict())
        lengths = (run_config.code_length,) if run_config.method == "feduv" else ()
        if lengths:
            clock = time.perf_counter()
            states = _feduv_states(
                initial, trained, trained.round, dataset, run_config, settings, progress
            )
            results["bit_recovery"] = {str(run_config.code_length): states}
            seconds["bit_recovery"] = time.perf_counter() - clock
        leak = prototype_leak(trained)
        if leak is not None:
            results["leakage"] = {
                run_config.method: {
                    "p_leak": leak,
                    "chance": 1.0 / trained.num_clients,
                    "rounds": trained.round,
                    "clients": trained.num_clients,
                }
            }
        if settings.inversion is not None:
            if dataset.modality != "image":
                results["inversion"] = {"skipped": "the inversion attacks image models only"}
            else:
                clock = time.perf_counter()
                fresh = make_simulation(run_config, dataset)
                results["inversion"], pictures = _inversion_states(
                    fresh, trained, 0, dataset, run_config, settings, progress
                )
                seconds["inversion"] = time.perf_counter() - clock
    else:
        if config is None:
            raise ConfigError("give a run folder or a fresh setup's config")
        results.update(mode="fresh", setup=config.to_dict())
        dataset = load_data(config)
        if config.method == "feduv" and settings.code_lengths:
            clock = time.perf_counter()
            results["bit_recovery"] = {}
            for length in settings.code_lengths:
                setup = dataclasses.replace(config, code_length=length)
                simulation = make_simulation(setup, dataset)
                results["bit_recovery"][str(length)] = _feduv_states(
                    simulation, None, config.rounds, dataset, setup, settings, progress
                )
            seconds["bit_recovery"] = time.perf_counter() - clock
        if settings.methods:
            clock = time.perf_counter()
            results["leakage"] = leakage_audit(settings.methods, config, dataset, progress)
            seconds["leakage"] = time.perf_counter() - clock
        if settings.inversion is not None:
            clock = time.perf_counter()
            code_length = settings.code_lengths[0] if settings.code_lengths else config.code_length
            setup = dataclasses.replace(
                config,
                dataset=settings.inversion.dataset,
                clients=None,
                root=None,
                code_length=code_length,
            )
            faces = load_data(setup)
            if faces.modality != "image":
                raise ConfigError(f"--inversion-dataset {faces.name}: an image dataset")
            results["inversion"], pictures = _inversion_states(
                make_simulation(setup, faces), None, config.rounds, faces, setup, settings, progress
            )
            results["inversion_setup"] = setup.to_dict()
            seconds["inversion"] = time.perf_counter() - clock
    seconds["total"] = time.perf_counter() - started
    results["seconds"] = seconds
    folder.mkdir(parents=True, exist_ok=True)
    results["figures"] = write_figures(results, pictures, folder)
    ev.write_report(folder / AUDIT_JSON, results)
    (folder / AUDIT_MD).write_text(markdown(results))
    return results


# ---------------------------------------------------------------------------------------------
# Figures and summary
# ---------------------------------------------------------------------------------------------


def _save(figure: Any, path: Path) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)
    temporary = path.with_name(f".{path.name}.tmp")
    figure.savefig(temporary, format="png", dpi=120)
    temporary.replace(path)
    return path.name


def _headline(state: dict[str, Any]) -> str:
    return state["attack"]


def plot_bit_recovery(results: dict[str, Any], path: Path) -> str:
    """Bit agreement against the cohort size (1: a plain update), one line per code length and
    state; the chance level (50 %) and a random guess's best member beside it."""
    from matplotlib.figure import Figure

    states = [s for s in ("initial", "trained") if any(s in v for v in results.values())]
    figure = Figure(figsize=(5.2 * len(states), 4.2), layout="constrained")
    for index, state in enumerate(states):
        axes = figure.add_subplot(1, len(states), index + 1)
        chance_max = []
        for length, entry in results.items():
            if state not in entry:
                continue
            data = entry[state]
            attack = _headline(data)
            sizes = [1] + [int(m) for m in data["cohorts"]]
            means = [data["plain"][attack]["mean"]]
            maxes = [data["plain"][attack]["mean"]]
            for m in data["cohorts"]:
                means.append(data["cohorts"][m][attack]["mean"])
                maxes.append(data["cohorts"][m][attack]["max"])
                chance_max.append((int(m), data["cohorts"][m]["random guess"]["max"]))
            (line,) = axes.plot(sizes, [100 * v for v in means], "o-", label=f"c = {length}, mean")
            axes.plot(
                sizes,
                [100 * v for v in maxes],
                "^:",
                color=line.get_color(),
                label=f"c = {length}, best member",
            )
        if chance_max:
            chance_max.sort()
            sizes = sorted({m for m, _ in chance_max})
            values = [np.mean([v for m2, v in chance_max if m2 == m]) for m in sizes]
            axes.plot(
                sizes,
                [100 * v for v in values],
                "x--",
                color="grey",
                label="random guess, best member",
            )
        axes.axhline(50, color="black", linestyle="--", linewidth=1, label="chance (50 %)")
        axes.set_xscale("log")
        axes.set_xlabel("clients in the secure aggregate (1: a plain update)")
        axes.set_ylabel("codeword bits recovered (%)")
        axes.set_ylim(40, 102)
        axes.set_title(f"FedUV codeword bits, {state} model")
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize=7)
    return _save(figure, path)


def plot_disaggregation(results: dict[str, Any], path: Path) -> str:
    """Bit agreement and exact recovery against the number of secure aggregates observed."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.0, 4.2), layout="constrained")
    axes = figure.add_subplot()
    for length, entry in results.items():
        if "disaggregation" not in entry:
            continue
        rounds = entry["disaggregation"]["rounds"]
        xs = [int(r) for r in rounds]
        (line,) = axes.plot(
            xs, [100 * rounds[r]["mean"] for r in rounds], "o-", label=f"c = {length}, bits"
        )
        axes.plot(
            xs,
            [100 * rounds[r]["exact"] for r in rounds],
            "s:",
            color=line.get_color(),
            label=f"c = {length}, whole codewords",
        )
    axes.axhline(50, color="black", linestyle="--", linewidth=1, label="chance (bits)")
    axes.set_xlabel("training rounds observed (secure aggregates, membership known)")
    axes.set_ylabel("recovered (%)")
    axes.set_ylim(-2, 102)
    axes.set_title("FedUV codewords from SecAgg+ aggregates over rounds")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7)
    return _save(figure, path)


def plot_leakage(leakage: dict[str, Any], path: Path) -> str:
    """P_leak per method, with a proxy that says nothing (1/C) marked."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.0, 4.0), layout="constrained")
    axes = figure.add_subplot()
    names = list(leakage)
    values = [leakage[n]["p_leak"] for n in names]
    bars = axes.bar(names, values, color="tab:red")
    for bar, value in zip(bars, values, strict=True):
        axes.text(bar.get_x() + bar.get_width() / 2, value + 0.01, f"{value:.3f}", ha="center")
    chance = leakage[names[0]]["chance"]
    axes.axhline(chance, color="black", linestyle="--", linewidth=1, label=f"1/C = {chance:.3f}")
    axes.set_ylim(0, 1.08)
    axes.set_ylabel("prototype leakage P_leak")
    rounds = leakage[names[0]]["rounds"]
    axes.set_title(f"What the server can match to each client ({rounds} rounds)")
    axes.legend()
    return _save(figure, path)


def plot_inversion(
    inversion: dict[str, Any], pictures: dict[str, dict[str, np.ndarray]], path: Path
) -> str:
    """Rows: model states (and images of the batch); columns: original, mean public face, the
    reconstruction from the plain update and from each secure aggregate, PSNR/SSIM in titles."""
    from matplotlib.figure import Figure

    rows = [(state, i) for state in pictures for i in range(len(pictures[state]["original"]))]
    columns = list(pictures[rows[0][0]])
    figure = Figure(figsize=(1.9 * len(columns), 2.1 * len(rows) + 0.3), layout="constrained")
    grid = figure.subplots(len(rows), len(columns), squeeze=False)
    for r, (state, i) in enumerate(rows):
        for c, name in enumerate(columns):
            axes = grid[r][c]
            image = pictures[state][name][i]
            axes.imshow(
                image[..., 0] if image.shape[-1] == 1 else image, cmap="gray", vmin=0, vmax=1
            )
            axes.set_xticks([])
            axes.set_yticks([])
            if name == "original":
                title = f"{state} (round {inversion[state]['round']})\noriginal"
            elif name == "public mean face":
                base = inversion[state]["baselines"]["public_mean_face"]
                title = f"public mean face\n{base['psnr']:.1f} dB / {base['ssim']:.2f}"
            else:
                entry = inversion[state]["updates"][name]
                title = f"{name}\n{entry['psnr']:.1f} dB / {entry['ssim']:.2f}"
            axes.set_title(title, fontsize=8)
    figure.suptitle("Gradient inversion: PSNR / SSIM against the target's image", fontsize=9)
    return _save(figure, path)


def write_figures(
    results: dict[str, Any], pictures: dict[str, dict[str, np.ndarray]], folder: Path
) -> list[str]:
    """Every figure the results support, as PNG files in ``folder``; their names."""
    written = []
    bits = results.get("bit_recovery")
    if bits:
        written.append(plot_bit_recovery(bits, folder / "bit_recovery.png"))
        if any("disaggregation" in entry for entry in bits.values()):
            written.append(plot_disaggregation(bits, folder / "disaggregation.png"))
    leakage = {k: v for k, v in (results.get("leakage") or {}).items() if v["p_leak"] is not None}
    if leakage:
        written.append(plot_leakage(leakage, folder / "leakage.png"))
    if pictures:
        written.append(plot_inversion(results["inversion"], pictures, folder / "inversion.png"))
    return written


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f} %"


def markdown(results: dict[str, Any]) -> str:
    """``audit.md``: the figures of ``audit.json`` as tables."""
    lines = ["# Privacy audit (honest-but-curious server)", ""]
    setup = results.get("setup", {})
    where = results.get("run_dir") or "a fresh setup"
    secagg = results["secagg"]
    max_weight = secagg["max_weight"] or "the cohort's largest sample count × 1.01"
    lines += [
        f"{setup.get('method')} on {setup.get('dataset')} ({where}); SecAgg+ modelled as Flower's "
        f"on the clients' {secagg['inputs']} (clip ±{secagg['clipping_range']}, 2^22 levels, "
        f"max_weight {max_weight}).",
        "",
    ]
    for length, entry in (results.get("bit_recovery") or {}).items():
        for state in ("initial", "trained"):
            if state not in entry:
                continue
            data = entry[state]
            attack = data["attack"]
            lines += [
                f"## FedUV codeword bits, c = {length}, {state} model (round {data['round']}, "
                f"attack `{attack}`)",
                "",
                "| observed update | bits, mean | bits, best member | whole codeword (raw) | "
                "whole codeword (BCH-decoded) | random guess, best member |",
                "|---|---|---|---|---|---|",
            ]
            plain = data["plain"][attack]
            lines.append(
                f"| one client, plain ({data['clients']} clients) | {_percent(plain['mean'])} | "
                f"min {_percent(plain['min'])} | {_percent(plain['exact'])} | "
                f"{_percent(plain['exact_decoded'])} | — |"
            )
            for size, cohort in data["cohorts"].items():
                scores = cohort[attack]
                lines.append(
                    f"| SecAgg+ of {size} | {_percent(scores['mean'])} | {_percent(scores['max'])} "
                    f"| {_percent(scores['exact'])} | {_percent(scores['exact_decoded'])} | "
                    f"{_percent(cohort['random guess']['max'])} |"
                )
            other = [a for a in data["plain"] if a != attack]
            for name in other:
                lines.append("")
                lines.append(
                    f"Attack `{name}` on the plain updates: {_percent(data['plain'][name]['mean'])}."
                )
            lines.append("")
        if "disaggregation" in entry:
            info = entry["disaggregation"]
            lines += [
                f"## FedUV c = {length}: SecAgg+ aggregates over rounds (cohorts of "
                f"{info['cohort']}, membership known to the server)",
                "",
                "| rounds observed | clients seen | bits | whole codeword (raw) | (BCH-decoded) |",
                "|---|---|---|---|---|",
            ]
            for rounds, scores in info["rounds"].items():
                lines.append(
                    f"| {rounds} | {_percent(scores['clients_seen'])} | {_percent(scores['mean'])} "
                    f"| {_percent(scores['exact'])} | {_percent(scores['exact_decoded'])} |"
                )
            lines.append("")
    leakage = results.get("leakage")
    if leakage:
        lines += [
            "## Prototype leakage",
            "",
            "| method | P_leak | 1/C | rounds |",
            "|---|---|---|---|",
        ]
        for method, entry in leakage.items():
            value = "—" if entry["p_leak"] is None else f"{entry['p_leak']:.3f}"
            lines.append(f"| {method} | {value} | {entry['chance']:.3f} | {entry['rounds']} |")
        lines.append("")
    inversion = results.get("inversion")
    if inversion and "skipped" not in inversion:
        lines += [
            "## Gradient inversion (PSNR dB / SSIM against the target's image)",
            "",
            "| model | observed update | PSNR | SSIM | best member PSNR | FedUV bits used |",
            "|---|---|---|---|---|---|",
        ]
        for state, data in inversion.items():
            for name, base in data["baselines"].items():
                lines.append(
                    f"| {state} (round {data['round']}) | baseline: {name.replace('_', ' ')} | "
                    f"{base['psnr']:.2f} | {base['ssim']:.3f} | — | — |"
                )
            for name, entry in data["updates"].items():
                used = entry.get("codeword_bits_used")
                lines.append(
                    f"| {state} (round {data['round']}) | {name} | {entry['psnr']:.2f} | "
                    f"{entry['ssim']:.3f} | {entry['best_member_psnr']:.2f} | {_percent(used)} |"
                )
        lines.append("")
    elif inversion:
        lines += [f"Gradient inversion: skipped ({inversion['skipped']}).", ""]
    lines.append(f"Figures: {', '.join(results.get('figures', [])) or 'none'}.")
    return "\n".join(lines) + "\n"


def summary_lines(results: dict[str, Any]) -> list[str]:
    """A few lines for the terminal."""
    lines = []
    for length, entry in (results.get("bit_recovery") or {}).items():
        for state in ("initial", "trained"):
            if state not in entry:
                continue
            data = entry[state]
            attack = data["attack"]
            cohorts = ", ".join(
                f"{m}: {_percent(v[attack]['mean'])} (best {_percent(v[attack]['max'])})"
                for m, v in data["cohorts"].items()
            )
            lines.append(
                f"feduv c={length} {state} (round {data['round']}): plain update "
                f"{_percent(data['plain'][attack]['mean'])} of bits [{attack}]; SecAgg+ {cohorts}"
            )
        if "disaggregation" in entry:
            last = list(entry["disaggregation"]["rounds"].items())[-1]
            lines.append(
                f"feduv c={length}: {last[0]} secure aggregates, least squares: "
                f"{_percent(last[1]['mean'])} of bits, {_percent(last[1]['exact'])} whole codewords"
            )
    for method, entry in (results.get("leakage") or {}).items():
        if entry["p_leak"] is not None:
            lines.append(f"{method}: P_leak {entry['p_leak']:.3f} (1/C = {entry['chance']:.3f})")
    inversion = results.get("inversion") or {}
    for state, data in inversion.items():
        if not isinstance(data, dict):
            continue
        parts = ", ".join(
            f"{name} {v['psnr']:.1f} dB / {v['ssim']:.2f}" for name, v in data["updates"].items()
        )
        lines.append(f"inversion {data['method']} {state}: {parts}")
    return lines
