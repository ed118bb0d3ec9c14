"""Does our CAM++ compute what 3D-Speaker's own CAMPPlus computes, on the pretrained weights?

The reference is 3D-Speaker's code (Apache-2.0), from a checkout you give (``--reference``: the
folder holding ``speakerlab/``; nothing of it is part of this project). Both networks load the
weights of ``uvtrain pretrained fetch campplus``: the reference strictly (``load_state_dict``),
ours with :func:`uvtrain.models.load_backbone_checkpoint`. Both read the same fbank (ours,
checked against kaldi-native-fbank in tests/trainer/test_campplus.py), so the figure is the
network's alone; the time is ours, thread CPU time on one thread, per clip.

    python benchmarks/campplus_parity.py --reference ~/src/3D-Speaker
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from uvtrain.models import CAMPPlusEncoder, load_backbone_checkpoint
from uvtrain.pretrained import fetch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, required=True, help="3D-Speaker checkout")
    parser.add_argument("--seconds", default="0.5,2,3.7,12", help="clip lengths to compare")
    args = parser.parse_args()
    sys.path.insert(0, str(args.reference))
    from speakerlab.models.campplus.DTDNN import CAMPPlus  # the reference

    weights = fetch("campplus", quiet=True)
    reference = CAMPPlus(feat_dim=80, embedding_size=192)
    reference.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    reference.eval()
    ours = CAMPPlusEncoder()
    loaded = load_backbone_checkpoint(ours, weights)
    ours.eval()
    left = [name for name, _ in ours.named_parameters() if name not in loaded]
    print(f"loaded {len(loaded)} parameters; not in the checkpoint: {left}")
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    worst = 0.0
    for seconds in (float(s) for s in args.seconds.split(",")):
        x = torch.from_numpy(
            (rng.standard_normal((2, int(seconds * 16000))) * 0.05).astype(np.float32)
        )
        with torch.no_grad():
            expected = reference(ours.frontend(x))
            start = time.thread_time()
            got = ours.encode(x)
            cpu_ms = (time.thread_time() - start) * 1000 / 2
        difference = (expected - got).abs().max().item()
        cosine = torch.nn.functional.cosine_similarity(expected, got).min().item()
        worst = max(worst, difference)
        print(
            f"{seconds:5.1f} s: max abs difference {difference:.2e}, cosine {cosine:.7f}, "
            f"ours {cpu_ms:.1f} ms of CPU per clip (torch, one thread)"
        )
    print(f"worst difference {worst:.2e}")
    return 0 if worst < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
