"""Run configuration by parts: CLI > TOML file > default.

A :class:`RunConfig` (:mod:`.run`) is made of frozen parts that each validate themselves: the
:class:`Schedule` (:mod:`.schedule`), the :class:`Data`, the :class:`Model` and the
:class:`Privacy` (:mod:`.parts`), and ``method`` — the chosen algorithm's own parameters
dataclass (:data:`uvtrain.algorithms.METHODS`: ``FedHide(alpha=0.2)``; its ``name`` is the
method's name) — plus the run-level options (seed, device, ...).

Users keep writing flat keys (``--alpha 0.2``, ``alpha = 0.2`` in a TOML file, ``config.json``):
:meth:`RunConfig.from_flat` sends each key to the part or the method that declares it, and
:meth:`RunConfig.to_dict` writes the flat form back (with the chosen method's parameters only).
A TOML file (:mod:`.sources`) may also group keys in sections: ``[schedule]``, ``[data]``,
``[model]``, ``[run]`` and one per method (``[fedhide]``), of which only the chosen method's is
read.

Every field's ``dataclasses.field(metadata=...)`` says how the user reaches it (:mod:`.options`):
``help`` (the ``uvtrain run`` option's help), ``flag`` (its option name when it is not
``--field-name``: FedHide's ``weight`` is ``--lambda``), ``cli`` (``False``: a TOML/config key
only) and ``flower`` (``False``: means nothing on Flower devices, not in the deployment's run
config). The command line and the deployment's keys are generated from them and from the
methods' parameter dataclasses (:data:`uvtrain.methods.PARAMETERS`), so a new method's options
need no edit here; the aggregators' names are read from :data:`uvtrain.aggregators.AGGREGATORS`.

This package imports no torch (``uvtrain run --help`` and ``--dry-run`` load none).
"""

from ..errors import ConfigError  # what every check here raises
from .options import Option, cli_options, flower_keys, part_options
from .parts import DP_NOISES, DP_PLACEMENTS, PARTS, SECURE_DEFAULT_EPSILON, Data, Model, Privacy
from .run import (
    NOT_TRAINING,
    RunConfig,
    changed_settings,
    method_fields,
    part_fields,
    run_fields,
)
from .schedule import (
    MAX_BATCH_SIZE,
    MAX_CLIP_NORM,
    MAX_LOCAL_STEPS,
    MAX_LR,
    MAX_SEED,
    MAX_SERVER_LR,
    MIN_SERVER_TAU,
    SERVER_KEYS,
    SERVER_OPTIMIZERS,
    Schedule,
    check_server_settings,
    milestones,
    schedule_defaults,
    step_factor,
)
from .sources import flatten_sections, read_toml, read_toml_value, resolve

__all__ = [
    "DP_NOISES",
    "DP_PLACEMENTS",
    "MAX_BATCH_SIZE",
    "MAX_CLIP_NORM",
    "MAX_LOCAL_STEPS",
    "MAX_LR",
    "MAX_SEED",
    "MAX_SERVER_LR",
    "MIN_SERVER_TAU",
    "NOT_TRAINING",
    "PARTS",
    "SECURE_DEFAULT_EPSILON",
    "SERVER_KEYS",
    "SERVER_OPTIMIZERS",
    "ConfigError",
    "Data",
    "Model",
    "Option",
    "Privacy",
    "RunConfig",
    "Schedule",
    "changed_settings",
    "check_server_settings",
    "cli_options",
    "flatten_sections",
    "flower_keys",
    "method_fields",
    "milestones",
    "part_fields",
    "part_options",
    "read_toml",
    "read_toml_value",
    "resolve",
    "run_fields",
    "schedule_defaults",
    "step_factor",
]
