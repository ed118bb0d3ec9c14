"""The parts of a run config besides the :class:`~uvtrain.config.schedule.Schedule`: what it
trains on (:class:`Data`), the backbone (:class:`Model`) and user-level differential privacy
(:class:`Privacy`), each frozen and checking itself; :data:`PARTS` names all four."""

from __future__ import annotations

from dataclasses import dataclass, field

from uvsdk.inputs import BANDS

from ..data.protocol import DataProtocol
from ..errors import ConfigError, DatasetError
from ..validation import check_types
from .schedule import MAX_CLIP_NORM, Schedule

#: The datasets whose training utterances ``random_crop`` keeps whole.
RANDOM_CROP_DATASETS = ("voxceleb1", "voxceleb2")


@dataclass(frozen=True)
class Data:
    """What the run trains on. ``crop_seconds``: audio training samples are random windows of this
    length (0: whole clips). ``random_crop`` (VoxCeleb, under a data protocol): the training
    utterances are kept whole (up to :data:`uvtrain.data.corpora.RANDOM_CROP_SECONDS`), so that
    each window is a fresh random crop of the whole utterance at every step, not of its stored
    centre clip; evaluation keeps the centre clip. ``augment`` (images): every training sample
    randomly flipped and rotated each time it enters a batch (:func:`uvtrain.batches.
    flip_and_rotate`), never at evaluation.

    ``identities``, ``unknown_identities``, ``samples_per_split``, ``unknown_samples`` and
    ``official_split`` are a paper's data protocol for a corpus read from ``root``
    (:class:`uvtrain.data.protocol.DataProtocol`; the presets set them); none set: the loaders'
    small defaults (a capped choice of identities, 20 % unknown, 60/20/20 splits)."""

    dataset: str = field(metadata={"help": "Dataset name or .npz path.", "flower": False})
    clients: int | None = field(
        default=None, metadata={"help": "Use the first K known clients.", "flower": False}
    )
    root: str | None = field(
        default=None, metadata={"help": "Dataset root (local corpus copy).", "flower": False}
    )
    crop_seconds: float = field(
        default=1.0,
        metadata={"help": "Audio: train on random windows this long (0: whole)."},
    )
    identities: int | None = field(
        default=None,
        metadata={
            "help": "Corpus: exactly this many known identities (default: the loader's cap).",
            "flower": False,
        },
    )
    unknown_identities: int | None = field(
        default=None,
        metadata={
            "help": "Corpus: identities held out as unknown (default: the official test ones, "
            "else a quarter as many as the known).",
            "flower": False,
        },
    )
    samples_per_split: str = field(
        default="",
        metadata={
            "help": "Corpus: TRAIN,VALIDATION,TEST samples of every known identity, e.g. "
            "25,10,10 (default: all, 60/20/20).",
            "flower": False,
        },
    )
    unknown_samples: int | None = field(
        default=None,
        metadata={
            "help": "Corpus: samples of every unknown identity (default: all).",
            "flower": False,
        },
    )
    official_split: bool = field(
        default=False,
        metadata={
            "help": "Corpus: its own test part (VoxCeleb1/2's test speakers, VGGFace2's test/ "
            "are unknown; CIFAR-100's test images the test split).",
            "flower": False,
        },
    )
    augment: bool = field(
        default=False,
        metadata={
            "help": "Images: flip each training sample horizontally at random and rotate it "
            "by up to 15 degrees, at every step (never at evaluation).",
            "flower": False,
        },
    )
    detect_faces: bool = field(
        default=False,
        metadata={
            "help": "VGGFace2: cut each image to the face MTCNN finds (FedHide, Sec. 4.1; "
            "weights: uvtrain pretrained fetch mtcnn), else to its loose box or whole.",
            "flower": False,
        },
    )
    random_crop: bool = field(
        default=False,
        metadata={
            "help": "VoxCeleb: keep training utterances whole (up to 6 s) and crop crop_seconds "
            "at random at every step (default: the stored centre clip).",
            "flower": False,
        },
    )

    def __post_init__(self) -> None:
        check_types(self)
        if self.clients is not None and self.clients < 2:
            raise ConfigError("clients must be at least 2")
        if not 0 <= self.crop_seconds <= 3600:
            raise ConfigError("crop_seconds must be in [0, 3600] (0: train on whole clips)")
        protocol = self.protocol()  # a bad protocol key is refused here, in one line
        if self.detect_faces and self.dataset != "vggface2":
            raise ConfigError("detect_faces applies to vggface2 (the fedhide-vggface2 preset)")
        if self.random_crop and (self.dataset not in RANDOM_CROP_DATASETS or protocol is None):
            raise ConfigError(
                "random_crop applies to voxceleb1 and voxceleb2 under a data protocol "
                "(identities, samples_per_split, ...; the fedhide-voxceleb1 preset sets both)"
            )

    def protocol(self) -> DataProtocol | None:
        """The data protocol of these keys, ``None`` when none is set."""
        try:
            return DataProtocol.from_keys(
                self.identities,
                self.unknown_identities,
                self.samples_per_split,
                self.unknown_samples,
                self.official_split,
            )
        except DatasetError as error:
            raise ConfigError(str(error)) from None


