"""``uvtrain audit``: the SecAgg+ arithmetic, PSNR/SSIM, the attacks and the command."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from typer.testing import CliRunner  # noqa: E402

from uvtrain import audit  # noqa: E402
from uvtrain.cli import app  # noqa: E402
from uvtrain.config import RunConfig  # noqa: E402

runner = CliRunner()
Q = 2**22
STEP = 16 / Q  # one quantisation level with the clipping range 8


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("audit-data")


@pytest.fixture()
def data_env(data_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("UVTRAIN_DATA", str(data_root))
    return data_root


# -- SecAgg+ ------------------------------------------------------------------------------------


def test_quantize_clips_and_maps_onto_the_integer_range() -> None:
    rng = np.random.default_rng(0)
    values = np.array([10.0, -9.0, 0.0, 8.0, -8.0, 3 * STEP, -8.0 + 5 * STEP])
    # (clip(x, -8, 8) + 8) · Q / 16, already integers here: rounding cannot move them
    expected = [Q, 0, Q // 2, Q, 0, Q // 2 + 3, 5]
    assert audit.quantize(values, 8.0, Q, rng).tolist() == expected
    assert audit.dequantize(np.array(expected), 8.0, Q).tolist() == pytest.approx(
        [8.0, -8.0, 0.0, 8.0, -8.0, 3 * STEP, -8.0 + 5 * STEP], abs=0
    )
    # the sum of two quantised vectors comes back with the offset of two ranges
    assert audit.dequantize(np.array([Q + 0]), 8.0, Q, count=2).tolist() == [0.0]


def test_stochastic_rounding_is_unbiased_between_the_two_neighbours() -> None:
    rng = np.random.default_rng(1)
    values = np.full(40_000, 7.25)
    rounded = audit.stochastic_round(values, rng)
    assert set(np.unique(rounded).tolist()) == {7, 8}
    assert rounded.mean() == pytest.approx(7.25, abs=0.01)


def test_stochastic_rounding_matches_flower() -> None:
    quantization = pytest.importorskip("flwr.common.secure_aggregation.quantization")
    values = np.array([10.0, -9.0, 0.0, 3 * STEP, -1.0, 7.5])  # all on the grid
    ours = audit.quantize(values, 8.0, Q, np.random.default_rng(0))
    assert ours.tolist() == quantization.quantize([values], 8.0, Q)[0].tolist()


def test_secure_aggregate_is_the_weighted_mean_of_clipped_parameters() -> None:
    rng = np.random.default_rng(2)
    model = audit.SecAggModel(max_weight=4.0)
    # weights 1/4 and 3/4; r_k θ_k on the grid, so the aggregate is exact
    parameters = np.array([[1.0, 4 * STEP, 100.0], [-1.0, 0.0, 100.0]])
    result = audit.secure_aggregate(parameters, [1, 3], model, rng)
    # 100 is clipped after weighting: r θ = 25 and 75 → 8 each, (8 + 8) / 1
    assert result.tolist() == [0.25 - 0.75, 0.25 * 4 * STEP, 16.0]


def test_secure_aggregate_with_flower_weights_is_the_mean_within_its_precision() -> None:
    rng = np.random.default_rng(3)
    parameters = rng.normal(0, 0.1, size=(5, 2000))
    sizes = np.array([10, 10, 20, 10, 30])
    flower = audit.SecAggModel(max_weight=1000.0)  # SecAggPlusWorkflow's default
    result = audit.secure_aggregate(parameters, sizes, flower, rng)
    exact = (sizes[:, None] * parameters).sum(0) / sizes.sum()
    # each member rounds r_k θ_k to STEP: the error is below m · STEP / Σ r_k
    bound = len(sizes) * STEP / (sizes.sum() / 1000)
    assert np.abs(result - exact).max() <= bound
    assert np.abs(result - exact).max() > 0  # it is rounded, not exact


def test_secure_update_as_uvtrain_deploy_sends_it() -> None:
    """Updates θ_k − θ with max_weight = 1.01 × the largest n_k: weights near 1, fine steps."""
    rng = np.random.default_rng(4)
    base = rng.normal(0, 1, size=500)
    parameters = base + rng.normal(0, 1e-2, size=(3, 500))
    sizes = np.array([10, 10, 10])
    model = audit.SecAggModel()
    assert (model.inputs, model.max_weight) == ("updates", None)
    update = audit.secure_update(parameters, base, sizes, model, rng)
    exact = parameters.mean(0) - base
    # every r_k = round(Q / 1.01) / Q: each member's value is rounded to STEP / r_k at most
    assert np.abs(update - exact).max() <= STEP * 1.01 + 1e-12
    as_parameters = audit.SecAggModel(inputs="parameters", max_weight=1000.0)
    coarse = audit.secure_update(parameters, base, sizes, as_parameters, rng)
    assert np.abs(coarse - exact).max() > 10 * np.abs(update - exact).max()


def test_secure_aggregate_refuses_a_weight_that_rounds_to_zero() -> None:
    with pytest.raises(ValueError):
        audit.secure_aggregate(
            np.zeros((1, 3)), [1e-9], audit.SecAggModel(max_weight=1.0), np.random.default_rng()
        )


@pytest.mark.parametrize("mechanism", ["central", "distributed"])
def test_secagg_plus_with_equal_weights_is_the_dp_sum_within_one_step(mechanism: str) -> None:
    """Clipped (and, distributed, noised) updates through SecAgg+ as the transport under the
    mechanism's server half: θ + (Σ_k δ̂_k + n) / (qN), as the plain DP sum computes it, to
    within the quantisation; the sample counts (very unequal here) do not weigh."""
    from uvtrain.privacy import PrivateSum, PrivateUsers, UserLevelDP, place, seeded_noise
    from uvtrain.rounds import ClientUpdates, RoundPlan

    generator = torch.Generator().manual_seed(8)
    count, clip_norm, noise = 6, 0.5, 1.3  # z·C on the sum: 0.65
    base = {"w": torch.randn(20, 5, generator=generator), "b": torch.randn(7, generator=generator)}
    deltas = {k: torch.randn(count, *v.shape, generator=generator) for k, v in base.items()}
    sizes = torch.tensor([1.0, 3.0, 10.0, 40.0, 2.0, 7.0])
    plan = RoundPlan(4, np.arange(count), 0.1)
    dp = place(mechanism, UserLevelDP(clip_norm, noise, 8.0, noise=seeded_noise(3)))  # qN, not 6
    updates = ClientUpdates(torch.arange(count), sizes, torch.zeros(count, 1), deltas=deltas)
    updates = PrivateUsers(dp)(updates, base, plan)
    expected, _ = PrivateSum(dp)(updates, base, plan)
    secure = PrivateSum(dp, audit.SecAggPlus(audit.SecAggModel(), np.random.default_rng(9)))
    result, _ = secure(updates, base, plan)
    # one level per member at r = round(Q / 1.01) / Q, over Σ r: STEP · 1.01, times m / qN
    for name in base:
        assert float((result[name] - expected[name]).abs().max()) <= STEP * 1.01 + 1e-6
    # the noise is there: far from the noise-free mean of the clipped updates
    clipped = dp.underlying.clip(deltas)
    plain = {k: base[k] + clipped[k].sum(0) / 8.0 for k in base}
    assert max(float((result[k] - plain[k]).abs().max()) for k in base) > 0.1


# -- PSNR and SSIM ------------------------------------------------------------------------------


def test_psnr_against_hand_computed_values() -> None:
    image = np.random.default_rng(4).random((16, 16))
    assert math.isinf(audit.psnr(image, image))
    # a constant error of 0.25: MSE 0.0625, PSNR = 10 log10(1 / 0.0625) = 12.0412 dB
    assert audit.psnr(np.full((8, 8), 0.5), np.full((8, 8), 0.25)) == pytest.approx(12.041200, 1e-6)
    # data range 255, every pixel off by 1: 10 log10(255²) = 48.1308 dB
    assert audit.psnr(np.zeros((4, 4)), np.ones((4, 4)), 255.0) == pytest.approx(48.130803, 1e-6)


def test_ssim_against_hand_computed_values() -> None:
    rng = np.random.default_rng(5)
    image = rng.random((32, 32, 1))
    assert audit.ssim(image, image) == pytest.approx(1.0, abs=1e-12)
    # flat images: only the luminance term, (2 μa μb + C1) / (μa² + μb² + C1), C1 = 1e-4
    a, b = np.full((20, 20), 0.5), np.full((20, 20), 0.25)
    assert audit.ssim(a, b) == pytest.approx((0.25 + 1e-4) / (0.3125 + 1e-4), abs=1e-12)
    # symmetric, and an image against its negative is anti-correlated
    other = rng.random((32, 32, 1))
    assert audit.ssim(image, other) == pytest.approx(audit.ssim(other, image), abs=1e-12)
    assert audit.ssim(image, 1.0 - image) < 0.0 < audit.ssim(image, 0.5 * image + 0.25)
    with pytest.raises(ValueError):
        audit.ssim(np.zeros((8, 8)), np.zeros((8, 8)))  # smaller than the 11×11 window


# -- codeword bits ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def feduv(data_root: Path) -> tuple:
    """FedUV at its initial model on formant-voices: 16 clients, c = 127."""
    import os

    from uvtrain.run import load_data, make_simulation

    previous = os.environ.get("UVTRAIN_DATA")
    os.environ["UVTRAIN_DATA"] = str(data_root)
    try:
        config = RunConfig.from_flat(
            dict(method="feduv", dataset="formant-voices", batch_size=4, device="cpu")
        )
        dataset = load_data(config)
    finally:
        if previous is None:
            os.environ.pop("UVTRAIN_DATA")
        else:
            os.environ["UVTRAIN_DATA"] = previous
    return config, dataset, make_simulation(config, dataset)


def test_one_plain_update_gives_the_codeword_and_a_big_aggregate_only_its_majority(
    feduv: tuple,
) -> None:
    config, dataset, simulation = feduv
    pool = np.arange(simulation.num_clients)
    settings = audit.AuditSettings(cohorts=(2, 15), cohort_draws=3, decode=False)
    result = audit.bit_recovery(
        simulation, pool, audit.public_samples(dataset, config), settings,
        np.random.default_rng(0), progress=False,
    )  # fmt: skip
    plain = result["plain"]["projection"]
    assert plain["min"] >= 0.95 and plain["exact"] >= 0.9  # the reported attack: 127/127
    every = result["cohorts"]["15"]["projection"]
    # The sum of 15 clients' updates shows their majority vote, not any one codeword: a member
    # agrees with the majority on a bit with probability 1/2 + C(14, 7) / 2^15 = 0.605.
    assert every["majority"] >= 0.95
    assert 0.5 <= every["mean"] <= 0.72 and every["exact"] == 0.0
    assert result["cohorts"]["2"]["projection"]["mean"] > every["mean"]


def test_a_secure_round_under_dp_clips_each_update_before_secagg(feduv: tuple) -> None:
    """The audit's secure round runs the simulation's postprocessing (the DP clipping) before
    SecAgg+, with equal weights: the unmasked mean update is within the clip norm."""
    import dataclasses

    from uvtrain.config import Privacy
    from uvtrain.run import make_simulation

    config, dataset, _ = feduv
    clip_norm = 0.05
    private = dataclasses.replace(
        config, privacy=Privacy("central", dp_noise_multiplier=1e-6, clip_norm=clip_norm)
    )
    simulation = make_simulation(private, dataset)
    from uvtrain.privacy import PrivateSum

    aggregator = audit.secure_aggregator(simulation, audit.SecAggModel(), np.random.default_rng(0))
    assert isinstance(aggregator, PrivateSum) and aggregator.mechanism is simulation.mechanism
    assert isinstance(aggregator.transport, audit.SecAggPlus)
    before = dict(simulation.params)
    result = audit.secure_round(simulation, aggregator)
    assert result.metrics["clipped"] > 0  # FedUV's updates are larger than 0.05
    assert result.metrics["epsilon"] == simulation.privacy.spent_release(1)
    released = {k: result.params[k].double() - before[k].double() for k in before}
    norm = math.sqrt(sum(float(v.pow(2).sum()) for v in released.values()))
    parameters = sum(v.numel() for v in released.values())
    # Σ over m′ clipped updates over qN, plus quantisation and float32 rounding, taken by the
    # server optimiser's η (plain sgd: FedUV's default steps η = 5 times the release)
    cohort = len(result.updates.clients) / simulation.mechanism.underlying.denominator
    step = simulation.server_optimizer
    assert step.kind == "sgd"
    bound = clip_norm * cohort + math.sqrt(parameters) * (STEP * 1.01 + 1e-6)
    assert norm <= step.lr * bound
    plain = make_simulation(config, dataset)  # without DP: SecAgg+'s weighted mean, as before
    aggregator = audit.secure_aggregator(plain, audit.SecAggModel(), np.random.default_rng())
    assert isinstance(aggregator, audit.SecAggPlus)


def test_codeword_estimates_read_the_signs_of_a_rank_one_update() -> None:
    rng = np.random.default_rng(6)
    codeword = rng.choice([-1.0, 1.0], size=31)
    hidden = torch.as_tensor(rng.random(8) + 0.5)
    delta = 0.01 * np.outer(codeword, hidden.numpy()) + 1e-5 * rng.normal(size=(31, 8))
    estimates = audit.codeword_estimates(delta, hidden)
    assert estimates["projection"].numpy().tolist() == codeword.tolist()
    assert estimates["svd"].numpy().tolist() == codeword.tolist()  # right vector sums > 0


def test_disaggregation_solves_the_rounds_for_every_client() -> None:
    rng = np.random.default_rng(7)
    clients, rounds, length = 20, 60, 63
    codewords = rng.choice([-1.0, 1.0], size=(clients, length))
    membership = np.zeros((rounds, clients))
    for row in membership:
        row[rng.choice(clients, size=5, replace=False)] = 1.0
    observations = membership @ codewords * rng.uniform(0.5, 2.0, size=(rounds, 1))
    observations += 0.05 * rng.normal(size=observations.shape)
    guesses = audit.disaggregate(observations, membership)
    # one aggregate alone is only the majority of its 5 members, about 69 % of each one's bits
    assert audit.bit_agreement(guesses, codewords).mean() >= 0.97


def test_disaggregation_recovers_clipped_updates_and_not_through_dp_noise() -> None:
    """Each client's contribution clipped to norm C (its codeword's direction), the rounds'
    sums of cohorts of 6 of 30: without noise, least squares gives every codeword exactly; with
    N(0, (z·C)²) on each round's sum, z = 5, about chance (each client takes part ~40 times:
    noise z·C/√40 against a signal of C/√127 per bit, 55 % expected)."""
    rng = np.random.default_rng(11)
    clients, rounds, length, cohort, clip_norm, z = 30, 200, 127, 6, 1.0, 5.0
    codewords = rng.choice([-1.0, 1.0], size=(clients, length))
    contributions = clip_norm * codewords / math.sqrt(length)
    membership = np.zeros((rounds, clients))
    for row in membership:
        row[rng.choice(clients, size=cohort, replace=False)] = 1.0
    sums = membership @ contributions
    exact = audit.disaggregate(sums, membership)
    assert np.array_equal(exact, codewords)
    noisy = sums + rng.normal(0.0, z * clip_norm, size=sums.shape)
    agreement = audit.bit_agreement(audit.disaggregate(noisy, membership), codewords)
    assert agreement.mean() <= 0.6 and agreement.max() < 0.75


# -- gradient inversion -------------------------------------------------------------------------


def test_inversion_recovers_the_input_of_a_linear_layer() -> None:
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 4)
    params = {"weight": layer.weight.detach().clone(), "bias": layer.bias.detach().clone()}
    targets = torch.tensor([1.0, -1.0, 0.5, 0.0])

    def loss_of(values: dict, pixels: torch.Tensor) -> torch.Tensor:
        outputs = torch.nn.functional.linear(pixels.reshape(len(pixels), -1) / 255.0, **values)
        return ((outputs - targets) ** 2).mean()

    truth = torch.rand(1, 8, 8, 1, generator=torch.Generator().manual_seed(1))
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    grads = torch.autograd.grad(loss_of(leaves, truth * 255.0), list(leaves.values()))
    update = {name: -0.1 * grad for name, grad in zip(leaves, grads, strict=True)}
    settings = audit.InversionSettings(steps=100, tv_weight=0.0)
    images, start, cosine = audit.invert_update(loss_of, params, update, truth.shape, settings, 3)
    assert cosine > 0.999
    assert audit.psnr(truth.numpy(), images) > audit.psnr(truth.numpy(), start) + 15.0


# -- the command --------------------------------------------------------------------------------


def uvtrain(*args: str | Path):
    return runner.invoke(app, [str(a) for a in args])


def test_audit_small_writes_the_numbers_and_figures(data_env: Path, tmp_path: Path) -> None:
    out = tmp_path / "audit"
    result = uvtrain("audit", "--method", "feduv", "--dataset", "formant-voices", "--small",
                     "--out", out)  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((out / "audit.json").read_text())
    assert report["mode"] == "fresh"
    bits = report["bit_recovery"]["127"]
    assert bits["initial"]["plain"][bits["initial"]["attack"]]["mean"] >= 0.95
    assert set(bits["trained"]["cohorts"]) == {"2", "5", "10"}
    # the default: distributed DP at the secure default ε, over the audit's rounds
    (last,) = [e for e in report["disaggregation"] if e["rounds"] == 3]
    assert last["dp"]["mechanism"] == "distributed" and last["dp"]["rounds"] == 3
    assert last["dp"]["epsilon"] == pytest.approx(8.0, rel=0.01)
    assert bits["trained"]["dp"] == last["dp"]
    assert set(report["leakage"]) == {"fedhide", "fedaws"}
    assert report["leakage"]["fedaws"]["p_leak"] == 1.0
    inverted = report["inversion"]["initial"]["updates"]
    assert set(inverted) == {"plain", "cohort 2"} and inverted["plain"]["psnr"] > 0
    for name in ("bit_recovery.png", "disaggregation.png", "leakage.png", "inversion.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    assert "SecAgg+ of 10" in (out / "audit.md").read_text()
    # rates and scores only: no list of ±1 bits (a codeword) anywhere in the file
    text = (out / "audit.json").read_text()
    assert "-1.0,\n" not in text and "[\n      1.0" not in text


def test_audit_of_a_run_folder(feduv_run_copy: Path) -> None:
    # feduv, formant-voices, 8 clients, fraction 0.5, batch 4, 2 rounds (tests/conftest.py)
    run = feduv_run_copy
    result = uvtrain("audit", run, "--small", "--no-inversion")
    assert result.exit_code == 0, result.output
    report = json.loads((run / "audit" / "audit.json").read_text())
    assert report["mode"] == "run" and report["setup"]["clients"] == 8
    bits = report["bit_recovery"]["127"]
    assert (bits["initial"]["round"], bits["trained"]["round"]) == (0, 2)
    # the preset's cohort of 10 does not fit 8 clients: left out, not an error
    assert set(bits["trained"]["cohorts"]) == {"2", "5"}
    assert (run / "audit" / "bit_recovery.png").is_file()
    # a cohort size given explicitly must fit
    too_big = uvtrain("audit", run, "--small", "--cohorts", "2,9", "--no-inversion")
    assert too_big.exit_code == 2 and "cohort of 9" in too_big.output


@pytest.mark.parametrize(
    ("flags", "mechanisms"),
    [
        (("--dp", "distributed"), ["distributed"]),
        (("--dp", "off"), [None]),
        (("--dp-epsilon", "inf,8"), [None, "distributed"]),
        (("--dp", "central", "--dp-noise-multiplier", "2", "--clip-norm", "0.5"), ["central"]),
        (
            (
                "--dp",
                "central",
                "--dp-noise",
                "tree",
                "--dp-noise-multiplier",
                "2",
                "--clip-norm",
                "0.5",
            ),
            ["central"],
        ),  # DP-FTRL through the audit's SecAgg+ transport
    ],
)
def test_audit_with_dp_writes_a_disaggregation_entry_per_setting(
    data_env: Path, tmp_path: Path, flags: tuple, mechanisms: list
) -> None:
    out = tmp_path / "audit"
    # the small preset, smaller: 8 clients, cohorts of 2, no single-round cohorts, 4 rounds
    result = uvtrain("audit", "--method", "feduv", "--dataset", "formant-voices", "--small",
                     "--no-inversion", "--methods", "none", "--cohorts", "none", "--clients", "8",
                     "--rounds", "4", *flags, "--out", out)  # fmt: skip
    assert result.exit_code == 0, result.output
    entries = json.loads((out / "audit.json").read_text())["disaggregation"]
    runs = [e["dp"] and e["dp"]["mechanism"] for e in entries if e["rounds"] == 4]
    assert runs == mechanisms
    assert {e["rounds"] for e in entries} == {1, 2, 4}  # the checkpoints of each run
    for entry in entries:
        assert entry["code_length"] == 127 and entry["whole_decoded"] is None  # --small
        for key in ("bits", "whole_raw", "clients_seen"):
            assert 0.0 <= entry[key] <= 1.0, (key, entry)
        if entry["dp"] is None:
            assert entry["epsilon_spent"] is None
            continue
        for key in ("mechanism", "epsilon", "noise_multiplier", "clip_norm"):
            assert entry["dp"][key] is not None, key
        assert 0 < entry["epsilon_spent"] <= entry["dp"]["epsilon"] * (1 + 1e-9)
    if "central" in mechanisms:
        assert entries[-1]["dp"]["noise_multiplier"] == 2.0
        assert entries[-1]["dp"]["clip_norm"] == 0.5
    figure = out / audit.LEAKAGE_VS_EPSILON
    assert figure.is_file() == (len(mechanisms) > 1)
    # the terminal and audit.md name the privacy of each run
    for mechanism in mechanisms:
        label = "no DP" if mechanism is None else f"{mechanism} DP ε = "
        assert label in result.output and label in (out / "audit.md").read_text()


@pytest.mark.parametrize(
    ("flags", "recovered"),
    [(("--dp", "off"), True), (("--dp", "central", "--dp-noise-multiplier", "1000"), False)],
)
def test_audit_participations_one_client_a_round_each_exactly_n_times(
    data_env: Path, tmp_path: Path, flags: tuple, recovered: bool
) -> None:
    out = tmp_path / "audit"
    result = uvtrain("audit", "--method", "feduv", "--dataset", "formant-voices", "--small",
                     "--no-inversion", "--methods", "none", "--cohorts", "none", "--clients", "4",
                     "--participations", "1", *flags, "--out", out)  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((out / "audit.json").read_text())
    assert report["setup"]["rounds"] == 4 and report["settings"]["participations"] == 1
    last = report["disaggregation"][-1]
    assert (last["rounds"], last["cohort"], last["clients_seen"]) == (4, 1, 1.0)
    if recovered:  # no noise, nobody else in a round: each update is its client's codeword
        assert last["bits"] == 1.0 and last["whole_raw"] == 1.0
    else:  # noise of std 1000·C on the sum of one update of norm ≤ C: chance
        assert abs(last["bits"] - 0.5) < 0.11 and last["whole_raw"] == 0.0  # 5 σ of 4 × 127
        assert "not this schedule's" in result.output


@pytest.mark.parametrize(
    "args",
    [
        ("audit", "MISSING-RUN-FOLDER"),
        ("audit", "--method", "feduv", "--dataset", "formant-voices", "--participations", "0"),
        (
            "audit",
            "--method",
            "feduv",
            "--dataset",
            "formant-voices",
            "--participations",
            "2",
            "--rounds",
            "10",
        ),  # fmt: skip
        ("audit", "--method", "feduv", "--dataset", "formant-voices", "--cohorts", "2,x"),
        ("audit", "--method", "feduv", "--dataset", "formant-voices", "--methods", "nope"),
        ("audit", "--method", "nope", "--dataset", "formant-voices", "--out", "x"),
        ("audit", "--dataset", "formant-voices", "--out", "x"),
        ("audit", ".", "--method", "feduv"),
        ("audit", ".", "--dp", "off"),
        ("audit", "--method", "feduv", "--dataset", "formant-voices", "--dp-epsilon", "0"),
        ("audit", "--method", "feduv", "--dataset", "formant-voices", "--dp-epsilon", "-1"),
        ("audit", "--method", "feduv", "--dataset", "formant-voices", "--dp-epsilon", "8,x"),
        ("audit", "--method", "feduv", "--dataset", "formant-voices", "--dp", "sometimes"),
        (
            "audit",
            "--method",
            "feduv",
            "--dataset",
            "formant-voices",
            "--dp",
            "off",
            "--dp-epsilon",
            "8",
        ),
        (
            "audit",
            "--method",
            "feduv",
            "--dataset",
            "formant-voices",
            "--dp-epsilon",
            "8",
            "--dp-noise-multiplier",
            "1",
        ),
    ],
)
def test_audit_bad_input_is_one_line_and_exit_code_2(data_env: Path, args: tuple) -> None:
    result = uvtrain(*args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("uvtrain: error:"), result.output
