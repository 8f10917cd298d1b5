"""Loading trained weights into a victim, safely.

A weights file is read with ``torch.load(weights_only=True)``: only tensors and
plain containers are unpickled, so a file from an untrusted folder cannot run
code.  It may hold a ``state_dict`` or a flat vector of the trainable weights in
``model.parameters()`` order (what ``leakattack train`` checkpoints hold).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import torch

from leakattack.errors import UserError

from .victim import Victim


def load_weights(victim: Victim, path: str | Path) -> Victim:
    """Load a state_dict (or a flat weight vector) from ``path`` into ``victim``; one-sentence errors."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"weights file '{path}' does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if "not an allowed global" in str(err) or "Unsupported global" in str(err):
            raise UserError(f"weights file '{path}' holds objects other than tensors; it was not loaded") from None
        raise UserError(f"weights file '{path}' is not a readable torch file (UnpicklingError)") from None
    except Exception as err:  # truncated or foreign files fail inside torch's reader in many ways
        raise UserError(f"weights file '{path}' is not a readable torch file ({type(err).__name__})") from None
    model = victim.model
    if isinstance(state, torch.Tensor):
        if state.dim() != 1 or state.numel() != victim.d:
            raise UserError(f"weights file '{path}' holds a tensor of shape {tuple(state.shape)}, "
                            f"not the {victim.d} weights of this model")
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(state.to(victim.dtype), [p for p in model.parameters() if p.requires_grad])
        return victim
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UserError(f"weights file '{path}' holds no state_dict (a dict of tensors) nor a flat weight vector")
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        which = f"missing '{missing[0]}'" if missing else f"unexpected '{unexpected[0]}'"
        raise UserError(f"weights file '{path}' does not fit this model: {which} "
                        f"({len(missing)} missing, {len(unexpected)} unexpected keys)")
    wrong = [k for k in own if own[k].shape != state[k].shape]
    if wrong:
        raise UserError(f"weights file '{path}' does not fit this model: '{wrong[0]}' has shape "
                        f"{tuple(state[wrong[0]].shape)}, the model needs {tuple(own[wrong[0]].shape)}")
    model.load_state_dict(state)
    return victim


__all__ = ["load_weights"]
