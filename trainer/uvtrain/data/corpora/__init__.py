"""Loaders for the user's local copies of the public corpora, each in its published layout.

Nothing is downloaded: these corpora need a licence acceptance or a registration, so the user
fetches them once and points ``--root`` (or ``$UVTRAIN_DATA/NAME``) at the copy. Each loader

1. indexes the copy's files by identity (a speaker, a person, a writer, a class),
2. keeps identities with at least ``min_per_identity`` samples, a seeded random ``max_identities``
   of them, and a seeded random ``max_per_identity`` samples of each (so that a CPU run stays
   small; pass ``None`` for everything),
3. decodes only those, through the SDK's own :func:`uvsdk.media.load_audio` /
   :func:`uvsdk.media.load_image` (one decoding path for training and the device); a file that does
   not decode is skipped and counted in ``extra["skipped"]``,
4. holds out ``unknown_fraction`` of the identities as unknown users and splits every identity's
   samples 60/20/20 (:func:`uvtrain.data.base.assemble`).

With a ``protocol`` (:class:`uvtrain.data.protocol.DataProtocol`: a paper's identities, unknown
identities and samples per split, set by the presets) steps 2 and 4 are the protocol's instead:
:func:`plan_corpus` plans every identity's samples from the index, and only those are decoded
(the caps, ``min_per_identity`` and ``unknown_fraction`` are then not used; a file that does not
decode stops the build, as the protocol's counts are exact). ``official_split`` reads the
corpus's own split: VoxCeleb1's test speakers id10270-id10309, VoxCeleb2's ``test/``, VGGFace2's
``test/`` are the unknown identities, CIFAR-100's test images each class's test split.

Under a protocol the audio and face loaders can also write the dataset straight into a stream
folder as they decode (``stream_to``; ``uvtrain data build ... --format stream``): the plan gives
every identity's rows before anything is decoded, so the folder's arrays are made at their full
size first and filled one identity at a time.

One module per corpus family, each naming the layout it reads: :mod:`.voxceleb` (VoxCeleb1 and
VoxCeleb2), :mod:`.celeba_corpus`, :mod:`.vggface2_corpus`, :mod:`.mnist_uv_corpus` (FEMNIST →
MNIST-UV) and :mod:`.cifar100_corpus` (``_corpus``: a module named as its loader would be hidden by
the loader re-exported here); :mod:`.common` holds the shared machinery, :mod:`.plans` the plans.
"""

from .celeba_corpus import celeba
from .cifar100_corpus import cifar100
from .common import MAX_AUDIO_SECONDS as MAX_AUDIO_SECONDS
from .common import MNIST_UV_DIGITS as MNIST_UV_DIGITS
from .common import RANDOM_CROP_SECONDS as RANDOM_CROP_SECONDS
from .common import VERSION as VERSION
from .mnist_uv_corpus import mnist_uv
from .mnist_uv_corpus import stack_split as stack_split
from .plans import plan_corpus
from .vggface2_corpus import vggface2
from .voxceleb import voxceleb1, voxceleb2

# Also re-exported (the redundant aliases above), not part of __all__: the constants and
# stack_split that the CLI, the scoring, the registry and the tests import from here.
__all__ = ["celeba", "cifar100", "mnist_uv", "plan_corpus", "vggface2", "voxceleb1", "voxceleb2"]
