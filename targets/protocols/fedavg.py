"""FedAvg (McMahan et al. 2017): K local SGD steps, the server averages dw."""

from __future__ import annotations

from .base import Protocol


class FedAvg(Protocol):
    """McMahan et al. 2017: K local SGD steps, the server averages dw."""
