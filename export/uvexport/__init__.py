"""uvexport: trainer checkpoints and reference models to signed ``.uvb`` bundles."""

__version__ = "0.1.0"
