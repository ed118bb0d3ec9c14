"""Has a model learned? The one check used wherever a model is evaluated (``uvtrain run``,
``uvtrain eval``), plotted (``roc.png``) or exported (``uvexport``, which refuses a model at chance
unless ``--force``). Issue 47: a short run's codeword EER of 0.50 went through ``eval``, the plot
and the export without a word.

A model's report (``report.json``) measures it by up to three protocols: its own (``splits``: by
codeword for a codeword model, by enrollment for an embedding model), by enrollment
(``enrollment``: a codeword model verified as the SDK's prototype mode does) and against the learnt
class rows (``class_row``). A protocol is *near chance* when its EER on the deciding split (the
known users' test clips) is above :data:`NEAR_CHANCE_EER`; the model is *at chance* (has not
learned) when every protocol the report measured is. Pure: reads a report dict, imports nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: A deciding-split EER above this is near chance (0.5), whichever the protocol.
NEAR_CHANCE_EER = 0.3
#: The split whose EER decides: the known users' held-out test clips.
DECIDING_SPLIT = "test_known"
#: Settings that learn on synth-voices (docs/trainer.md, "Learning"; README, "Training a model").
LEARNING_SETTINGS = {
    "feduv": "--rounds 800 --fraction 0.1 --batch-size 16 --lr 0.5 --lr-decay 0.005 --server-lr 1",
    "fedhide": "--rounds 600 --fraction 0.1 --batch-size 16 --lr 0.1 --lr-decay 0",
}
#: The report's sections that hold a protocol's splits, and how a line names each (``splits``:
#: by the report's own ``split_protocols``, codeword or enrollment).
PROTOCOLS = {
    "splits": "its own protocol",
    "enrollment": "by enrollment",
    "class_row": "against the class rows",
}


@dataclass(frozen=True)
class Learning:
    """The deciding EER of each protocol a report measured (``None``: no trials)."""

    method: str
    eers: dict[str, float | None]
    #: how a line names each protocol
    names: dict[str, str]

    @property
    def measured(self) -> dict[str, float]:
        return {name: eer for name, eer in self.eers.items() if eer is not None}

    @property
    def near_chance(self) -> list[str]:
        """The protocols whose deciding EER is near chance."""
        return [name for name, eer in self.measured.items() if eer > NEAR_CHANCE_EER]

    @property
    def at_chance(self) -> bool:
        """Every measured protocol near chance: the model has not learned (``False`` when
        nothing was measured, as for a deployment's server, which holds no labelled data)."""
        return bool(self.measured) and len(self.near_chance) == len(self.measured)

    def figures(self) -> str:
        """``"0.50 (its own protocol), 0.44 (by enrollment)"``."""
        return ", ".join(f"{eer:.2f} ({self.names[name]})" for name, eer in self.measured.items())

    def settings(self) -> str:
        """Settings that learn, for this method (else for each method that has some)."""
        if self.method in LEARNING_SETTINGS:
            return f"{self.method} {LEARNING_SETTINGS[self.method]}"
        return "; ".join(f"{name} {flags}" for name, flags in LEARNING_SETTINGS.items())


def learning(report: dict[str, Any]) -> Learning:
    """The deciding EERs of the protocols ``report`` measured."""
    eers: dict[str, float | None] = {}
    for key in PROTOCOLS:
        section = report if key == "splits" else report.get(key)
        splits = (section or {}).get("splits") or {}
        if DECIDING_SPLIT in splits:
            eers[key] = splits[DECIDING_SPLIT].get("eer")
    names = dict(PROTOCOLS)
    own = (report.get("split_protocols") or {}).get(DECIDING_SPLIT)
    if own:
        names["splits"] = f"by {own}"
    return Learning(str(report.get("method", "")), eers, names)


def chance_note(report: dict[str, Any]) -> str | None:
    """The line ``uvtrain run`` and ``uvtrain eval`` end with when a protocol is near chance
    (``None`` when none is): the model at chance, or which protocol did not learn."""
    verdict = learning(report)
    if verdict.at_chance:
        return (
            f"note: this model is at chance: {DECIDING_SPLIT} EER {verdict.figures()} (0.5 is "
            "chance); it has not learned: the run is too short or too small. uvexport refuses "
            "it without --force. Settings that learn on synth-voices (docs/trainer.md, "
            f"Learning): {verdict.settings()}"
        )
    if verdict.near_chance:
        names = " and ".join(verdict.names[name] for name in verdict.near_chance)
        return (
            f"note: verification {names} is near chance ({DECIDING_SPLIT} EER "
            f"{verdict.figures()}); the model learned by the other protocol (an exported FedUV "
            "bundle enrolls in the mode its run measured better)"
        )
    return None
