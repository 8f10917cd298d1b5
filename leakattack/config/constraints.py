"""The parameter constraints (:mod:`leakattack.constraints`, a leaf module), where the configuration imports them."""

from __future__ import annotations

from ..constraints import (
    Choice,
    Constraint,
    Cores,
    DatasetName,
    Flag,
    Index,
    Items,
    ModelName,
    Number,
    Optional,
    PathName,
    Steps,
    Table,
    Text,
    available_cores,
)

__all__ = ["Constraint", "Choice", "DatasetName", "ModelName", "Number", "Index", "Cores", "available_cores", "Flag",
           "Text", "PathName", "Steps", "Table", "Items", "Optional"]
