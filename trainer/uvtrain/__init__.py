"""uvtrain: the federated trainer (FedUV, FedHide, FedAwS, softmax, FedFace)."""

__version__ = "0.1.0"
