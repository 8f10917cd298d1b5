"""Message files: one captured client message and what the attacker knows about how it was made.

A message file is a dict saved with ``torch.save`` and read back with
``torch.load(..., weights_only=True)`` (tensors and plain containers only, so a
file cannot run code).  Its keys:

* ``format`` = ``"leakattack-message"``, ``version`` = :data:`VERSION`;
* ``message``: the flat tensor the client sent;
* ``kind``: ``"gradient"`` (y = E(g), g = grad_w F(w, x), the batch-mean loss) or
  ``"update"`` (y = E(w_before - w_after) after ``local_steps`` SGD steps of
  learning rate ``lr``, all on the same batch, as FedAvg clients send);
* ``sketch``: ``Sketch.describe()`` of the sketch E the client applied (kind, d,
  b, seed and the family's parameters), or None for an unsketched message;
* ``batch_size``; ``labels`` (the batch's labels, or None when the attacker does
  not know them); ``lr``, ``local_steps`` (updates); ``defense`` (the client's
  defense spec, or None); ``input_shape`` and ``num_classes`` of the model's
  input and output, when the writer states them; ``ids`` (round, client, ...).

The flat order of g, w and of an unsketched message is the order of
``model.parameters()``: each parameter flattened row-major, then concatenated
(``torch.nn.utils.parameters_to_vector``).  :func:`write_message` writes a
file atomically; :func:`read_message` checks one and returns a :class:`Message`.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from defenses import build as build_defense

from ..data.base import outside_unit_range
from ..errors import SettingWarning, UserError, a_type
from ..sketch import Sketch, check_description
from ..torchfile import load_torch_file
from .io import unwritable_folder, write_tensors

#: local SGD steps an update message may unroll: as many as --iterations may take (config.params.MAX_ITERATIONS);
#: the attacker's model runs every one of them at each evaluation, so more is hours per step of the attack
MAX_LOCAL_STEPS = 1_000_000
#: numbers per example (the product of input_shape): 64 channels of the largest --image-size, 1024 x 1024
MAX_INPUT_NUMBERS = 64 * 1024 * 1024
#: classes a model may score: far above the largest public label sets (ImageNet-21k: 21,841)
MAX_CLASSES = 1_000_000

FORMAT = "leakattack-message"
VERSION = 1
KINDS = ("gradient", "update")
#: the keys every message file holds (optional values are None)
KEYS = ("format", "version", "message", "kind", "sketch", "batch_size", "labels", "lr", "local_steps", "defense",
        "input_shape", "num_classes", "ids")


class MessageError(UserError):
    """A message file that cannot be attacked (one sentence naming the file and the fault)."""


@dataclass
class Message:
    """One captured message, read from a message file."""

    y: torch.Tensor  #: the flat message
    kind: str  #: gradient | update
    sketch: dict | None  #: Sketch.describe() of the client's sketch; None: unsketched
    batch_size: int
    labels: torch.Tensor | None = None
    lr: float | None = None
    local_steps: int = 1
    defense: str | None = None
    input_shape: tuple | None = None
    num_classes: int | None = None
    ids: dict = field(default_factory=dict)
    path: str = ""

    def describe(self) -> dict:
        """What the file says about the message (config.json), without the tensors."""
        return {"file": self.path, "kind": self.kind, "numbers": int(self.y.numel()), "batch_size": self.batch_size,
                "labels_known": self.labels is not None, "lr": self.lr, "local_steps": self.local_steps,
                "defense": self.defense, "input_shape": None if self.input_shape is None else list(self.input_shape),
                "num_classes": self.num_classes, "ids": dict(self.ids), "encoder": self.sketch}


def is_int(v, low: int) -> bool:
    """Whether v is an integer (NumPy's included, not a bool) of at least ``low``."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and int(v) >= low


def is_real(v) -> bool:
    """Whether v is a real number (NumPy's included), not a bool."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _shape_list(shape):
    """An input shape of integers (NumPy's included) as a list of ints; anything else as it is, for the check to
    refuse in one sentence."""
    if shape is None or isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
        return shape
    items = list(shape)
    return [int(s) for s in items] if all(is_int(s, 0) for s in items) else items


def _is_id(v) -> bool:
    return isinstance(v, (str, numbers.Real)) and not isinstance(v, bool)


def check_defense(spec: str, where: str = "message") -> None:
    """Refuse a defense spec a run would refuse (the spec it builds the client's channel from), in the run's
    sentence: a :class:`MessageError`."""
    try:
        build_defense(spec)
    except UserError as err:
        raise MessageError(f"{where}: {err}") from None


def _check(fields: dict, where: str) -> None:
    """Every value of a message against its rule; MessageError naming ``where`` and the key."""
    def bad(key, what):
        raise MessageError(f"{where}: '{key}' must be {what}, got {fields[key]!r}")

    y = fields["message"]
    if not isinstance(y, torch.Tensor) or y.dim() != 1 or y.numel() == 0 or not y.is_floating_point():
        got = (f"a {str(y.dtype).replace('torch.', '')} tensor of shape {tuple(y.shape)}" if isinstance(y, torch.Tensor)
               else a_type(y))
        raise MessageError(f"{where}: 'message' must be a flat, non-empty, real floating-point tensor, got {got}")
    if not bool(torch.isfinite(y).all()):
        i = int((~torch.isfinite(y)).nonzero()[0, 0])
        raise MessageError(f"{where}: the message holds a non-finite number ({float(y[i])}) at index {i}")
    if fields["kind"] not in KINDS:
        bad("kind", " or ".join(KINDS))
    if not is_int(fields["batch_size"], 1):
        bad("batch_size", "a positive integer")
    if not is_int(fields["local_steps"], 1):
        bad("local_steps", "a positive integer")
    if fields["local_steps"] > MAX_LOCAL_STEPS:
        bad("local_steps", f"at most {MAX_LOCAL_STEPS:,} (the attacker unrolls every step at each evaluation)")
    lr = fields["lr"]
    if lr is not None and (isinstance(lr, bool) or not isinstance(lr, numbers.Real)
                           or not 0 < float(lr) < float("inf")):
        bad("lr", "a positive number")
    if fields["kind"] == "update" and lr is None:
        raise MessageError(f"{where}: an update message needs 'lr', the clients' local learning rate")
    labels = fields["labels"]
    if labels is not None:
        if not isinstance(labels, torch.Tensor) or labels.dim() != 1 or labels.is_floating_point() \
                or labels.is_complex() or labels.dtype == torch.bool:
            bad("labels", "a 1-d integer tensor")
        if labels.numel() != fields["batch_size"]:
            raise MessageError(f"{where}: 'labels' holds {labels.numel()} labels for a batch of "
                               f"{fields['batch_size']}")
    if fields["defense"] is not None and not isinstance(fields["defense"], str):
        bad("defense", "a defense spec string")
    if fields["defense"] is not None:
        check_defense(fields["defense"], where)
    shape = fields["input_shape"]
    if shape is not None and not (isinstance(shape, (list, tuple)) and 1 <= len(shape) <= 3
                                  and all(is_int(s, 1) for s in shape)):
        bad("input_shape", "a list of 1 to 3 positive integers such as [3, 32, 32]")
    if shape is not None and math.prod(int(s) for s in shape) > MAX_INPUT_NUMBERS:
        bad("input_shape", f"at most {MAX_INPUT_NUMBERS:,} numbers per example (64 channels of 1024 x 1024)")
    if fields["num_classes"] is not None and not is_int(fields["num_classes"], 1):
        bad("num_classes", "a positive integer")
    if fields["num_classes"] is not None and fields["num_classes"] > MAX_CLASSES:
        bad("num_classes", f"at most {MAX_CLASSES:,}")
    ids = fields["ids"]
    if not isinstance(ids, dict) or not all(isinstance(k, str) and _is_id(v) for k, v in ids.items()):
        bad("ids", "a dict of names to numbers or strings")
    if fields["sketch"] is not None:
        try:
            b = check_description(fields["sketch"])
        except UserError as err:
            raise MessageError(f"{where}: {err}") from None
        if y.numel() != b:
            desc = fields["sketch"]
            raise MessageError(f"{where}: the message has {y.numel()} numbers but its sketch "
                               f"({desc['kind']}, d = {desc['d']}) sends b = {b}")


def first_label_outside(labels: torch.Tensor, num_classes: int | None) -> int | None:
    """The position of the first label that is no class index (negative, or at least ``num_classes`` where given),
    or None."""
    wrong = (labels < 0) if num_classes is None else (labels < 0) | (labels >= num_classes)
    return int(wrong.nonzero()[0, 0]) if bool(wrong.any()) else None


def _plain(value):
    """A NumPy scalar as the Python number or string it holds (a file holds plain values only); others as given."""
    return value.item() if isinstance(value, np.generic) else value


def write_message(path, message: torch.Tensor, *, sketch: Sketch | dict | None = None, kind: str = "gradient",
                  batch_size: int = 1, labels=None, lr: float | None = None, local_steps: int = 1,
                  defense: str | None = None, input_shape=None, num_classes: int | None = None, **ids) -> Path:
    """Save one client message as a message file at ``path`` (atomically) and return the path.

    ``message`` is the flat tensor the client sent (flattened if it is not);
    ``sketch`` the ``Sketch`` the client applied (or its ``describe()``), None
    when it sent the plain gradient or update; ``kind`` ``"gradient"`` or
    ``"update"`` (w_before - w_after after ``local_steps`` SGD steps of rate
    ``lr``); ``labels`` the batch's labels if the attacker may know them;
    ``input_shape`` / ``num_classes`` the model's input (C, H, W) and outputs;
    ``ids`` (e.g. ``round=3, client="7"``) numbers or strings recorded as they are.
    Flat vectors follow the order of ``model.parameters()``.  A value that breaks
    the format raises ``MessageError`` and writes nothing.
    """
    desc = sketch.describe() if isinstance(sketch, Sketch) else sketch
    # clone: torch.save writes a view's whole storage (a batch's other rows, a data set's other labels)
    y = message.detach().reshape(-1).cpu().clone() if isinstance(message, torch.Tensor) else message
    if labels is not None:
        try:
            labels = torch.as_tensor(labels).detach().reshape(-1).cpu().clone()
        except (TypeError, ValueError, RuntimeError):  # strings, ragged lists: torch's own message is no sentence
            raise MessageError(f"message: 'labels' must be class indices (a 1-d integer tensor), got "
                               f"{labels!r:.60}") from None
    fields = {
        "format": FORMAT, "version": VERSION, "message": y, "kind": kind, "sketch": desc,
        "batch_size": _plain(batch_size), "labels": labels,
        "lr": float(lr) if lr is not None and is_real(lr) else lr,
        "local_steps": _plain(local_steps), "defense": defense or None,
        "input_shape": _shape_list(input_shape),
        "num_classes": _plain(num_classes), "ids": {k: _plain(v) for k, v in ids.items()},
    }
    _check(fields, "message")
    if labels is not None:  # class indices: a file holding others is refused when a run reads it against its model
        top = None if num_classes is None else int(num_classes)
        i = first_label_outside(labels, top)
        if i is not None:
            what = "at least 0" if top is None else f"in [0, {top}) (num_classes is {top})"
            raise MessageError(f"message: 'labels' must be class indices {what}, got {int(labels[i])} at position {i}")
    unread = [f"{k}={v}" for k, v, default in (("lr", lr, None), ("local_steps", local_steps, 1)) if v != default]
    if kind == "gradient" and unread:  # what a run reads as one gradient, whatever the local training was
        warnings.warn(f"{' and '.join(unread)} describe{'s' if len(unread) == 1 else ''} an update's local training, "
                      "which a gradient message does not read: give kind='update' for w_before - w_after",
                      SettingWarning, stacklevel=2)
    fields["batch_size"], fields["local_steps"] = int(batch_size), int(local_steps)
    where = f"message file path '{path}'"
    target = Path(path)
    if not str(path).strip():
        raise MessageError("the message file path is empty: name a file, such as 'message.pt'")
    if target.is_dir():
        raise MessageError(f"{where} is a folder: name a file in it, such as '{target / 'message.pt'}'")
    blocked = unwritable_folder(target)  # a parent that is a file, or a folder it cannot write in
    if blocked is not None:
        what = "a file, not a folder" if blocked.exists() and not blocked.is_dir() else "not a writable folder"
        raise MessageError(f"{where} cannot be written: '{blocked}' is {what}")
    try:
        write_tensors(path, fields)
    except OSError as err:  # what only the write finds (a full disk), as a MessageError naming the message file
        raise MessageError(f"{where} could not be written ({err.strerror or type(err).__name__}); nothing was "
                           "written") from None
    return Path(path)


def read_message(path) -> Message:
    """The message file at ``path``, checked; a file that is not one raises ``MessageError`` (one sentence)."""
    path = Path(path)
    where = f"message file '{path}'"
    data = load_torch_file(path, where, error=MessageError)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise MessageError(f"{where} is not a message file (no format '{FORMAT}'; write one with write_message)")
    if "version" not in data:
        raise MessageError(f"{where} has no 'version'")
    if not is_int(data.get("version"), 1) or data["version"] > VERSION:
        raise MessageError(f"{where} has format version {data.get('version')!r}; this leakattack reads "
                           f"versions up to {VERSION}")
    missing = [k for k in KEYS if k not in data]
    if missing:
        raise MessageError(f"{where} has no '{missing[0]}'")
    _check(data, where)
    return Message(
        y=data["message"], kind=data["kind"], sketch=data["sketch"], batch_size=int(data["batch_size"]),
        labels=data["labels"], lr=None if data["lr"] is None else float(data["lr"]),
        local_steps=int(data["local_steps"]), defense=data["defense"],
        input_shape=None if data["input_shape"] is None else tuple(int(s) for s in data["input_shape"]),
        num_classes=None if data["num_classes"] is None else int(data["num_classes"]), ids=dict(data["ids"]),
        path=str(path),
    )


def read_truth(path, what: str = "truth file") -> tuple[torch.Tensor, torch.Tensor | None]:
    """(images, labels or None) of a truth file: a tensor (B, C, H, W) or (C, H, W) in [0, 1], or a dict with
    ``images`` and optional ``labels``; read with ``weights_only``.  A bad file raises ``MessageError``, naming the
    file as ``what`` (a client's ``--data file``)."""
    path = Path(path)
    where = f"{what} '{path}'"
    data = load_torch_file(path, where, error=MessageError)
    labels = None
    if isinstance(data, dict):
        if "images" not in data:
            raise MessageError(f"{where} is a dict without 'images'")
        images, labels = data["images"], data.get("labels")
    else:
        images = data
    if not isinstance(images, torch.Tensor) or not images.is_floating_point() or images.dim() not in (3, 4):
        got = (f"a {str(images.dtype)[6:]} tensor of shape {tuple(images.shape)}" if isinstance(images, torch.Tensor)
               else a_type(images))
        hint = " (pixels 0-255: divide by 255)" if isinstance(images, torch.Tensor) and images.dtype == torch.uint8 \
            else ""
        raise MessageError(f"{where} must hold floating-point images (B, C, H, W), got {got}{hint}")
    images = images.detach() if images.dim() == 4 else images.detach().unsqueeze(0)
    if images.numel() == 0:
        raise MessageError(f"{where} holds no image values (shape {tuple(images.shape)}): it must hold at least one "
                           "image with at least one channel and pixel")
    if not bool(torch.isfinite(images).all()):
        bad = int((~torch.isfinite(images)).sum())
        raise MessageError(f"{where}: {bad} of the images' values {'is' if bad == 1 else 'are'} not finite (NaN or "
                           "inf); it must hold images in [0, 1]")
    outside = outside_unit_range(images)
    if outside is not None:
        raise MessageError(f"{where}: the images must lie in [0, 1] (unnormalised pixels), and they reach "
                           f"{outside[0]:.4g} to {outside[1]:.4g}")
    images = images.clamp(0, 1)  # round-off within RANGE_SLACK of the range (a resize, a colour conversion)
    if labels is not None:
        if not isinstance(labels, torch.Tensor) or labels.is_floating_point() or labels.dtype == torch.bool:
            raise MessageError(f"{where}: 'labels' must be an integer tensor")
        labels = labels.reshape(-1)
        if labels.numel() != images.shape[0]:
            raise MessageError(f"{where} holds {labels.numel()} labels for {images.shape[0]} images")
    return images, labels


__all__ = ["FORMAT", "VERSION", "KINDS", "MAX_LOCAL_STEPS", "MAX_INPUT_NUMBERS", "MAX_CLASSES", "Message",
           "MessageError", "check_defense", "write_message", "read_message", "read_truth"]
