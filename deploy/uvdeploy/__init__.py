"""Federated training across real devices on Flower: the simulator's algorithms, unchanged.

- :mod:`.settings`: the run's settings (Flower's run config) and the model both sides build;
- :mod:`.server`: the ServerApp (registration, rounds, SecAgg+, checks, export, enrollment);
- :mod:`.client`: the ClientApp (a device: its folder, its SDK template store);
- :mod:`.local`: a whole federation on this machine's loopback (a SuperLink, one SuperNode per
  device folder, ``flwr run``), started and stopped by process id.

``server`` and ``client`` import Flower (the ``fl`` extra); nothing else here does.
"""
