"""``uvtrain audit``: what an honest-but-curious server learns from what the clients send.

The server follows the protocol and keeps everything it sees. Three measurements on real models
(the initial one and a trained one), from the simulation engine's per-client updates, each on
the methods that declare it (:attr:`~uvtrain.algorithms.base.FedAvg.audits`):

1. **Codeword-bit recovery** (``"codeword-bits"``: FedUV). The positive loss
   ``ℓ = max(0, 1 − vᵀσ(W g(x))/c)`` has

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

2. **Prototype leakage** ``P_leak`` (``"prototype-leakage"``: FedAwS, FedGN, FedCS, FedHide,
   softmax) after training: each method's ``prototypes(params, private, shared)`` hook and
   :func:`uvtrain.evaluation.prototype_leakage`, as the run report computes it.

3. **Gradient inversion** (``"inversion"``; Geiping et al., "Inverting Gradients — How easy is it
   to break privacy in federated learning?", NeurIPS 2020): a dummy input is optimised with Adam (signed gradients,
   the learning rate divided by 10 at 3/8, 5/8 and 7/8 of the steps, pixels kept in [0, 1]) to
   maximise the cosine between its parameter gradient and the observed update, with a total
   variation prior (:func:`invert_update`); scored with PSNR and SSIM (:func:`psnr`, :func:`ssim`)
   against the target's images, beside the random start and the mean public face. The attacker
   needs the client's label: FedUV's codeword recovered from the same observed update by (1)
   (``label="recovered"``, the default) or the true one (``"true"``, an upper bound); for the
   other methods the client's private state as the server holds it
   (``server_view_of_private``: FedAwS's class row; FedHide's, FedGN's and FedCS's proxy in
   place of the private prototype).

**Secure aggregation** is modelled as Flower's SecAgg+ computes it (``SecAggPlusWorkflow`` and
``secaggplus_mod`` of flwr 1.x; flwr is not needed here): client k multiplies what it sends — its
update ``θ_k − θ``, as ``uvtrain deploy`` does, or its parameters — by its weight
``r_k = round(n_k / max_weight · Q) / Q``, clips it to ``±clipping_range``, maps it to ``[0, Q]``
and rounds it stochastically to integers (``Q = 2**22``); the server unmasks only the sum,
dequantises it and divides by ``Σ r_k`` (:func:`secure_aggregate`, :func:`secure_update`). The
audit trains a method whose plain update reveals a secret (``update_reveals_secret``: FedUV)
through the same arithmetic: :func:`secure_round` is :func:`uvtrain.rounds.run_round` with the
:class:`SecAggPlus` aggregator.

**Differential privacy** (:mod:`uvtrain.privacy`; ``--dp``, default ``distributed`` at
:data:`~uvtrain.config.SECURE_DEFAULT_EPSILON`, as wherever secure aggregation is on): a fresh
FedUV setup trains one secure run per code length and privacy setting (``--dp-epsilon`` may list
several, ``inf`` for none). Each client's update is clipped (and, distributed, noised) by the
simulation's postprocessing before SecAgg+ quantises it, every member weighs the same, and with
central DP the mechanism adds its noise to the sum SecAgg+ unmasks (:func:`secure_aggregator`); the
least squares run on those noisy aggregates (``audit.json``'s ``disaggregation`` list, one entry
per code length, setting and checkpoint of observed rounds).

Nothing the audit writes holds a codeword or a prototype: rates, PSNR and SSIM only (and the
inversion figure, whose reconstructions are the point of it).

The package, by job:

=================  ===========================================================================
``settings``       the options, presets and defaults; :func:`resolve`
``secagg``         the SecAgg+ arithmetic, :class:`Layout`, the :class:`SecAggPlus` aggregator
``training``       the clients' updates and the secure round, through the engine's own code
``bits``           (1) codeword bits: estimates, cohorts, disaggregation, BCH decoding
``leakage``        (2) ``P_leak``
``inversion``      (3) gradient inversion, PSNR and SSIM
``runner``         :func:`run_audit`: what runs on which model
``report``         ``audit.json``, ``audit.md``, the figures, the terminal's summary
=================  ===========================================================================
"""

from .bits import (
    ATTACKS,
    CODEWORD_WEIGHT,
    bch_decoder,
    bit_agreement,
    bit_recovery,
    code_length,
    codeword_estimates,
    disaggregate,
    disaggregation_scores,
    mean_hidden,
    public_samples,
)
from .inversion import attack_loss, inversion_audit, invert_update, psnr, ssim, total_variation
from .leakage import leakage_audit, prototype_leak
from .report import (
    AUDIT_JSON,
    AUDIT_MD,
    LEAKAGE_VS_EPSILON,
    dp_label,
    markdown,
    plot_bit_recovery,
    plot_disaggregation,
    plot_inversion,
    plot_leakage,
    plot_leakage_vs_epsilon,
    summary_lines,
    write_figures,
)
from .runner import run_audit
from .secagg import (
    Layout,
    SecAggError,
    SecAggPlus,
    dequantize,
    quantize,
    secure_aggregate,
    secure_update,
    stochastic_round,
)
from .settings import (
    DEFAULTS,
    PRIVACY_OPTIONS,
    PUBLIC_SAMPLES,
    SETUP_OPTIONS,
    SMALL_PRESET,
    AuditSettings,
    InversionSettings,
    SecAggModel,
    leakage_methods,
    parse_epsilons,
    parse_methods,
    parse_sizes,
    privacy_settings,
    resolve,
)
from .training import client_parameters, secure_aggregator, secure_round, train_rounds

__all__ = [
    "ATTACKS",
    "AUDIT_JSON",
    "AUDIT_MD",
    "CODEWORD_WEIGHT",
    "DEFAULTS",
    "LEAKAGE_VS_EPSILON",
    "PRIVACY_OPTIONS",
    "PUBLIC_SAMPLES",
    "SETUP_OPTIONS",
    "SMALL_PRESET",
    "AuditSettings",
    "InversionSettings",
    "Layout",
    "SecAggError",
    "SecAggModel",
    "SecAggPlus",
    "attack_loss",
    "bch_decoder",
    "bit_agreement",
    "bit_recovery",
    "client_parameters",
    "code_length",
    "codeword_estimates",
    "dequantize",
    "disaggregate",
    "disaggregation_scores",
    "dp_label",
    "inversion_audit",
    "invert_update",
    "leakage_audit",
    "leakage_methods",
    "markdown",
    "mean_hidden",
    "parse_epsilons",
    "parse_methods",
    "parse_sizes",
    "plot_bit_recovery",
    "plot_disaggregation",
    "plot_inversion",
    "plot_leakage",
    "plot_leakage_vs_epsilon",
    "privacy_settings",
    "prototype_leak",
    "psnr",
    "public_samples",
    "quantize",
    "resolve",
    "run_audit",
    "secure_aggregate",
    "secure_aggregator",
    "secure_round",
    "secure_update",
    "ssim",
    "stochastic_round",
    "summary_lines",
    "total_variation",
    "train_rounds",
    "write_figures",
]
