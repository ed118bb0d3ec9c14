"""uvsdk: on-device enrollment and verification of users with federatedly trained models."""

__version__ = "0.1.0"
