"""Thin adapters that send a framework's logged metrics through
trainctl.report: ``trainctl.integrations.lightning.TrainctlLogger`` (PyTorch
Lightning) and ``trainctl.integrations.hf.TrainctlCallback`` (Hugging Face
Trainer). Each imports its framework only when it is imported itself.
"""

import re
from typing import Any, Dict, Mapping, Optional

_BAD = re.compile(r"[^A-Za-z0-9_.:/-]")


def metric_key(name: str, prefix: str = "") -> str:
    """A framework's metric name as a trainctl key (1 to 128 characters of
    [A-Za-z0-9_.:/-]): other characters become "_", longer names are cut."""
    key = _BAD.sub("_", prefix + str(name))[:128]
    return key or "_"


def scalars(metrics: Mapping[str, Any], prefix: str = "") -> Dict[str, float]:
    """The scalar entries of ``metrics`` under trainctl keys: numbers,
    numpy scalars and one-element tensors; strings, lists, NaN and
    infinities are skipped (a framework logs some of those)."""
    out: Dict[str, float] = {}
    for name, value in metrics.items():
        item = getattr(value, "item", None)
        if callable(item):
            try:
                value = item()
            except (ValueError, RuntimeError):  # not one element
                continue
        if isinstance(value, (bool, str, bytes)) or value is None:
            continue
        try:
            f = float(value)
        except (TypeError, ValueError):
            continue
        if f != f or f in (float("inf"), float("-inf")):
            continue
        out[metric_key(name, prefix)] = f
    return out


def to_step(step: Optional[Any]) -> Optional[int]:
    """A framework's step as a report() step (None stays None)."""
    if step is None:
        return None
    return max(0, int(step))
