"""User-level differential privacy for the one round (:mod:`uvtrain.rounds`): a mechanism behind
one protocol (:class:`Mechanism`: a user half, a server half, its state and its plan; adaptive
clipping included) placed centrally or distributed by composition (:class:`Central`,
:class:`Distributed` around :class:`UserLevelDP`, or DP-FTRL's :class:`DPFTRL`), and a run's
plan (:class:`PrivacyPlan`), whose figures the accountant computes (:mod:`uvtrain.accounting`,
pure numbers). The simulator (:class:`PrivateUsers`, :class:`PrivateSum`), the audit (the same
over its SecAgg+ transport) and the Flower devices and server (``uvdeploy``) all run it.

::

    plan.py       PrivacyPlan, plan_privacy(privacy, *, rounds, cohort, users): the figures
    noise.py      clipping, Gaussian draws, where each draw comes from (seeded or secret)
    gaussian.py   UserLevelDP: DP-FedAvg's Gaussian mechanism apart from its placement
    tree.py       TreeNoise and DPFTRL: the same mechanism with tree-aggregated noise
    mechanism.py  the Mechanism protocol, Central and Distributed, MECHANISMS,
                  mechanism_from_plan, PrivateUsers and PrivateSum

A new mechanism is one file (a subclass of :class:`UserLevelDP` that overrides what differs)
and its line in :data:`MECHANISMS` (:mod:`uvtrain.privacy.mechanism`).

The mechanism is DP-FedAvg (McMahan et al., ICLR 2018) with the noise placed as in Kairouz et al.
(ICML 2021) when the server must not see it:

1. each participating client's update ``δ_k = θ_k − θ`` is clipped to L2 norm ``C`` over all of
   its trainable parameters, ``δ̂_k = δ_k · min(1, C / ‖δ_k‖)`` (the user half, :meth:`UserLevelDP.constrain`);
2. the round's *sum* ``Σ_k δ̂_k`` carries Gaussian noise of standard deviation ``z·C``
   (``z`` the noise multiplier):

   - ``central``: the server adds ``N(0, z²C²)`` after summing (:class:`Central`); it protects
     the released model and trusts the server;
   - ``distributed``: each client adds its share ``N(0, z²C²/m)`` before secure aggregation
     (in the user half, :class:`Distributed`), so that the sum of the ``m`` shares has the full noise and the
     server only ever sees the noisy sum;

3. the new model is ``θ + (Σ_k δ̂_k + noise) / (qN)``: the sum divided by the *expected* cohort
   ``qN``, fixed before training, not by the realised count (McMahan et al.'s fixed-denominator
   estimator ``f̃_f``, Algorithm 1: the realised count would be one more thing to protect);
   every client weighs the same (a sample-count weight would let one user's influence exceed
   ``C``).

**Sampling.** Each round's cohort is Poisson-sampled: each of the ``N`` users takes part
independently with probability ``q`` (:func:`uvtrain.rounds.poisson_cohort`, from ``(seed,
round)``; the simulator's clients and the Flower server's devices alike), so the cohort's size
varies around ``qN`` and may be 0 — such a round releases the noise alone.

**Adaptive clipping** (Andrew, Thakkar, McMahan and Ramaswamy, "Differentially Private
Learning with Adaptive Clipping", NeurIPS 2021; :class:`AdaptiveClipping`): instead of a fixed
``C``, the clip norm follows the ``γ``-quantile of the clients' update norms. Each round every
client also reports the bit ``b_k = 1[‖δ_k‖ ≤ C_r] − ½``, shifted to ``±½`` as in their Sec. 3.1
(and TFF's ``QuantileAdaptiveClipSumQuery``, TF-Privacy's ``QuantileEstimatorQuery``); the
server sees ``b̃ = (Σ_k b_k + N(0, σ_b²)) / (qN) + ½`` (in ``distributed`` each client adds its
share of that noise too) and moves the norm geometrically, ``C_{r+1} = C_r · exp(−η_C (b̃ − γ))``.
Adding or removing a user moves the sum of shifted bits by ½ and the sum of updates by ``C``:
the pair is one Gaussian mechanism of multiplier ``z = (z_Δ⁻² + (2σ_b)⁻²)^(−½)``, and the
update's share of a budget ``z`` is ``z_Δ = (z⁻² − (2σ_b)⁻²)^(−½)`` (their Theorem 1,
:func:`update_noise_multiplier`).

**Simulated deployment scale** (pfl-research's ``noise_cohort_size``; :attr:`PrivacyPlan.
noise_cohort`): a simulation trains cohorts of ``m`` (expected) from its ``N`` users but adds the
noise a deployment's cohort of ``M ≥ m`` would get, scaled by ``m/M``: the sum carries
``N(0, (z_Δ·C·m/M)²)`` and the count ``N(0, (σ_b·m/M)²)``, so after the division by ``m`` the
model and the clip fraction carry exactly the noise of the deployment's ``(sum + N(0, (z_Δ C)²))
/ M``. The accountant takes the deployment's rate ``q = M / N_dep`` (``N_dep`` its population),
``δ`` defaults from ``N_dep``, and ``σ_b`` from ``M``. What the simulation cannot give is the
averaging of ``M`` users' signal (it averages ``m``): its accuracy is the deployment's only as far
as the ``m``-user mean stands for the ``M``-user one, which is why every report names such a run
"simulated deployment scale", never a real cohort.

**Accounting: two ε, against two adversaries.** Both under add/remove-one adjacency (one user's
data present or absent), for the same ``δ``:

- :func:`epsilon_release` (and :func:`noise_multiplier`, which a budget sets the noise by): the
  Poisson-subsampled Gaussian (``PoissonSampledDpEvent(q, GaussianDpEvent(z))``) composed over
  the run's rounds, read from Google's ``dp-accounting`` privacy loss distribution (PLD;
  pessimistic, so an upper bound within its loss bucket of the exact ``ε``), with its RDP
  accountant (Mironov, Talwar and Zhang, "Rényi Differential Privacy of the Sampled Gaussian
  Mechanism", 2019; the figure DP-FedAvg's literature states, McMahan et al. 2018, Andrew et al.
  2021) beside it as the cross-check: the smaller of the two upper bounds, which is the PLD's.
  It rests on amplification by subsampling, so it holds against whoever sees the released
  models but does not know who was sampled.
- :func:`epsilon_server`: the server draws each round's cohort (from a seed it holds, in the
  simulator and on Flower alike), so against it there is no amplification: a user who joined
  ``k`` rounds is protected by the Gaussian mechanism of multiplier ``z`` composed ``k`` times,
  which is exactly one Gaussian mechanism of multiplier ``z/√k``, computed in closed form
  (Balle and Wang, ICML 2018, Theorem 8; dp-accounting's PLD ``GaussianPrivacyLoss``). Before
  training ``k`` is the most rounds a user can join (Poisson sampling has no cap: every round),
  with the expected ``⌈qR⌉`` beside it; after a simulation, the most rounds any of its users
  joined. In ``distributed`` the server sees only the noisy sums, so this is the guarantee
  against it; in ``central`` it adds the noise itself and sees the updates, so nothing bounds
  it, and this ε holds against anyone else who learns the cohorts (its logs, its operator).

:func:`membership_eer_floor` (the lowest EER of any test of "was this user in training", which
bounds FedUV's codeword verification) reads the same PLD: RDP overstates ``δ(ε)`` most where
the floor is decided (small ``ε``), and at the deployment-scale sampling rates RDP's ``ε`` is
1.18–2.92× the PLD's (``python benchmarks/pld_slack.py``; docs/privacy.md), which is why both
figures are the PLD's since issue 45.

Everything random is drawn from ``(seed, round, client)``, so a resumed DP run is bit-exact.
"""

