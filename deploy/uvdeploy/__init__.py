"""Federated training across real devices on Flower: the trainer's algorithms and round, unchanged.

The package sits above the trainer and the exporter (sdk <- uvtrain <- uvexport <- uvdeploy):
it imports both, and neither imports it.

- :mod:`.settings`: the run's settings (Flower's run config) and the model both sides build;
- :mod:`.server`: the ServerApp (registration, rounds through :func:`uvtrain.rounds.run_round`,
  SecAgg+, checks, export, enrollment);
- :mod:`.client`: the ClientApp; :mod:`.device`: a device's registration and enrollment (its
  folder, its SDK template store; no torch, with :mod:`.inputs`, the input keys alone);
  :mod:`.training`: a device's round (the engine's local update);
- :mod:`.local`: a whole federation on this machine's loopback (a SuperLink, one SuperNode per
  device folder, ``flwr run``), started and stopped by process id;
- :mod:`.cli`: the ``uvtrain deploy`` commands (added to ``uvtrain`` by the ``uvtrain.commands``
  entry point).

``server`` and ``client`` import Flower (the ``fl`` extra); nothing else here does.
"""

from .errors import DeployError, DeploymentError, DeviceError, LaunchError

__all__ = ["DeployError", "DeploymentError", "DeviceError", "LaunchError"]
