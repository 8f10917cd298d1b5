"""Loading trained weights into a victim, safely.

A weights file is read with ``torch.load(weights_only=True)``: only tensors and
plain containers are unpickled, so a file from an untrusted folder cannot run
code.  It may hold a ``state_dict``, a flat vector of the trainable weights in
``model.parameters()`` order, or ``{"weights": flat vector, "buffers": {name:
tensor}}`` (what ``leakattack train`` checkpoints hold: a model with BatchNorm
keeps its running statistics in the buffers; a ``safl`` checkpoint adds its
server optimiser's state under ``"server"``, which the client's model does not
read).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import torch

from leakattack.errors import SettingWarning, UserError
from leakattack.torchfile import load_torch_file

from .victim import Victim


def _built_for(victim: Victim) -> str:
    """What a model's weight count depends on besides its class: the input shape and classes it was built for (a
    checkpoint trained on images of another size has another count)."""
    return (f" (built for inputs of shape {tuple(victim.input_shape)} and {victim.num_classes} classes: its count "
            "depends on both)")


def _value_error(path: Path, t: torch.Tensor, name: str | None, dtype: torch.dtype) -> str | None:
    """One sentence on a tensor of weights that are not real and finite in ``dtype``, the model's (complex, inf,
    nan, or beyond its range), or None; ``name`` None: the flat weight vector."""
    what = "the weight vector" if name is None else f"'{name}'"
    if t.is_meta or t.layout != torch.strided or t.is_quantized:  # no values to read, or not laid out as weights
        kind = "a meta tensor (a shape without values)" if t.is_meta else \
            "a quantised tensor" if t.is_quantized else f"a {str(t.layout).replace('torch.', '')} tensor"
        return f"weights file '{path}': {what} is {kind}; weights must be a dense tensor of numbers"
    if t.is_complex():
        return (f"weights file '{path}': {what} holds complex numbers ({str(t.dtype).replace('torch.', '')}); "
                "weights must be real")
    if not t.is_floating_point():  # integers and booleans are finite
        return None
    bad = ~torch.isfinite(t.detach())
    if dtype.is_floating_point:
        bad |= ~torch.isfinite(t.detach().to(dtype))
    if not bool(bad.any()):
        return None
    first = tuple(int(i) for i in bad.nonzero()[0])
    where, value = (first[0] if len(first) == 1 else first), float(t[first])
    if math.isfinite(value):
        return (f"weights file '{path}': {what} holds {value:g} at index {where}, beyond the range of the model's "
                f"{str(dtype).replace('torch.', '')}")
    return f"weights file '{path}': {what} holds a non-finite number ({value}) at index {where}; weights must be finite"


#: the storage dtypes whose weights a victim casts up, and whose rounding they keep
HALF_DTYPES = (torch.float16, torch.bfloat16)


def _warn_half(path: Path, tensors, dtype: torch.dtype) -> None:
    """One warning line where ``tensors`` (the file's) hold half-precision weights that are cast to ``dtype``, the
    model's: the run computes in its own precision, on weights rounded as they were stored."""
    stored = sorted({str(t.dtype).replace("torch.", "") for t in tensors
                     if t.dtype in HALF_DTYPES and t.dtype != dtype})
    if not stored:
        return
    digits = min(round(-math.log10(torch.finfo(getattr(torch, name)).resolution)) for name in stored)
    warnings.warn(f"weights file '{path}' stores its weights in {' and '.join(stored)}: they are cast to the run's "
                  f"precision, and keep the rounding they were stored with (about {digits} significant digits)",
                  SettingWarning, stacklevel=3)


def _warn_integers(path: Path, pairs) -> None:
    """One warning line where the file gives integers or booleans for floating-point weights (``pairs``: name or None
    for the flat vector, the file's tensor): they are cast as they are, so a quantised checkpoint's integer codes,
    whose scales the file does not apply, load as weights of hundreds."""
    found = [(name, t) for name, t in pairs if not t.is_floating_point() and not t.is_complex()]
    if not found:
        return
    name, t = found[0]
    what = "the weight vector" if name is None else f"'{name}'"
    more = f" and {len(found) - 1} more" if len(found) > 1 else ""
    warnings.warn(f"weights file '{path}' gives integers ({str(t.dtype).replace('torch.', '')}) for {what}{more}, "
                  "floating-point weights of the model: they are cast as they are (a quantised checkpoint's integer "
                  "codes need their scales applied first)", SettingWarning, stacklevel=3)


def _nested_state_dicts(state: dict) -> list[str]:
    """The keys of ``state`` whose values are non-empty dicts of tensors (a training checkpoint's state_dict)."""
    return [str(k) for k, v in state.items() if isinstance(v, dict) and v
            and all(isinstance(t, torch.Tensor) for t in v.values())]


def _fit_hint(missing: list[str], unexpected: list[str]) -> str:
    """A clause on why a state_dict's keys miss the model's, where one prefix explains it ('' otherwise)."""
    for prefix in ("module.", "model.", "_orig_mod."):
        if unexpected and all(k.startswith(prefix) for k in unexpected) and \
                set(missing) <= {k[len(prefix):] for k in unexpected}:
            return (f"; its keys start with '{prefix}' (a wrapped model's): save the inner model's state_dict, or "
                    f"strip '{prefix}' from the keys")
    return ""


def _bn_counters(keys: list[str]) -> bool:
    """Whether every name in ``keys`` is a BatchNorm layer's batch counter, which torch fills in when absent."""
    return bool(keys) and all(k.rsplit(".", 1)[-1] == "num_batches_tracked" for k in keys)


def load_weights(victim: Victim, path: str | Path, drawn_by: str | None = None,
                 unnamed_act: tuple[str, str] | None = None) -> Victim:
    """Load a state_dict (or a flat weight vector) from ``path`` into ``victim``; one-sentence errors.

    ``drawn_by`` names the settings that drew the model's initial weights (``"--model-seed 5"``): where the file
    sets every parameter and buffer, a one-line warning says they change nothing.  A flat vector sets the trainable
    weights only; on a model with BatchNorm a one-line warning says its running statistics stay as initialised, and
    on one with frozen parameters that those do.  ``unnamed_act``: (model name, the activation it was built with
    by default) where nothing named one (``("lenet", "sigmoid")``): a flat vector does not say which it was trained
    with, and a one-line warning says so.
    """
    path = Path(path)
    state = load_torch_file(path, f"weights file '{path}'", objects_hint=(
        " (a whole pickled model or an optimizer's state?): save model.state_dict() instead"))
    model = victim.model
    buffers = None
    if isinstance(state, dict) and "weights" in state and isinstance(state.get("server"), dict) and \
            set(state) <= {"weights", "buffers", "server"}:  # a `leakattack train` checkpoint of a server with state
        # (safl's optimiser moments): the client's model is the weights and buffers alone
        state = {k: v for k, v in state.items() if k != "server"}
        if set(state) == {"weights"}:
            state = state["weights"]
    if isinstance(state, dict) and set(state) == {"weights", "buffers"}:  # a `leakattack train` checkpoint
        state, buffers = state["weights"], state["buffers"]
        own = dict(model.named_buffers())
        if isinstance(state, torch.Tensor) and state.dim() == 1 and state.numel() != victim.d:  # another model's
            raise UserError(f"weights file '{path}' is the checkpoint of another model: it holds {state.numel()} "
                            f"weights, this model has {victim.d}{_built_for(victim)}")
        if not isinstance(buffers, dict) or set(buffers) != set(own) or any(
                not isinstance(b, torch.Tensor) or b.shape != own[n].shape for n, b in buffers.items()):
            raise UserError(f"weights file '{path}' holds buffers that do not fit this model")
    if isinstance(state, torch.Tensor):
        if state.dim() != 1 or state.numel() != victim.d:
            raise UserError(f"weights file '{path}' holds a tensor of shape {tuple(state.shape)}, "
                            f"not the {victim.d} weights of this model{_built_for(victim)}")
        problem = _value_error(path, state, None, victim.dtype) or next(
            (e for n, b in (buffers or {}).items() if (e := _value_error(path, b, n, own[n].dtype))), None)
        if problem:
            raise UserError(problem)
        with torch.no_grad():
            trainable = [p for p in model.parameters() if p.requires_grad]
            for part, p in zip(state.split([p.numel() for p in trainable]), trainable):  # each in its own dtype
                p.copy_(part.reshape(p.shape))
            for n, b in (buffers or {}).items():
                own[n].copy_(b)
        _warn_half(path, [state, *(buffers or {}).values()], victim.dtype)
        _warn_integers(path, [(None, state)])
        if unnamed_act is not None:
            warnings.warn(f"weights file '{path}' holds a flat weight vector, which does not say which activation "
                          f"it was trained with: {unnamed_act[0]} is built with its default act={unnamed_act[1]} (a "
                          "`leakattack train` checkpoint gives its training's only where it lies in its folder, "
                          "beside protocol.json; `leakattack train` uses tanh): give --model-param act=... as "
                          "trained", SettingWarning, stacklevel=2)
        statistics = [n for n, _ in model.named_buffers() if n.rsplit(".", 1)[-1] == "running_mean"]
        if buffers is None and statistics:
            warnings.warn(f"weights file '{path}' is a flat vector of the trainable weights: the model's BatchNorm "
                          "running statistics stay as initialised (mean 0, variance 1), and eval mode (--bn eval) "
                          "normalises with them; a state_dict carries them", SettingWarning, stacklevel=2)
        frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
        if frozen:  # the vector holds none of them
            warnings.warn(f"weights file '{path}' is a vector of the trainable weights: the model's frozen "
                          f"parameter{'s' if len(frozen) > 1 else ''} ({', '.join(frozen[:3])}"
                          f"{' and more' if len(frozen) > 3 else ''}) stay as this run initialises them"
                          f"{' (' + drawn_by + ')' if drawn_by else ''}; a state_dict carries them", SettingWarning,
                          stacklevel=2)
        if drawn_by and not frozen and (buffers is not None or not list(model.buffers())):
            _warn_drawn(drawn_by, path)
        return victim
    if isinstance(state, dict) and not all(isinstance(v, torch.Tensor) for v in state.values()):
        nested = _nested_state_dicts(state)
        if nested:
            names = " and ".join(f"'{k}'" for k in nested[:3])
            raise UserError(f"weights file '{path}' is a training checkpoint with a state_dict under {names}: save "
                            "that alone, e.g. torch.save(torch.load(F, weights_only=True)"
                            f"[{nested[0]!r}], 'weights.pt')")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UserError(f"weights file '{path}' holds no state_dict (a dict of tensors) nor a flat weight vector")
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if _bn_counters(missing):  # torch's BatchNorm loads a state_dict without them (older files), counting from 0
        state = {**state, **{k: torch.zeros_like(own[k]) for k in missing}}
        missing = []
    if missing or unexpected:
        # the key named is one that matters: BatchNorm's counters would be taken as 0 (above), its statistics not
        which = (f"missing '{min(missing, key=lambda k: k.endswith('.num_batches_tracked'))}'" if missing
                 else f"unexpected '{unexpected[0]}'")
        raise UserError(f"weights file '{path}' does not fit this model: {which} "
                        f"({len(missing)} missing, {len(unexpected)} unexpected keys){_fit_hint(missing, unexpected)}")
    wrong = [k for k in own if k in state and own[k].shape != state[k].shape]
    if wrong:
        raise UserError(f"weights file '{path}' does not fit this model: '{wrong[0]}' has shape "
                        f"{tuple(state[wrong[0]].shape)}, the model needs {tuple(own[wrong[0]].shape)}")
    problem = next(filter(None, (_value_error(path, state[k], k, own[k].dtype) for k in own if k in state)), None)
    if problem:
        raise UserError(problem)
    model.load_state_dict(state)
    _warn_half(path, [state[k] for k in own if k in state], victim.dtype)
    _warn_integers(path, [(k, state[k]) for k in own if k in state and own[k].is_floating_point()])
    if drawn_by:
        _warn_drawn(drawn_by, path)
    return victim


def _warn_drawn(drawn_by: str, path) -> None:
    """The warning that the settings ``drawn_by`` names (one, or two: ``"--model-seed 5 and ..."``) change nothing
    where the weights file sets every weight."""
    verb = "change" if " and " in drawn_by else "changes"
    warnings.warn(f"{drawn_by} {verb} nothing: weights file '{path}' sets every weight of the model", SettingWarning,
                  stacklevel=3)


__all__ = ["load_weights"]
