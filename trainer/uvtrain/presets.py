"""The papers' setups as named presets: ``uvtrain presets``, ``uvtrain run --preset NAME``.

A preset is a set of flat config keys (what ``uvtrain run`` takes as flags or TOML keys) that
transcribes one experiment of a paper, with where in the paper each value comes from, what the
paper does not say (and what we chose), and what differs because something is not built here.
``uvtrain run --preset NAME --dry-run`` prints the resolved configuration as JSON; flags and a
``--config`` file given beside the preset override it (command line > file > preset > defaults).

The paper's own data is what ``--dataset``/``--root`` point at (the loaders exist: ``uvtrain data
list``), read under the paper's data protocol (the data keys ``identities``,
``unknown_identities``, ``samples_per_split``, ``unknown_samples``, ``official_split``:
:mod:`uvtrain.data.protocol`), so that ``uvtrain run --preset NAME --root DIR`` on a copy in its
official layout needs nothing else. Where that data cannot be had, a dataset of the same shape (users × training samples
per user × input) stands in for speed runs (``stand_in``; ``benchmarks/paper_scale.py``).

Papers (../shared/papers in the development checkout): FedUV — Hosseini et al., "Federated
Learning of User Verification Models Without Sharing Embeddings" (Sec. 6.1–6.2, Tables 1–2);
FedHide — Park & Yun, "FedHide: Federated Learning by Hiding in the Neighbors" (Sec. 4.1, Tables 1
and 4); FedFace — Bai et al., "Federated Face Recognition" (Sec. 4.1–4.2, Table 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError


@dataclass(frozen=True)
class Preset:
    """One paper experiment: its config keys and where they come from."""

    name: str
    paper: str
    where: str
    summary: str
    settings: dict[str, Any]
    stand_in: dict[str, Any]
    notes: tuple[str, ...] = field(default=())

    def describe(self) -> dict[str, Any]:
        """The preset as JSON (what ``--dry-run`` prints beside the resolved configuration)."""
        return {
            "name": self.name,
            "paper": self.paper,
            "where": self.where,
            "summary": self.summary,
            "settings": dict(self.settings),
            "stand_in": dict(self.stand_in),
            "notes": list(self.notes),
        }


_FEDUV = "FedUV (Hosseini et al.)"
_FEDHIDE = "FedHide (Park & Yun)"
_FEDFACE = "FedFace (Bai et al.)"

#: FedUV Sec. 6.2 "Training setup": FedAvg, 1 local epoch, 20,000 rounds, 0.01 of the users
#: per round, SGD lr 0.1 with decay 0.01; Sec. 6.1: 1,000 users; Table 1: c ∈ {127, 255, 511}.
_FEDUV_SCHEDULE: dict[str, Any] = {
    "method": "feduv",
    "clients": 1000,
    "rounds": 20_000,
    "fraction": 0.01,
    "lr": 0.1,
    "lr_decay": 0.01,
    "code_length": 127,
    "negative_weight": 0.0,  # eq. 4: the positive loss alone
    "sampling": "random",  # Algorithm 1: "random set of κ users"
    "local_epochs": 1,  # Sec. 6.2: "1 local epoch" (Algorithm 1's UserUpdate)
    "server_optimizer": "sgd",  # plain FedAvg (η 1), not FedUV's default server lr
    "server_lr": 1.0,
}
#: FedUV Sec. 6.1, per dataset: 1,000 training users with train/validation/test examples each, and
#: a separate test set of users "not selected for training".
_FEDUV_DATA: dict[str, dict[str, Any]] = {
    # "1,000 speakers ... 25 training, 10 validation and 10 test examples for each speaker ...
    # a separate test set of 1,000 examples by choosing 5 utterances from 200 of the remaining"
    "voxceleb": {
        "identities": 1000,
        "samples_per_split": "25,10,10",
        "unknown_identities": 200,
        "unknown_samples": 5,
    },
    # "1,000 identities from those who had at least 30 images ... 20, 5 and 5 ... 1,000 images
    # from individuals that were not selected for training (one example per person)"
    "celeba": {
        "identities": 1000,
        "samples_per_split": "20,5,5",
        "unknown_identities": 1000,
        "unknown_samples": 1,
    },
    # "1,000 writers each with 50 training, 15 validation, and 15 test examples ... 1,000
    # examples from writers that were not selected for training (one example per writer)"
    "mnistuv": {
        "identities": 1000,
        "samples_per_split": "50,15,15",
        "unknown_identities": 1000,
        "unknown_samples": 1,
    },
}
_FEDUV_NOTES = (
    "c: 127 here; the paper also trains 255 and 511 (Table 1): --code-length 255|511",
    "B: the paper does not state the local batch size; ours: 16",
    "lr decay: the paper's 'learning rate decay of 0.01' (Sec. 6.2) does not say which decay; "
    "ours: inverse-time per round, lr / (1 + 0.01 (r - 1)) in round r",
)

#: FedHide Sec. 4.1, "Experimental Setup" (all datasets): B 16, λ 10, lr 0.1 SGD, 512-d,
#: round-robin clients, one local iteration; Table 1: clients, fraction, model, rounds;
#: Table 4: α = 0.1, K = 10/10/20 (the middle FedHide(0.1, ·) row).
_FEDHIDE_COMMON: dict[str, Any] = {
    "method": "fedhide",
    "batch_size": 16,
    "weight": 10.0,
    "lr": 0.1,
    "lr_decay": 0.0,
    "sampling": "round-robin",
    "local_steps": 1,
    "aggregation": "mean",  # Algorithm 1: the plain 1/M average
    "embedding_dim": 512,
    "alpha": 0.1,
}
_FEDHIDE_NOTES = ("lr decay: not stated in the paper; ours: none",)

#: FedFace Sec. 4.2: ArcFace s 64 m 0.5, batch 64 per GPU, lr 0.1 "decays by 0.1 at the end of
#: epoch 10, 18 and 24", momentum β 0.9, 26 epochs of 12,800 steps; Table 1: synchronisation
#: interval K = 100; IR-18 (the paper's Fig. 4 models).
_FEDFACE_K = 100
_FEDFACE_EPOCH_ROUNDS = 12_800 // _FEDFACE_K  # an epoch is 12,800 local steps: 128 rounds of K
_FEDFACE_COMMON: dict[str, Any] = {
    "method": "fedface",
    # Sec. 4.1: the parties hold MS1MV2, Asian-DeepGlint and VGGFace2, one each (12 parties: a
    # quarter of one each); MS1M and GA have no loader here: bring them as .npz files at 112x112
    "dataset": "ms1mv2-112.npz,asian-deepglint-112.npz,vggface2-112.npz",
    "partition": "dataset",
    "local_steps": _FEDFACE_K,
    "rounds": 26 * _FEDFACE_EPOCH_ROUNDS,  # 26 epochs of 12,800 steps, synchronised every K
    "batch_size": 64,
    "lr": 0.1,
    "lr_decay": 0.0,  # the step schedule alone
    # the end of epochs 10, 18 and 24: after rounds 1,280, 2,304 and 3,072 (at K = 100)
    "lr_milestones": ",".join(str(e * _FEDFACE_EPOCH_ROUNDS) for e in (10, 18, 24)),
    "lr_gamma": 0.1,
    "momentum": 0.9,
    "margin_loss": "arcface",
    "margin_scale": 64.0,
    "margin": 0.5,
    "pfm": True,
    "fv": True,
    "backbone": "ir-18",
}

PRESETS: dict[str, Preset] = {
    "feduv-voxceleb": Preset(
        "feduv-voxceleb",
        _FEDUV,
        "Sec. 6.1 (VoxCeleb), Sec. 6.2, Tables 1-2",
        "FedUV on VoxCeleb: 1,000 speakers, 25/10/10 two-second clips at 8 kHz (2^14 samples)",
        {
            **_FEDUV_SCHEDULE,
            "dataset": "voxceleb1",
            **_FEDUV_DATA["voxceleb"],
            "batch_size": 16,
            "crop_seconds": 2.0,
            "backbone": "feduv-voxceleb-conv1d",
        },
        {"users": 1000, "samples": 25, "input": "16384 samples (2 s at 8 kHz)"},
        (
            *_FEDUV_NOTES,
            "network: Table 2's VoxCeleb conv1d (16-kHz input is downsampled to 8 kHz in it)",
            "data: 1,000 of VoxCeleb1's 1,251 speakers with at least 45 utterances, 25/10/10 "
            "utterances each (the centre 2 s of each); 200 other speakers x 5 are unknown. The "
            "paper's clips come 'from videos recorded in one setting': ours from any of a "
            "speaker's videos",
        ),
    ),
    "feduv-celeba": Preset(
        "feduv-celeba",
        _FEDUV,
        "Sec. 6.1 (CelebA), Sec. 6.2, Tables 1-2",
        "FedUV on CelebA: 1,000 identities, 20/5/5 face images at 64x64",
        {
            **_FEDUV_SCHEDULE,
            "dataset": "celeba",
            **_FEDUV_DATA["celeba"],
            "batch_size": 16,
            "backbone": "feduv-celeba-conv2d",
        },
        {"users": 1000, "samples": 20, "input": "64x64x3 images"},
        (
            *_FEDUV_NOTES,
            "network: Table 2's CelebA conv2d",
            "data: 1,000 identities of at least 30 images, 20/5/5 each; 1,000 other identities "
            "x 1 image are unknown",
        ),
    ),
    "feduv-mnistuv": Preset(
        "feduv-mnistuv",
        _FEDUV,
        "Sec. 6.1 (MNIST-UV), Sec. 6.2, Tables 1-2",
        "FedUV on MNIST-UV: 1,000 writers, 50/15/15 stacks of digits 2-5 (28x28x4)",
        {
            **_FEDUV_SCHEDULE,
            "dataset": "mnist-uv",
            **_FEDUV_DATA["mnistuv"],
            "batch_size": 16,
            "backbone": "feduv-mnistuv-conv2d",
        },
        {"users": 1000, "samples": 50, "input": "28x28x4 images"},
        (
            *_FEDUV_NOTES,
            "network: Table 2's MNIST-UV conv2d (p = 3 on its first conv)",
            "data: 1,000 LEAF FEMNIST writers, 50/15/15 examples each, every example a distinct "
            "combination of the writer's images of 2, 3, 4 and 5, each image in one split only; "
            "1,000 other writers x 1 example are unknown",
        ),
    ),
    "fedhide-cifar100": Preset(
        "fedhide-cifar100",
        _FEDHIDE,
        "Sec. 4.1 (image classification), Tables 1 and 4",
        "FedHide on CIFAR-100: 100 clients of 500 images, ResNet-18, 100,000 rounds",
        {
            **_FEDHIDE_COMMON,
            "dataset": "cifar-100",
            # Sec. 4.1: "100 clients, each with 500 images from the same class. The remaining
            # 100 images per class are reserved for testing"
            "identities": 100,
            "official_split": True,
            "samples_per_split": "450,50,100",
            "unknown_identities": 0,
            "clients": 100,
            "fraction": 0.1,
            "rounds": 100_000,
            "neighbours": 10,
            "backbone": "resnet18-small",
            # Sec. 4.1: "During training, we apply random horizontal flips and rotations"
            "augment": True,
        },
        {"users": 100, "samples": 500, "input": "32x32x3 images"},
        (
            *_FEDHIDE_NOTES,
            "metric: the paper reports accuracy on seen clients' test sets",
            "data: each class's 500 training images give 450 to train and 50 to validation (the "
            "enrollment the report's prototype figures need; the paper trains on all 500), its "
            "100 test images the test split; no unknown classes (Table 1: '100 seen clients')",
            "augmentation (Sec. 4.1: 'random horizontal flips and rotations', no range stated): "
            "ours flips with probability 1/2 and rotates by an angle uniform in +-15 degrees "
            "(nearest pixel, black corners), a fresh draw each time an image enters a local "
            "batch; never at evaluation",
        ),
    ),
    "fedhide-voxceleb1": Preset(
        "fedhide-voxceleb1",
        _FEDHIDE,
        "Sec. 4.1 (speaker verification), Tables 1 and 4",
        "FedHide on VoxCeleb1: 1,211 speakers of about 122 utterances, Fast ResNet-34, 2-s crops",
        {
            **_FEDHIDE_COMMON,
            "dataset": "voxceleb1",
            # Sec. 4.1: "Following the standard split, we employ 1,211 clients for training ...
            # The remaining 40 speakers are used to evaluate"
            "identities": 1211,
            "official_split": True,
            "clients": 1211,
            "fraction": 0.01,
            "rounds": 50_000,
            "neighbours": 10,
            "backbone": "fast-resnet34",
            # Sec. 4.1: "we randomly crop a 2-second temporal segment from each utterance"
            "crop_seconds": 2.0,
            "random_crop": True,
            "window": "hamming",  # Sec. 4.1: "a Hamming window of 25ms length and 10ms hop size"
        },
        {"users": 1211, "samples": 122, "input": "2-s crops at 16 kHz, 40 mel bands"},
        (
            *_FEDHIDE_NOTES,
            "test: the paper scores ten 3-s crops per utterance pair on the official list",
            "data: the 1,211 development speakers, every utterance (about 122 each), split "
            "60/20/20 (the paper trains on all; validation is the enrollment of the report's "
            "test_known figures); the 40 test speakers id10270-id10309 are unknown, all their "
            "utterances",
            "crops: a fresh random 2-s crop of each training utterance every time it enters a "
            "local batch (Sec. 4.1); utterances are kept whole up to 6 s (a longer one: its "
            "centre 6 s; VoxCeleb1's last at least 4 s). Validation, test and the unknown "
            "speakers' utterances are their centre 2 s, a fixed crop, for the report's scores",
        ),
    ),
    "fedhide-vggface2": Preset(
        "fedhide-vggface2",
        _FEDHIDE,
        "Sec. 4.1 (face verification), Tables 1 and 4",
        "FedHide on VGGFace2: 8,631 identities of about 362 images, 64x64 faces",
        {
            **_FEDHIDE_COMMON,
            "dataset": "vggface2",
            # Sec. 4.1: "Following the standard split, we employ 8,631 clients for training ...
            # The remaining 500 users are used to measure validation verification performance"
            "identities": 8631,
            "official_split": True,
            "clients": 8631,
            "fraction": 0.001,
            "rounds": 400_000,
            "neighbours": 20,
            "backbone": "ir-small",
            "detect_faces": True,
        },
        {"users": 8631, "samples": 362, "input": "64x64x3 images"},
        (
            *_FEDHIDE_NOTES,
            "network: the paper's MobileFaceNet is not built; ir-small stands in",
            "data: the 8,631 train/ identities, every image, split 60/20/20 (the paper trains on "
            "all); the 500 test/ identities are unknown",
            "faces: as the paper (Sec. 4.1: detected with a pretrained FaceNet, i.e. "
            "facenet-pytorch's MTCNN), each image is cut to the most probable face MTCNN finds "
            "(weights: uvtrain pretrained fetch mtcnn) before the 64x64 resize; where none is "
            "found, to VGGFace2's official loose box (ROOT/bb_landmark/loose_bb_train.csv and "
            "loose_bb_test.csv, when the copy has them), else the whole image; the dataset's "
            "extra face_detection counts both",
        ),
    ),
    "fedface-3party": Preset(
        "fedface-3party",
        _FEDFACE,
        "Sec. 4.1-4.2, Table 1 (3 parties, K = 100)",
        "FedFace, 3 parties (MS1M, GA, VGG), IR-18 on 112x112 faces, ArcFace s 64 m 0.5",
        {**_FEDFACE_COMMON, "parties": 3},
        {"users": 3, "samples": "the parties' datasets", "input": "112x112x3 images"},
        (
            "parties: one dataset each (MS1M, GA, VGG), as .npz files you make at 112x112 "
            "(benchmarks/fedface-paper.toml shows how for VGGFace2) in one folder: --root DIR "
            "reads DIR/ms1mv2-112.npz and the others; --dataset NAME --partition random splits "
            "one dataset instead",
            "data (Sec. 4.1): each party trains on its whole dataset; the paper validates and "
            "tests on other benchmarks, here on each dataset's unknown people (as it was built)",
            "validators: the paper's are LFW, CPLFW, CALFW, CFP-FP and AgeDB (half of each "
            "benchmark's folds; the other half evaluates); here half of each party dataset's "
            "unknown people, the other half is the test set",
            "schedule: 26 epochs of 12,800 steps, lr x0.1 at the end of epochs 10/18/24: "
            "rounds = 26 x 12,800 / K and --lr-milestones at e x 12,800 / K (change all three "
            "with --local-steps)",
            "batch: 64 per GPU on 8/4/4 GPUs in the paper (512/256/256 per party); 64 per party "
            "here, the per-GPU figure (--batch-size 512 for the paper's largest party)",
            "weight decay: 5e-4 is ours (the trainer's default), not in the paper",
            "FV: one synchronous step after every round, on that round's party models; the "
            "paper's runs asynchronously, beside training, on a snapshot that may be stale "
            "(Sec. 3.2, Alg. 2)",
        ),
    ),
    "fedface-12party": Preset(
        "fedface-12party",
        _FEDFACE,
        "Sec. 4.1-4.2 (12 parties: each dataset split in 4), Fig. 4 (f)",
        "FedFace, 12 parties (MS1M, GA, VGG each split in four), IR-18, ArcFace s 64 m 0.5",
        {**_FEDFACE_COMMON, "parties": 12},
        {"users": 12, "samples": "the parties' datasets", "input": "112x112x3 images"},
        ("as fedface-3party, with 12 parties",),
    ),
}


def get(name: str) -> Preset:
    """The preset called ``name``, else a one-line :class:`ConfigError` naming the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}: one of {', '.join(PRESETS)}") from None
