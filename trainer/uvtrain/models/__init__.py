"""Neural networks of the trainer (moved whole to :mod:`.resnet`; split into modules next)."""

from .resnet import *  # noqa: F403
from .resnet import (  # noqa: F401
    LOG_EPSILON,
    NORM_EPSILON,
    Backbone,
    ImageFrontend,
    __all__,
    dft_kernels,
    slaney_mel_filterbank,
)