@dataclass(frozen=True)
class Model:
    """The backbone: by name (default: by modality, or the pretrained weights' own) and the
    weights it starts from."""

    backbone: str | None = field(
        default=None, metadata={"help": "Backbone name (default: by modality)."}
    )
    pretrained: str | None = field(
        default=None,
        metadata={
            "help": "Start from: ge2e or campplus (the GE2E or CAM++ speaker encoder), a run "
            "folder or its checkpoint.pt (another run's trained backbone), or a backbone "
            "checkpoint."
        },
    )
    train_pretrained: bool = field(
        default=False,
        metadata={
            "help": "With --pretrained ge2e or campplus: train all of the encoder (default: it "
            "stays frozen and only the adapter trains)."
        },
    )
    band: str = field(
        default="wide",
        metadata={
            "help": "What the audio front end hears: wide (each clip as recorded) or narrow "
            "(nothing above 4 kHz, so telephone and wideband recordings of a voice score alike; "
            "a backbone with the Kaldi fbank front end: campplus). The bundle's input.band."
        },
    )

    def __post_init__(self) -> None:
        check_types(self)
        if self.band not in BANDS:
            raise ConfigError(f"band must be one of {', '.join(BANDS)}, not {self.band!r:.40}")


#: ``ε`` of the default mechanism wherever secure aggregation is on (``uvtrain deploy``,
#: ``uvtrain audit``): distributed noise at this budget for the whole run.
SECURE_DEFAULT_EPSILON = 8.0


#: ``--dp``: no differential privacy, or where the noise is added
#: (:data:`uvtrain.privacy.PLACEMENTS`).
DP_PLACEMENTS = ("off", "central", "distributed")
#: ``--dp-noise``: the underlying mechanisms by their noise (:data:`uvtrain.privacy.MECHANISMS`).
DP_NOISES = ("independent", "tree")


