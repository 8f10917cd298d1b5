"""JSON-ready values: the one rule every file leakattack writes follows."""

from __future__ import annotations

import math
from typing import Any


def to_jsonable(obj: Any) -> Any:
    """Floats that are not finite become None; tensors/numpy values become Python values; tuples become lists."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):
        return to_jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


__all__ = ["to_jsonable"]