from .gaussian import UserLevelDP
from .mechanism import (
    MECHANISMS,
    PLACEMENTS,
    Central,
    Distributed,
    Mechanism,
    Placement,
    PrivateSum,
    PrivateUsers,
    Summation,
    mechanism_from_plan,
    place,
)
from .noise import (
    CLIENT_COUNT_NOISE,
    CLIENT_UPDATE_NOISE,
    SERVER_COUNT_NOISE,
    SERVER_UPDATE_NOISE,
    TREE_NOISE,
    NoiseSource,
    add_noise,
    clip_updates,
    scalar_noise,
    secret_generator,
    secret_noise,
    seeded_noise,
    update_norms,
)
from .plan import (
    ACCOUNTANT,
    ADVERSARIES,
    COUNT_BITS,
    NEIGHBORING_RELATION,
    PERIOD_ACCOUNTANT,
    PERIOD_ADVERSARIES,
    PERIOD_SAMPLING,
    SAMPLING,
    SERVER_ACCOUNTANT,
    AdaptiveClipping,
    PrivacyPlan,
    check_tree,
    plan_privacy,
)
from .tree import DPFTRL, TreeNoise, prefix_nodes

__all__ = [
    "ACCOUNTANT",
    "ADVERSARIES",
    "CLIENT_COUNT_NOISE",
    "CLIENT_UPDATE_NOISE",
    "COUNT_BITS",
    "DPFTRL",
    "MECHANISMS",
    "NEIGHBORING_RELATION",
    "PERIOD_ACCOUNTANT",
    "PERIOD_ADVERSARIES",
    "PERIOD_SAMPLING",
    "PLACEMENTS",
    "SAMPLING",
    "SERVER_ACCOUNTANT",
    "SERVER_COUNT_NOISE",
    "SERVER_UPDATE_NOISE",
    "TREE_NOISE",
    "AdaptiveClipping",
    "Central",
    "Distributed",
    "Mechanism",
    "NoiseSource",
    "Placement",
    "PrivacyPlan",
    "PrivateSum",
    "PrivateUsers",
    "Summation",
    "TreeNoise",
    "UserLevelDP",
    "add_noise",
    "check_tree",
    "clip_updates",
    "mechanism_from_plan",
    "place",
    "plan_privacy",
    "prefix_nodes",
    "scalar_noise",
    "secret_generator",
    "secret_noise",
    "seeded_noise",
    "update_norms",
]