@dataclass(frozen=True)
class Privacy:
    """User-level differential privacy (:mod:`uvtrain.privacy`, docs/privacy.md): ``dp`` places
    the noise (``off``, ``central``: the server adds it, ``distributed``: each client adds its
    share before aggregation); the noise follows from the budget ``dp_epsilon`` (for the run's
    rounds and sampling rate) or is given as ``dp_noise_multiplier``; ``dp_delta`` defaults to
    ``min(N^−1.1, 10⁻⁶)`` for ``N`` users; ``clip_norm`` bounds each client's update (L2).

    Every key but ``dp`` is a Flower run-config key too (the deployment has its own ``dp``, whose
    default ``auto`` follows its secure aggregation: ``uvdeploy.settings``); the simulator,
    without secure aggregation, defaults to ``off``."""

    dp: str = field(
        default="off",
        metadata={"help": "Differential privacy: off, central or distributed.", "flower": False},
    )
    dp_epsilon: float | None = field(
        default=None,
        metadata={"help": "DP budget ε of the whole run (sets the noise)."},
    )
    dp_delta: float | None = field(
        default=None, metadata={"help": "DP δ (default: min(users^-1.1, 1e-6))."}
    )
    dp_noise_multiplier: float | None = field(
        default=None,
        metadata={"help": "DP noise multiplier z (instead of --dp-epsilon)."},
    )
    clip_norm: float = field(
        default=1.0,
        metadata={
            "help": "DP: each client's update clipped to this L2 norm (C; with adaptive "
            "clipping, its start).",
        },
    )
    adaptive_clipping: bool = field(
        default=False,
        metadata={
            "help": "DP: adapt the clip norm to a quantile of the update norms (Andrew et al.).",
        },
    )
    clip_quantile: float = field(
        default=0.5,
        metadata={"help": "Adaptive clipping: the quantile γ of update norms."},
    )
    clip_learning_rate: float = field(
        default=0.2,
        metadata={"help": "Adaptive clipping: the geometric step η_C."},
    )
    clip_count_std: float | None = field(
        default=None,
        metadata={
            "help": "Adaptive clipping: noise std σ_b of the unclipped count (default: cohort/20).",
        },
    )

    dp_noise: str = field(
        default="independent",
        metadata={
            "help": "DP: independent (DP-FedAvg: fresh noise every round) or tree (DP-FTRL: "
            "tree-aggregated noise over each period; needs --dp central and a fixed clip norm).",
        },
    )
    dp_period: int | None = field(
        default=None,
        metadata={
            "help": "DP participation rule: each user in at most one round of each period of "
            "this many rounds, instead of Poisson sampling (no amplification: one ε against "
            "the server and the model's observers; 0: Poisson sampling; default: Poisson for "
            "uvtrain run, users/cohort for tree noise and for uvtrain deploy).",
        },
    )
    dp_noise_cohort: int | None = field(
        default=None,
        metadata={
            "help": "Simulated deployment scale (pfl-research's noise_cohort_size): add the "
            "noise of an expected cohort of this many users M, scaled by m/M onto the m the "
            "simulation trains; the results hold for a deployment with cohorts of M.",
            "flower": False,
        },
    )
    dp_population: int | None = field(
        default=None,
        metadata={
            "help": "With --dp-noise-cohort: the deployment's population N the accountant "
            "samples M from (q = M/N; default: the simulation's own rate m/N kept).",
            "flower": False,
        },
    )

    def __post_init__(self) -> None:
        check_types(self)
        if self.dp not in DP_PLACEMENTS:
            raise ConfigError(f"dp must be off, central or distributed, not {self.dp!r}")
        if self.dp_epsilon is not None and not self.dp_epsilon > 0:
            raise ConfigError(f"dp_epsilon must be positive, not {self.dp_epsilon}")
        if self.dp_epsilon is not None and self.dp_epsilon > 1000:
            raise ConfigError(f"dp_epsilon must be at most 1000, not {self.dp_epsilon}")
        if self.dp_delta is not None and not 0 < self.dp_delta < 1:
            raise ConfigError(f"dp_delta must be in (0, 1), not {self.dp_delta}")
        if self.dp_noise_multiplier is not None and not self.dp_noise_multiplier > 0:
            raise ConfigError(
                f"dp_noise_multiplier must be positive, not {self.dp_noise_multiplier}"
            )
        if self.dp_noise_multiplier is not None and self.dp_noise_multiplier > 1e4:
            raise ConfigError(
                f"dp_noise_multiplier must be at most 10000, not {self.dp_noise_multiplier}"
            )
        if not self.clip_norm > 0:
            raise ConfigError(f"clip_norm must be positive, not {self.clip_norm}")
        if self.clip_norm > MAX_CLIP_NORM:
            raise ConfigError(
                f"clip_norm must be at most {MAX_CLIP_NORM:g}, not {self.clip_norm:g} (the noise "
                "is proportional to it)"
            )
        if not 0 < self.clip_quantile < 1:
            raise ConfigError(f"clip_quantile must be in (0, 1), not {self.clip_quantile}")
        if not self.clip_learning_rate > 0:
            raise ConfigError(f"clip_learning_rate must be positive, not {self.clip_learning_rate}")
        if self.clip_count_std is not None and not self.clip_count_std > 0:
            raise ConfigError(f"clip_count_std must be positive, not {self.clip_count_std}")
        if self.dp_noise not in DP_NOISES:
            raise ConfigError(f"dp_noise must be independent or tree, not {self.dp_noise!r}")
        if self.dp_period is not None and not 0 <= self.dp_period <= 10**6:
            raise ConfigError(f"dp_period must be in [0, 10^6], not {self.dp_period}")
        if self.dp_noise_cohort is not None and not 1 <= self.dp_noise_cohort <= 10**9:
            raise ConfigError(f"dp_noise_cohort must be in [1, 10^9], not {self.dp_noise_cohort}")
        if self.dp_population is not None and self.dp_population > 10**10:
            raise ConfigError(f"dp_population must be at most 10^10, not {self.dp_population}")
        if self.dp_population is not None and self.dp_noise_cohort is None:
            raise ConfigError("--dp-population is the population of --dp-noise-cohort: give both")
        if self.dp_population is not None and not self.dp_population >= self.dp_noise_cohort:
            raise ConfigError(
                f"--dp-population {self.dp_population} is smaller than its cohort "
                f"--dp-noise-cohort {self.dp_noise_cohort}"
            )
        if self.dp == "off" and self.dp_noise_cohort is not None:
            raise ConfigError(
                "--dp-noise-cohort scales the DP noise: give --dp central or distributed"
            )
        if self.dp != "off" and (self.dp_epsilon is None) == (self.dp_noise_multiplier is None):
            raise ConfigError(f"--dp {self.dp} needs one of --dp-epsilon, --dp-noise-multiplier")


#: The parts of a run config by their attribute (and TOML section) name.
PARTS: dict[str, type] = {"schedule": Schedule, "data": Data, "model": Model, "privacy": Privacy}
