"""The victim: a model at weights w, its loss F and what an attack may ask of it.

A :class:`Victim` is what every later station talks to.  Code asks it for its
capabilities (``victim.task``, ``victim.head``, ``victim.bn_mode``) instead of
testing model names.  Any ``nn.Module`` becomes a victim through
:meth:`Victim.from_module` (cross-entropy classification unless another loss is
given); the registered models are built by ``targets.get_model``.

The flat parameter order, used by the gradient oracle, sketches and messages,
is the order of ``model.parameters()`` (trainable ones only).

BatchNorm: in ``bn_mode="train"`` the client normalises with the batch's own
statistics, and so does the attacker's simulation of the client.  Such forward
passes would also update the running statistics, so that every attacker
evaluation drifted the model the client holds; the victim turns that update off
(``track_running_stats = False`` on every BatchNorm layer while in train mode),
so the running buffers, the part of the state_dict a weights file carries, stay
as loaded.  In ``bn_mode="eval"`` the running statistics normalise.
"""

from __future__ import annotations

import contextlib
import math
import operator
import os
import re
import sys
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Callable, Iterator, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import TorchFunctionMode

from leakattack.constraints import available_cores, env_count
from leakattack.errors import SettingWarning, UserError, a_type, allocation_failed
from leakattack.plugins import place_text, raised_at

TASKS = ("classification", "regression")
"""What a victim's outputs are: class scores under cross-entropy, or a regression's values (``task=``)."""
BN_MODES = ("train", "eval")
"""How a victim's BatchNorm layers normalise: by the batch's own statistics (``train``, as a training client) or
by their running ones (``eval``; ``bn_mode=``)."""


def resolve_bn_mode(mode: str, batch_size: int) -> str:
    """The BatchNorm mode of the client's forward pass; ``auto``: ``eval`` for one example, ``train`` for a batch.

    A batch is normalised with its own statistics, as a training client does.  One
    example in train mode would be normalised by its own spatial statistics, which
    no training client does; the field's single-image case (breaching's
    ``invertinggradients`` on one image) runs the model with the running statistics
    the server holds.  On one image in train mode the gradient's direction also
    turns under changes below one grey level (docs/ig_recipe.md), and neither
    leakattack's Inverting Gradients nor breaching's rebuilds it.
    """
    if mode == "auto":
        return "eval" if batch_size == 1 else "train"
    return mode

#: victims with at least this many weights are attacked on every core unless told otherwise (ResNets, ViTs: large
#: convolutions and matrix products, which torch splits well), smaller ones (LeNet, MLPs, linear models) on one
#: thread, whose small tensor ops only wait on each other with more (benchmarks/deep_step.py, attack_speed.py)
DEEP_WEIGHTS = 100_000

#: an attack that puts at least this many images through a smaller victim at each evaluation (its starts times
#: the batch) runs on every core too: a batch is enough work to split (``leakattack run --model lenet --sketch srht
#: --iterations 200 --threads 1|2`` with ``--optimizer adam --restarts 8|4`` or ``--batch-size 4|8``, 2-core AMD
#: EPYC: two threads 27-44% and 29% faster with Adam, 16% and 21% with L-BFGS; one image gains nothing)
PARALLEL_EXAMPLES = 4


#: the cores this process counts as its own where a pool of workers splits the machine (None: every one it may use)
_share: int | None = None


def share_cores(n: int | None) -> None:
    """Count at most ``n`` cores as this process's own (a worker of a pool that splits the machine between its
    processes; None: every core it may run on), so "every core" in the thread rule means its share."""
    global _share
    _share = None if n is None else max(1, int(n))


@contextlib.contextmanager
def cores_shared(n: int) -> Iterator[None]:
    """Inside the block this process counts at most ``n`` cores as its own (:func:`share_cores`) and torch runs ``n``
    threads, as a pool's worker of that share does; both as they were after it."""
    share, threads = _share, torch.get_num_threads()
    share_cores(n)
    torch.set_num_threads(max(1, int(n)))
    try:
        yield
    finally:
        share_cores(share)
        torch.set_num_threads(threads)


def cpu_cores() -> int:
    """The CPU cores this process may run on (:func:`leakattack.constraints.available_cores`: its affinity, at most a
    SLURM job's ``SLURM_CPUS_PER_TASK``); at most ``OMP_NUM_THREADS`` where that holds a positive whole number (the
    usual cap on a shared machine or in a cluster job, which torch's own thread count follows); at most its share of
    them in a pool of workers (:func:`share_cores`)."""
    n = available_cores()
    if (cap := env_count("OMP_NUM_THREADS")) is not None:
        n = min(n, cap)
    return n if _share is None else min(n, _share)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy; ``target`` is class indices (B,) of any integer dtype, or probabilities (B, C)."""
    if not target.is_floating_point():
        return F.cross_entropy(logits, target.long())
    if target.shape != logits.shape:  # real numbers of another shape would broadcast into a wrong loss
        raise UserError(f"cross-entropy takes integer class indices or class probabilities of the scores' shape "
                        f"{tuple(logits.shape)}, got {str(target.dtype).removeprefix('torch.')} targets of shape "
                        f"{tuple(target.shape)}")
    return -(target * F.log_softmax(logits, dim=-1)).sum(-1).mean()


def shaped_like(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """A regression's targets in the shape of the model's output: (B,) targets of a (B, 1) output become (B, 1)
    (compared as they are, they would broadcast into a (B, B) difference); targets that do not hold one number per
    output are one sentence."""
    if target.shape == output.shape:
        return target
    if target.shape[:1] == output.shape[:1] and target.numel() == output.numel():
        return target.reshape(output.shape)
    raise UserError(f"the regression targets have shape {tuple(target.shape)} and the model's outputs "
                    f"{tuple(output.shape)}: give one target per output")


def squared_error(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """1/2 (w^T x - y)^2 averaged over the batch (the sketching paper's linear-regression F); ``target`` is taken in
    the output's shape (:func:`shaped_like`)."""
    return 0.5 * (output - shaped_like(output, target).to(output.dtype)).pow(2).mean()


class TargetsShaped:
    """A regression loss that sees its targets in the shape of the model's output (:func:`shaped_like`): a user's
    ``nn.MSELoss()`` on a (B, 1) output compares each example with its own target."""

    def __init__(self, loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
        self.__wrapped__ = loss

    def __call__(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.__wrapped__(output, shaped_like(output, target))

    def __repr__(self) -> str:
        return f"TargetsShaped({self.__wrapped__!r})"


def batchnorm_layers(model: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    """The BatchNorm layers of ``model``."""
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def batch_moments(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and biased variance of activations (N, C, ...) over every axis but the channel axis."""
    dims = [0, *range(2, a.dim())]
    return a.mean(dims), a.var(dims, unbiased=False)


def batchnorm_input_moments(model: nn.Module, x: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor] | None]:
    """Per-channel mean and biased variance of the input of every BatchNorm layer during one forward pass of x
    (over every axis but the channel axis; differentiable in x), in :func:`batchnorm_layers`' order: None for a
    layer the pass does not call (a spare module, a branch not taken), the last call's for one it calls twice (as
    DeepInversion's hooks keep it)."""
    layers = batchnorm_layers(model)
    seen: dict[int, tuple] = {}

    def hook(index):
        def record(module, inputs):
            seen[index] = batch_moments(inputs[0])
        return record

    handles = [m.register_forward_pre_hook(hook(i)) for i, m in enumerate(layers)]
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    return [seen.get(i) for i in range(len(layers))]


def has_batchnorm(model: nn.Module) -> bool:
    """Whether any BatchNorm layer is in ``model``."""
    return bool(batchnorm_layers(model))


def uses_batch_statistics(model: nn.Module) -> bool:
    """Whether a forward normalises with batch statistics (a BatchNorm in train mode, or one without running ones)."""
    return any(m.training or m.running_mean is None for m in batchnorm_layers(model))


def running_statistics_layers(model: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    """The BatchNorm layers of ``model`` that keep running statistics."""
    return [m for m in batchnorm_layers(model) if m.running_mean is not None]


@contextlib.contextmanager
def statistics_tracked(model: nn.Module, on: bool) -> Iterator[None]:
    """While in the block, the BatchNorm layers of ``model`` that keep running statistics update them as they
    normalise by their batches (``on``) or leave them as they are (not ``on``: a forward pass in train mode still
    normalises by its batch); each as it was after it."""
    layers = running_statistics_layers(model)
    before = [m.track_running_stats for m in layers]
    for m in layers:
        m.track_running_stats = on
    try:
        yield
    finally:
        for m, b in zip(layers, before):
            m.track_running_stats = b


def batchnorm_without_running_statistics(model: nn.Module) -> list[str]:
    """The names of ``model``'s BatchNorm layers that keep no running statistics (``track_running_stats=False`` when
    made): in eval mode too they normalise by their batch's own statistics."""
    return [name or type(m).__name__ for name, m in model.named_modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is None]


def last_linear(model: nn.Module) -> nn.Linear | None:
    """The last ``nn.Linear`` registered in ``model`` (the usual classifier head), or None."""
    heads = [m for m in model.modules() if isinstance(m, nn.Linear)]
    return heads[-1] if heads else None


def output_linear(model: nn.Module, input_shape,
                  num_classes: int | None = None) -> tuple[nn.Linear | None, bool | None]:
    """The classifier head of ``model`` and whether the model's output was seen to come from it (None: not told).

    One forward pass of a batch of 2 zeros of ``input_shape`` (buffers restored, in the mode the model is in) finds
    the ``nn.Linear`` whose output the model returns, or else the last one run whose output, as many numbers as the
    model's, the output is computed from (a softmax, a scaling or a reshape after the head): ``(layer, True)``.
    Where no ``nn.Linear`` computes the output (a convolutional head, ``F.linear`` on a layer's weight), the last
    registered one that runs, :func:`last_linear` (else the last that ran, or None where none ran): ``(layer,
    False)``; where the pass cannot tell (the module fails on the
    batch, or answers with other than (2, ``num_classes``) real scores, which :meth:`Victim.check_output` refuses),
    ``(last_linear, None)``."""
    last = last_linear(model)
    shape = tuple(whole(s) or 0 for s in input_shape) if isinstance(input_shape, (tuple, list, torch.Size)) else ()
    if last is None or not shape or min(shape) < 1:
        return last, None
    p = next((q for q in model.parameters() if q.is_floating_point()), None)
    dtype, device = (p.dtype, p.device) if p is not None else (torch.get_default_dtype(), None)
    ran: list[tuple[nn.Linear, torch.Tensor]] = []

    def record(module, inputs, output):
        if isinstance(output, torch.Tensor):
            ran.append((module, output))

    handles = [m.register_forward_hook(record) for m in model.modules() if isinstance(m, nn.Linear)]
    try:
        with kept_buffers(model), torch.enable_grad():
            out = model(torch.zeros(2, *shape, dtype=dtype, device=device, requires_grad=True))
    except Exception:  # noqa: BLE001 -- check_output says what is wrong with the module
        return last, None
    finally:
        for h in handles:
            h.remove()
    if not isinstance(out, torch.Tensor):
        return last, None
    direct = [m for m, o in ran if o is out]
    if direct:
        return direct[-1], True
    reached, todo = set(), [out.grad_fn]
    while todo:  # the autograd nodes the output is computed from
        node = todo.pop()
        if node is None or node in reached:
            continue
        reached.add(node)
        todo.extend(n for n, _ in node.next_functions)
    feeding = [m for m, o in ran if o.grad_fn is not None and o.grad_fn in reached and o.numel() == out.numel()]
    if feeding:
        return feeding[-1], True
    if output_problem(out, "classification", num_classes or (out.shape[-1] if out.dim() else 0), 2):
        return last, None  # no class scores to find the layer of
    runs = [m for m, _ in ran]  # a registered nn.Linear that never runs has no inputs for the label rules to read
    return (last if any(m is last for m in runs) else runs[-1] if runs else None), False


#: torch's advice at the end of a backward that failed, which a refusal replaces by the line it names
ANOMALY_HINT = re.compile(r"\s*Hint: enable anomaly detection.*$")
#: a frame of a traceback as text: file, line, function
FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


#: the packages whose classes are not the user's code: a message names no place in them
_OURS = ("torch", "builtins", "leakattack", "targets", "defenses")


def code_files(classes) -> set[str]:
    """The files the user's code of ``classes`` (and of their bases outside torch and leakattack) was compiled from:
    their modules' files and their functions' (a notebook's cells), for :func:`raised_at`."""
    files: set[str] = set()
    for cls in classes:
        for klass in getattr(cls, "__mro__", ()):
            if str(getattr(klass, "__module__", "")).split(".")[0] in _OURS:
                continue
            files.add(str(getattr(sys.modules.get(klass.__module__), "__file__", "") or ""))
            for value in vars(klass).values():
                code = getattr(getattr(value, "__func__", value), "__code__", None)
                if code is not None:
                    files.add(code.co_filename)
    files.discard("")
    return files


def module_files(model: nn.Module) -> set[str]:
    """The user's code files of ``model``'s classes, its submodules' included."""
    return code_files({type(m) for m in model.modules()})


def defined_at(func) -> str:
    """`` at /abs/net.py:10`` where the user's function (``Net.forward``) is defined, or empty (torch's, ours)."""
    func = getattr(func, "__func__", func)
    code = getattr(func, "__code__", None)
    if code is None or str(getattr(func, "__module__", "")).split(".")[0] in _OURS:
        return ""
    return f" at {os.path.abspath(code.co_filename)}:{code.co_firstlineno}"


def forward_at(model: nn.Module) -> str:
    """`` (forward of Net at /abs/net.py:10)`` for a model whose forward is the user's code, else empty."""
    where = defined_at(getattr(type(model), "forward", None))
    return f" (forward of {type(model).__name__}{where})" if where else ""


def output_problem(out, task: str, num_classes: int, batch: int) -> str | None:
    """What is wrong with a model's output for a batch of ``batch`` (the rest of a sentence naming the model), or
    None: the loss and its gradient need a real floating-point tensor, (batch, num_classes) class scores for a
    classifier, one row per example for a regression."""
    if not isinstance(out, torch.Tensor):
        want = f"a tensor of ({batch}, {num_classes}) class scores" if task == "classification" else "a tensor"
        wrap = (": wrap it in a module whose forward returns that tensor (a Hugging Face model's out.logits)"
                if isinstance(out, (tuple, list, dict)) or hasattr(out, "logits") else "")
        return f"returns {a_type(out)} for a batch of {batch}, not {want}{wrap}"
    if not out.is_floating_point():  # integers and booleans have no gradient; complex scores have no cross-entropy
        return (f"returns {str(out.dtype).replace('torch.', '')} outputs for a batch of {batch}; the loss and its "
                "gradient need real floating-point outputs (return them before any rounding or argmax)")
    shape = tuple(out.shape)
    if task == "classification" and shape != (batch, num_classes):
        return f"returns {shape} for a batch of {batch}, not the ({batch}, {num_classes}) class scores"
    if task == "regression" and (not shape or shape[0] != batch):
        return f"returns {shape} for a batch of {batch}, not one output per example (a leading dimension of {batch})"
    return None



def _hardsigmoid(input: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """``F.hardsigmoid`` as ``relu6(x + 3) / 6``, from operations whose backward pass autograd differentiates again
    (torch's own kernel has no second derivative): the same values and first derivative to rounding
    (torch's float64 kernel scales its derivative by 1/6 rounded to float32, 3e-8 relative from this one)."""
    out = F.relu6(input + 3) / 6
    return input.copy_(out) if inplace else out


class TwiceDifferentiable(TorchFunctionMode):
    """Inside the mode ``F.hardsigmoid`` (``nn.Hardsigmoid``, the squeeze-and-excitation gate of MobileNetV3) runs as
    :func:`_hardsigmoid`, whose gradient an attack can differentiate in the input; every other call runs as it is."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is F.hardsigmoid:
            return _hardsigmoid(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


def needs_composite(model: nn.Module) -> bool:
    """Whether a module of ``model`` is a unit whose torch kernel has no second derivative (``nn.Hardsigmoid``)."""
    return any(isinstance(m, nn.Hardsigmoid) for m in model.modules())


#: words of torch's errors for an operation whose backward pass autograd cannot differentiate again
_NOT_TWICE = ("is not implemented", "double backward", "once_differentiable", "differentiate twice",
              "not compatible with .grad()", "does not support double backward")


def not_twice(err: BaseException) -> bool:
    """Whether ``err`` is torch's complaint about a backward pass it cannot differentiate again."""
    text = str(err)
    return isinstance(err, RuntimeError) and any(w in text for w in _NOT_TWICE)


@contextlib.contextmanager
def kept_buffers(model: nn.Module) -> Iterator[None]:
    """Within the block the model may run forward as it likes: every buffer (a BatchNorm's running statistics in
    train mode) is restored afterwards."""
    saved = [(b, b.detach().clone()) for b in model.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for b, v in saved:
                b.copy_(v)


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors hold the same values, NaN equal to NaN (a buffer only read keeps its NaN): False for
    another shape, dtype or device, which ``torch.equal`` would compare by promotion or refuse."""
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    return torch.equal(a, b) or (a.is_floating_point() and bool(((a == b) | (a.isnan() & b.isnan())).all()))


#: each module a victim holds in the client's mode -> the modes it came in before any victim held it (the first
#: victim's record, its modules held weakly so that the entry does not keep the module alive): a module wrapped again
#: before :meth:`Victim.release` is given back in those, not in the client's mode the first victim put it in
_HELD: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def batch_in_shape(shape: tuple) -> bool:
    """Whether an example's ``shape`` looks like one that holds a batch dimension of 1: (1, C, H, W) or (1, n), not
    (1, H, W), which is one grey image."""
    return len(shape) in (2, 4) and shape[0] == 1


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two outputs of the same input agree up to a kernel's round-off (1e-5 of the largest, NaN equal)."""
    if a.shape != b.shape or not a.is_floating_point():
        return same_values(a, b)
    scale = float(torch.nan_to_num(b.abs(), posinf=0.0).max()) if b.numel() else 0.0
    return bool(torch.isclose(a, b, rtol=1e-5, atol=1e-5 * scale, equal_nan=True).all())


def whole(value) -> int | None:
    """``value`` as an int where it is a whole number (Python's, numpy's, a 0-d integer tensor's; not a bool), else
    None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def not_module(model) -> None:
    """Refuse a model that is not an ``nn.Module``, in one sentence."""
    if not isinstance(model, nn.Module):
        raise UserError(f"a victim's model must be a torch.nn.Module, got {type(model).__name__}")
    if "_modules" not in vars(model):  # nn.Module.__init__ never ran: no parameter, buffer or submodule is held
        init = defined_at(type(model).__init__)
        raise UserError(f"model {type(model).__name__} is an nn.Module whose __init__{init} does not call "
                        "super().__init__() first, so it holds no parameters or submodules")


#: precisions whose digits an attack cannot optimise in: float16 (3 significant digits, largest number 65504) and
#: bfloat16 (2 digits); line searches overflow, and steps smaller than the rounding vanish
NARROW = (torch.float16, torch.bfloat16)


def precision_problem(model: nn.Module, name: str, dtype: torch.dtype | None = None) -> str | None:
    """One sentence where ``model``'s trainable weights (or ``dtype``, the one it is to be moved to) are float16 or
    bfloat16, else None: an attack differentiates and optimises in the victim's precision, which holds 2-3
    significant digits there."""
    narrow = dtype if dtype in NARROW else next(
        (p.dtype for p in model.parameters() if p.requires_grad and p.dtype in NARROW), None)
    if narrow is None:
        return None
    kind = str(narrow).removeprefix("torch.")
    digits, overflow = (3, ", and its line searches overflow") if narrow == torch.float16 else (2, "")
    return (f"model '{name}' holds {kind} weights, and an attack optimises the input in the victim's precision, "
            f"where {kind}'s {digits} significant digits drown its steps{overflow}: give the model in float32 or "
            "float64 (model.float()); a half-precision client's gradient is the float32 one rounded")


def tokens_hint(model: nn.Module, err: BaseException) -> str:
    """``; ...`` where ``model`` failed because an ``nn.Embedding`` of it was given real numbers (a text model that
    takes integer token ids), else empty."""
    text = str(err)
    if not (any(isinstance(m, nn.Embedding) for m in model.modules()) and "'indices'" in text
            and "embedding" in text):
        return ""
    return ("; its nn.Embedding takes integer token ids, and an attack rebuilds real-valued inputs by following the "
            "gradient's derivative, which integer tokens do not have: wrap the part of the model after the "
            "embedding, whose input is the embedded tokens (input_shape=(length, embedding dim))")


def head_readable(model: nn.Module, head: nn.Linear) -> str | None:
    """Why the label rules cannot read ``head``'s weight gradient in the message (the rest of a sentence), or None:
    its weight must be one of the model's own trainable parameters.  A frozen head sends no weight gradient; a
    parametrized one (``torch.nn.utils.parametrizations.weight_norm``, ``spectral_norm``, ``orthogonal``, or the
    older ``torch.nn.utils.weight_norm``) computes its weight from parameters of its own, whose gradients are what
    the message holds."""
    if not any(p is head.weight for p in model.parameters()):
        return ("computes its weight from parameters of its own (a parametrization such as weight_norm or "
                "spectral_norm), so the message holds their gradients, not the weight gradient the label rules read")
    if not head.weight.requires_grad:
        return "is frozen, so the message holds no weight gradient of it for the label rules to read"
    return None


def _named_layer(model: nn.Module, path: str, name: str) -> nn.Module:
    """The submodule of ``model`` at ``path`` (``head="fc"``), refused in one sentence naming its nn.Linear layers."""
    try:
        return model.get_submodule(path)
    except AttributeError:
        linear = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
        raise UserError(f"head= of model '{name}' names no submodule '{path}'"
                        + (f"; its nn.Linear layers: {', '.join(linear)}" if linear else "")) from None


def head_problem(model: nn.Module, head, num_classes: int, task: str) -> str | None:
    """What is wrong with ``head`` as the classifier head of ``model`` (the rest of a sentence), or None: it is
    None, or an ``nn.Linear`` among the model's own modules scoring the ``num_classes`` classes of a classifier."""
    if head is None:
        return None
    if not isinstance(head, nn.Linear):
        return f"must be one of the model's nn.Linear layers (or None), got {type(head).__name__} {head!r}"
    if not any(m is head for m in model.modules()):
        return (f"must be one of the model's own modules, and {head!r} is not in it (give the model's layer, "
                "e.g. model.fc, not a new one)")
    if task == "classification" and head.out_features != num_classes:
        return (f"scores the classes, and {head!r} has {head.out_features} outputs for num_classes = "
                f"{num_classes}")
    return None


def _mover(device, dtype):
    """What ``nn.Module.to(device, dtype)`` does to each parameter and buffer, except that a complex tensor takes the
    complex dtype of ``dtype`` (float64: complex128): ``nn.Module.to`` casts it to the real ``dtype`` and drops its
    imaginary part, which would change the user's network."""
    def move(t: torch.Tensor) -> torch.Tensor:
        if dtype is None or not (t.is_floating_point() or t.is_complex()):
            return t.to(device=device)
        return t.to(device=device, dtype=dtype.to_complex() if t.is_complex() else dtype)
    if dtype is not None and not (dtype.is_floating_point or dtype.is_complex):  # as nn.Module.to says it
        raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, but got desired dtype={dtype}")
    return move


@dataclass(eq=False)
class Victim:
    """A model at weights w with its loss F, task, classifier head, input shape and BatchNorm mode."""

    model: nn.Module
    input_shape: tuple
    num_classes: int
    #: F(output, target); a regression's own loss is wrapped in :class:`TargetsShaped`
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = cross_entropy
    task: str = "classification"  #: classification (integer labels) | regression (real targets)
    head: nn.Linear | None = None  #: the layer whose weight gradient carries the label signal (None: no label rule)
    bn_mode: str = "train"  #: BatchNorm statistics of the client's forward pass: batch ("train") or running ("eval")
    name: str = "custom"
    meta: dict = field(default_factory=dict)  #: how the victim was built (recorded in config.json)
    #: each module's ``training`` flag (and a BatchNorm's ``track_running_stats``) as the model came: :meth:`release`
    _given: list = field(default_factory=list, init=False, repr=False)
    #: whether forward passes run in :class:`TwiceDifferentiable` (a unit whose kernel has no second derivative)
    _composite: bool = field(default=False, init=False, repr=False)

    def __post_init__(self):
        not_module(self.model)
        self._composite = needs_composite(self.model)
        held = _HELD.get(self.model)
        self._given = ([(m, training, track) for ref, training, track in held if (m := ref()) is not None] if held
                       else [(m, m.training, getattr(m, "track_running_stats", None)) for m in self.model.modules()])
        if not any(p.requires_grad for p in self.model.parameters()):
            raise UserError(f"model '{self.name}' has no trainable parameters: its clients send no gradient to attack")
        narrow = precision_problem(self.model, self.name)
        if narrow:
            raise UserError(narrow)
        complex_weight = next((n for n, p in self.model.named_parameters() if p.requires_grad and p.is_complex()), None)
        if complex_weight is not None:
            raise UserError(f"model '{self.name}' holds a complex trainable weight ('{complex_weight}'), and the "
                            "message an attack reads is the gradient of real weights: give it as two real "
                            "parameters (its real and imaginary parts), or as a buffer where it is not trained")
        shape = self.input_shape
        if not isinstance(shape, (tuple, list, torch.Size)) or not shape or not all((whole(s) or 0) > 0 for s in shape):
            raise UserError(f"input_shape must be the shape of one example, a tuple of positive integers such as "
                            f"(3, 32, 32), got {shape!r}")
        self.input_shape = tuple(int(s) for s in shape)
        if (whole(self.num_classes) or 0) < 1:
            raise UserError(f"num_classes must be an integer of at least 1, got {self.num_classes!r}")
        self.num_classes = int(self.num_classes)
        if self.task not in TASKS:
            raise UserError(f"unknown task '{self.task}'; choose one of: {', '.join(TASKS)}")
        if self.task == "classification" and self.num_classes == 1 and (
                self.loss is cross_entropy or isinstance(self.loss, nn.CrossEntropyLoss)):
            raise UserError(f"model '{self.name}' is a classifier of num_classes = 1 under cross-entropy, whose loss "
                            "is 0 whatever the weights: its gradient, and every message, is all zeros; give at least "
                            "2 classes (or a loss of one score, such as nn.BCEWithLogitsLoss())")
        if self.bn_mode not in BN_MODES:
            raise UserError(f"unknown BatchNorm mode '{self.bn_mode}'; choose one of: {', '.join(BN_MODES)}")
        if isinstance(self.loss, type):
            raise UserError(f"a victim's loss must be a callable F(output, target), such as nn.CrossEntropyLoss(); "
                            f"got the class {self.loss.__name__} itself: {self.loss.__name__}()")
        if not callable(self.loss):
            raise UserError(f"a victim's loss must be a callable F(output, target), such as nn.MSELoss() or "
                            f"targets.cross_entropy, got {type(self.loss).__name__} {self.loss!r}")
        if self.task == "regression" and self.loss is not squared_error and not isinstance(self.loss, TargetsShaped):
            self.loss = TargetsShaped(self.loss)
        problem = head_problem(self.model, self.head, self.num_classes, self.task)
        if problem:
            raise UserError(f"the classifier head of model '{self.name}' {problem}")
        self.head = self._readable(self.head)
        self.set_mode()
        tracked = [n for n, m in self.model.named_modules()
                   if isinstance(m, nn.modules.instancenorm._InstanceNorm) and m.running_mean is not None]
        if tracked and self.bn_mode == "train":
            warnings.warn(f"model '{self.name}' has an InstanceNorm that tracks running statistics ({tracked[0]}): the "
                          "victim runs it in eval mode, normalising by them, where a training client normalises each "
                          "example by its own (torch updates the running ones in every forward pass in train mode, "
                          "which would make the gradient depend on the passes before it); give it "
                          "track_running_stats=False to attack the client's forward pass", SettingWarning, stacklevel=3)

    @classmethod
    def from_module(cls, model: nn.Module, *, input_shape, num_classes: int, loss=None,
                    task: str = "classification", head: nn.Module | str | None = "auto",
                    bn_mode: str = "train", name: str = "custom") -> "Victim":
        """Wrap any ``nn.Module``: cross-entropy classification with its classifier head found by default.

        ``head="auto"``: for a classifier, the ``nn.Linear`` that computes the module's output, found by one forward
        pass of two zero inputs (:func:`output_linear`: the layer whose output the module returns, or the last one
        whose output it computes its scores from, through a softmax or a scaling); where no ``nn.Linear`` does,
        the last one registered, with a one-line warning.  ``head=`` gives another (the layer, or its name in
        the module, ``"fc"`` or ``"classifier.1"``, as ``leakattack_head`` names it), or None (no label rule).

        ``bn_mode``: ``train`` (the default) normalises by the batch's own statistics, as a training client does;
        ``eval`` by the running ones, which the command line's ``--bn auto`` takes for a single image
        (:func:`resolve_bn_mode` gives that choice for a batch size).

        The victim puts the module in the client's mode, in place: dropout off, and in ``train`` mode its BatchNorm
        layers normalise by the batch without tracking running statistics (no attack step moves them).
        :meth:`release` gives the module back in the modes it came in (``with Victim.from_module(...) as victim:``
        does so at the end of the block), also where it was wrapped again before (a notebook cell run twice): the
        modes it had before the first victim took it.  A module refused here is given back at once.  Observing and
        attacking change no weight or buffer of it."""
        not_module(model)
        unread = [f"{attr} (give {arg})" for attr, arg, read in (
            ("leakattack_loss", "loss=", loss is not None),
            ("leakattack_task", "task=", getattr(model, "leakattack_task", task) == task),
            ("leakattack_head", "head=", not (isinstance(head, str) and head == "auto"))) if hasattr(model, attr)
            and not read]
        if unread:  # the class attributes of a model file, which the command line and get_model read
            warnings.warn(f"model '{name}' defines {', '.join(unread)}, which Victim.from_module does not read: "
                          "targets.get_model('file.py:Class') and the command line read a model file's class "
                          "attributes; from_module takes its arguments", SettingWarning, stacklevel=2)
        if loss is None:
            loss = cross_entropy if task == "classification" else squared_error
        auto = isinstance(head, str) and head == "auto"
        if isinstance(head, str) and not auto:  # a layer's name, as leakattack_head gives it
            head = _named_layer(model, head, name)
        victim = cls(model=model, input_shape=input_shape, num_classes=num_classes, loss=loss, task=task,
                     head=None if auto else cast("nn.Linear | None", head), bn_mode=bn_mode, name=name)
        try:
            if auto and task == "classification":  # found in the client's mode (dropout off), which draws nothing
                victim.head = victim._found_head()
            victim.check_output()
        except BaseException:  # a refused module goes back to the caller in the modes it came in
            victim.release()
            raise
        return victim

    def _found_head(self) -> nn.Linear | None:
        """The classifier head :func:`output_linear` finds (None where it is frozen: no weight gradient for a label
        rule to read); one sentence where the nn.Linear that computes the output has other than ``num_classes``
        outputs; where no ``nn.Linear`` computes it, the last registered one with a warning, or none with a warning
        where that one does not score the classes (a convolutional head behind linear gates)."""
        head, seen = output_linear(self.model, self.input_shape, self.num_classes)
        if head is None:
            if seen is False:
                warnings.warn(f"no nn.Linear of model '{self.name}' runs in its forward pass: it has no classifier "
                              "head for the label rules to read (give --labels given or dlg, or name the layer that "
                              "scores the classes as leakattack_head in a model file, head= from Python)",
                              SettingWarning, stacklevel=4)
            return None
        which = "the nn.Linear that computes the module's output" if seen else "the module's last linear layer"
        where = next((n for n, m in self.model.named_modules() if m is head), "?")
        if head.out_features != self.num_classes and seen is False:
            warnings.warn(f"no nn.Linear of model '{self.name}' computes its output, and the last registered one its "
                          f"forward pass calls, '{where}', has {head.out_features} outputs, not the "
                          f"{self.num_classes} classes: it has no classifier head for the label rules to read (give "
                          "--labels given or dlg, or name the layer that scores the classes as leakattack_head in a "
                          "model file, head= from Python; a layer whose weight the forward pass uses through F.linear "
                          "is not called, and can be named once the forward pass calls it)", SettingWarning,
                          stacklevel=4)
            return None
        if head.out_features != self.num_classes:
            raise UserError(f"{which} has {head.out_features} outputs, and num_classes is {self.num_classes}: give "
                            "it num_classes outputs (a model file's class may take a num_classes argument), or name "
                            "the layer that scores the classes (leakattack_head in a model file, head= from Python)"
                            f"{forward_at(self.model)}")
        if seen is False:
            warnings.warn(f"no nn.Linear of model '{self.name}' computes its output: the last registered nn.Linear its "
                          f"forward pass calls, '{where}', is taken as the classifier head, whose gradient the "
                          "label rules read; give head= (leakattack_head in a model file) to name the layer that "
                          "scores the classes, or None",
                          SettingWarning, stacklevel=4)
        return self._readable(head)

    def _readable(self, head: nn.Linear | None) -> nn.Linear | None:
        """``head``, or None where the label rules cannot read its weight gradient (:func:`head_readable`): silently
        for a frozen head, which sends none, with a one-line warning for a parametrized one."""
        if head is None:
            return None
        unread = head_readable(self.model, head)
        if unread and not any(p is head.weight for p in self.model.parameters()):
            warnings.warn(f"the classifier head of model '{self.name}' {unread}: no label rule reads it",
                          SettingWarning, stacklevel=5)
        return None if unread else head

    def check_output(self) -> None:
        """One forward pass of a batch of 2 zeros (buffers restored): a module that cannot take ``input_shape``, or
        answers with other than (2, num_classes) real scores (one row per example for a regression), is refused in
        one sentence naming the model, here rather than at the first attack."""
        p = next((q for q in self.model.parameters() if q.is_floating_point()), None)  # the input's dtype
        x = torch.zeros(2, *self.input_shape, dtype=p.dtype if p is not None else torch.get_default_dtype(),
                        device=p.device if p is not None else None)
        # input_shape (1, 3, 32, 32) is one example with a batch dimension of its own: say so where the module fails
        batched = (f"; input_shape is one example's shape without the batch dimension: {self.input_shape[1:]}?"
                   if batch_in_shape(self.input_shape) else "")
        try:
            with kept_buffers(self.model), torch.no_grad(), self.running():
                out = self.model(x)
        except Exception as err:  # noqa: BLE001 -- the module's own complaint, in one line
            if allocation_failed(err):  # no fault of the module: the command's out-of-memory sentence says so
                raise
            raise UserError(f"model '{self.name}' fails on a batch of shape {tuple(x.shape)} ({first_line(err)})"
                            f"{raised_at(err, module_files(self.model))}{batched}{tokens_hint(self.model, err)}"
                            ) from None
        problem = output_problem(out, self.task, self.num_classes, 2)
        if problem:
            raise UserError(f"model '{self.name}' {problem}{forward_at(self.model)}{batched}")
        self.check_probe()

    def _backward_made_at(self, probe: torch.Tensor, files: set[str]) -> str:
        """``: the backward of the operation in forward at /abs/net.py:12 fails``: the line of the user's code whose
        operation's backward fails (a tensor it needs was changed in place after it), from the forward traceback
        autograd's anomaly mode records for it; empty where the failure does not recur there or names no line of
        ``files``."""
        with warnings.catch_warnings(record=True) as caught, contextlib.suppress(Exception):
            warnings.simplefilter("always")
            with kept_buffers(self.model), torch.enable_grad(), self.running(), \
                    torch.autograd.detect_anomaly(check_nan=False):
                x = probe.clone().requires_grad_(True)
                out = self.model(x)
                torch.autograd.grad(out.float().sum(), x, allow_unused=True)
        for w in reversed(caught):
            frames = [f for f in FRAME.findall(str(w.message)) if f[0] in files]
            if "Traceback of forward call" in str(w.message) and frames:
                path, line, name = frames[-1]
                return f": the backward of the operation{place_text(name, path, line)} fails"
        return ""

    def check_probe(self) -> None:
        """One forward and backward pass of a seeded random batch of 2 (buffers restored), and the derivative in the
        input of the squared norm of a gradient in the weights, as an attack takes it.  Refused in one sentence:
        a module that changes a buffer in forward (its gradient would depend on the passes before it), an output
        that autograd cannot follow back to the input (an attack differentiates the message in the input) and a
        gradient whose backward pass autograd cannot differentiate again; warned of: a gradient whose derivative in
        the input is exactly zero there (rounding), which no attack can follow, and a second forward pass of the same
        batch that answers otherwise (noise drawn in forward, even in eval mode).  A module that calls
        ``F.hardsigmoid``, whose torch kernel has no second derivative, runs in :class:`TwiceDifferentiable` from
        then on."""
        p = next((q for q in self.model.parameters() if q.is_floating_point()), None)
        dtype, device = (p.dtype, p.device) if p is not None else (torch.get_default_dtype(), None)
        gen = torch.Generator().manual_seed(0)
        probe = torch.rand(2, *self.input_shape, generator=gen, dtype=dtype).to(device).requires_grad_(True)
        second = False  # in the derivative of the weights' gradient
        try:
            with kept_buffers(self.model), torch.enable_grad(), self.running(), sdpa_kernel(SDPBackend.MATH):
                before = {name: b.detach().clone() for name, b in self.model.named_buffers()}
                out = self.model(probe)
                changed = [name for name, b in self.model.named_buffers()
                           if name in before and not same_values(b, before[name])]
                g = gx = None
                if isinstance(out, torch.Tensor) and out.requires_grad:  # a random functional: a plain sum of scores
                    weights = torch.randn(out.shape, generator=gen, dtype=out.dtype).to(out.device)  # can be constant
                    s = (out * weights).sum()
                    g = torch.autograd.grad(s, probe, allow_unused=True, retain_graph=True)[0]
                    if g is not None and out.is_floating_point():
                        second = True  # a functional whose weight gradient moves with the output, as a loss's does
                        wrt = [q for q in self.model.parameters() if q.requires_grad]
                        gw = torch.autograd.grad(s + 0.5 * out.square().sum(), wrt, create_graph=True,
                                                 allow_unused=True)
                        norm = sum(t.square().sum() for t in gw if t is not None and t.requires_grad)
                        if isinstance(norm, torch.Tensor):
                            gx = torch.autograd.grad(norm, probe, allow_unused=True)[0]
                        second = False
                again = self.model(probe.detach()) if not changed and isinstance(out, torch.Tensor) else None
        except UserError:
            raise
        except Exception as err:  # noqa: BLE001 -- the module's own complaint, in one line
            if allocation_failed(err):
                raise
            if second and not_twice(err):
                if "hardsigmoid" in str(err) and not self._composite:  # F.hardsigmoid in the module's own forward
                    self._composite = True
                    return self.check_probe()
                raise UserError(f"the gradient of model '{self.name}' cannot be differentiated in its input "
                                f"({first_line(err)}), and attacks that match gradients follow that derivative: "
                                "build the model from operations autograd differentiates twice (a custom "
                                "autograd.Function without @once_differentiable, no reentrant checkpointing, "
                                "no torch.compile)") from None
            files = module_files(self.model)
            where = raised_at(err, files) or self._backward_made_at(probe.detach(), files)
            raise UserError(f"model '{self.name}' fails on a random batch of shape {tuple(probe.shape)}, forward "
                            f"and backward ({ANOMALY_HINT.sub('', first_line(err))}){where}") from None
        if changed:
            one = len(changed) == 1
            names = ", ".join(repr(n) for n in changed[:3]) + (" ..." if len(changed) > 3 else "")
            raise UserError(f"model '{self.name}' changes its buffer{'' if one else 's'} {names} in a forward "
                            "pass, so where the forward pass reads it its gradient depends on how many passes ran "
                            "before (the client's one and the attack's thousands); update "
                            f"{'it' if one else 'them'} only while self.training is true (a victim runs in eval mode, "
                            "BatchNorm's batch statistics aside), or keep a counter the forward pass never reads as a "
                            "plain attribute")
        if g is None:
            raise UserError(f"the output of model '{self.name}' does not depend on its input through operations "
                            "autograd differentiates (.detach(), torch.no_grad(), an integer cast, argmax or "
                            "indexing by the input?), and an "
                            "attack on its gradient needs the gradient's derivative in the input: freeze a "
                            "backbone with requires_grad_(False), not torch.no_grad() or .detach(), and give the "
                            "model real-valued input")
        if gx is None or not bool(gx.any()):  # a zero-initialised head's output is constant, and its gradient is not
            warnings.warn(f"the gradient of model '{self.name}' has a derivative of zero in its input at a random "
                          "input (rounding or quantising it?): no attack can follow the message back to the input",
                          SettingWarning, stacklevel=4)
        if isinstance(out, torch.Tensor):  # a loss that cannot score two examples fails here, not inside torch
            self._check_loss(out.detach(), gen)
        if isinstance(again, torch.Tensor) and not _close(again.detach(), out.detach()):
            warnings.warn(f"model '{self.name}' gives two different outputs for the same input in eval mode (random "
                          "noise or sampling in forward?): no attacker's copy of it can reproduce the client's "
                          "message exactly, and a run measures that noise along with what leaks", SettingWarning,
                          stacklevel=4)

    def _check_loss(self, out: torch.Tensor, gen: torch.Generator) -> None:
        """Refuse in one sentence a loss that fails on the output of two examples and their labels (integer classes,
        or real targets of the output's shape for a regression), or that does not return one real number."""
        if self.task == "classification":
            labels = torch.randint(0, self.num_classes, (2,), generator=gen).to(out.device)
            given, example = "its scores and integer class labels", "F(output, labels) returning one number, such as " \
                "nn.CrossEntropyLoss()"
        else:
            labels = torch.randn(out.shape, generator=gen, dtype=out.dtype).to(out.device)
            given, example = "its outputs and real targets of their shape", "F(output, target) returning one " \
                "number, such as nn.MSELoss()"
        try:
            with warnings.catch_warnings():  # torch's own broadcasting warnings: the sentence below says it
                warnings.simplefilter("ignore")
                value = self.loss(out, self.target(labels))
        except Exception as err:  # noqa: BLE001 -- the loss's own complaint, in one line
            raise UserError(f"the loss of model '{self.name}' fails on {given} ({first_line(err)}): give "
                            f"{example}") from None
        if not (isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_floating_point()):
            got = (f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor)
                   else type(value).__name__)
            raise UserError(f"the loss of model '{self.name}' returns {got} for a batch of 2, not one real "
                            "number: reduce it over the batch (reduction='mean' or 'sum')")

    # -- capabilities --------------------------------------------------------
    @property
    def has_batchnorm(self) -> bool:
        return has_batchnorm(self.model)

    @property
    def batch_statistics(self) -> bool:
        """Whether one example's output depends on the rest of its batch (BatchNorm on batch statistics)."""
        return uses_batch_statistics(self.model)

    @property
    def d(self) -> int:
        """d, the number of trainable parameters (the length of the flat gradient)."""
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    @property
    def deep(self) -> bool:
        """Whether it has at least :data:`DEEP_WEIGHTS` weights: large tensor operations, which every core and
        oneDNN's kernels pay off for."""
        return self.d >= DEEP_WEIGHTS

    @property
    def threads(self) -> int:
        """The torch threads an attack on this victim runs on unless told otherwise: every core for a deep one,
        one thread below."""
        return self.threads_for(1)

    def threads_for(self, examples: int) -> int:
        """The torch threads for an attack that puts ``examples`` images through this victim at each evaluation
        (its starts times the batch): every core for a deep victim or from :data:`PARALLEL_EXAMPLES` images on,
        one thread below."""
        return cpu_cores() if self.deep or examples >= PARALLEL_EXAMPLES else 1

    @property
    def loss_reduction(self) -> str:
        """How the loss reduces over the batch: ``"sum"`` where two copies of one example's scores and class score
        twice what the example alone does (``nn.CrossEntropyLoss(reduction="sum")``), else ``"mean"``.  The head's
        gradient of a summed loss is B times that of the mean, which the label rules read; a regression's is
        ``"mean"``."""
        if self.task != "classification":
            return "mean"
        dtype = torch.promote_types(self.dtype, torch.float32)
        out = torch.randn(1, self.num_classes, generator=torch.Generator().manual_seed(0), dtype=dtype).to(self.device)
        label = torch.zeros(1, dtype=torch.long, device=self.device)
        try:
            with torch.no_grad():
                one = float(self.loss(out, self.target(label)))
                two = float(self.loss(out.repeat(2, 1), self.target(label.repeat(2))))
        except Exception:  # noqa: BLE001 -- a loss that cannot score one example is no summed one
            return "mean"
        return "sum" if one and math.isfinite(one) and abs(two - 2 * one) <= 1e-4 * abs(one) else "mean"

    @property
    def unknowns_per_example(self) -> int:
        """m, the number of input values of one example (C*H*W)."""
        return math.prod(self.input_shape)

    def reference_parameter(self) -> torch.Tensor:
        """The parameter whose dtype and device the victim's inputs take: the first trainable floating-point one (a
        frozen integer parameter registered first says nothing of them), else the first."""
        params = list(self.model.parameters())
        return next((p for p in params if p.requires_grad and p.is_floating_point()), params[0])

    @property
    def dtype(self) -> torch.dtype:
        return self.reference_parameter().dtype

    @property
    def device(self) -> torch.device:
        return self.reference_parameter().device

    def set_mode(self, bn_mode: str | None = None) -> None:
        """Put the module in the client's mode (or switch to ``bn_mode``): BatchNorm statistics as asked; no dropout.

        In train mode BatchNorm layers stop tracking running statistics, so no forward pass changes them.
        """
        if bn_mode is not None:
            if bn_mode not in BN_MODES:
                raise ValueError(f"unknown BatchNorm mode '{bn_mode}'; choose one of: {', '.join(BN_MODES)}")
            self.bn_mode = bn_mode
        _HELD.setdefault(self.model, [(weakref.ref(m), training, track) for m, training, track in self._given])
        self.model.eval()
        for m in batchnorm_layers(self.model):
            if self.bn_mode == "train":
                m.train()
                m.track_running_stats = False
            else:
                m.track_running_stats = m.running_mean is not None

    def release(self) -> nn.Module:
        """Give the module back in the modes it came in and return it: each module's ``training`` flag, and each
        BatchNorm's ``track_running_stats`` (which train mode turns off, so that no forward pass moves the running
        statistics).  Weights, buffers and dtype stay as they are.  ``with Victim.from_module(...) as victim:`` calls
        it at the end of the block.  A module wrapped by several victims goes back to the modes it had before the
        first took it, whichever releases it."""
        for m, training, track in self._given:
            m.training = training
            if track is not None:
                m.track_running_stats = track
        _HELD.pop(self.model, None)
        return self.model

    def __enter__(self) -> "Victim":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def to(self, device=None, dtype=None) -> "Victim":
        """Move the model (in place) and return self: ``to(device)``, ``to(dtype)`` (as ``nn.Module.to`` takes a
        dtype in the first place), ``to(device, dtype)`` or the keywords."""
        if isinstance(device, torch.dtype):
            if dtype is not None:
                raise TypeError(f"Victim.to takes a device and a dtype, got two dtypes: {device} and {dtype}")
            device, dtype = None, device
        narrow = precision_problem(self.model, self.name, dtype)
        if narrow:
            raise UserError(narrow)
        before = (self.dtype, self.device)
        # each parameter's and buffer's tensor as it was, to give the model back where a move fails
        kept = [(m, name, t.data if isinstance(t, nn.Parameter) else t) for m in self.model.modules()
                for name, t in [*m._parameters.items(), *m._buffers.items()] if t is not None]
        self.model._apply(_mover(device, dtype))
        if (self.dtype, self.device) != before:
            try:
                self._check_moved(*before)
            except UserError:
                for m, name, t in kept:
                    if name in m._parameters:
                        m._parameters[name].data = t  # type: ignore[union-attr]
                    else:
                        m._buffers[name] = t
                raise
        return self

    def _check_moved(self, dtype: torch.dtype, device: torch.device) -> None:
        """One forward pass of 2 zeros after a move from ``dtype`` on ``device`` (buffers restored): a model that
        fails there holds a tensor outside its parameters and buffers (which ``nn.Module.to`` leaves where it was) or
        sets a dtype or device in its forward; refused in one sentence (:meth:`to` gives the model back as it
        was)."""
        x = torch.zeros(2, *self.input_shape, dtype=self.dtype, device=self.device)
        try:
            with kept_buffers(self.model), torch.no_grad(), self.running():
                self.model(x)
        except Exception as err:  # noqa: BLE001 -- the module's own complaint, in one line
            if allocation_failed(err):
                raise
            now = f"{str(self.dtype).removeprefix('torch.')} on {self.device}"
            raise UserError(f"model '{self.name}' fails once moved to {now} ({first_line(err)})"
                            f"{raised_at(err, module_files(self.model))}: a tensor it holds outside its parameters "
                            "and buffers stays where it was (register it with register_buffer), or its forward sets "
                            "a dtype or device of its own; keep it where it was (--dtype "
                            f"{str(dtype).removeprefix('torch.')}, --device {device.type})") from None

    def target(self, labels: torch.Tensor) -> torch.Tensor:
        """What the loss compares the output with: class indices (any integer dtype becomes torch.long; class
        probabilities stay as they are), or real numbers for regression."""
        if self.task == "regression":
            return labels.to(self.dtype)
        return labels if labels.is_floating_point() else labels.long()

    def running(self) -> contextlib.AbstractContextManager:
        """The context of a forward pass whose gradient an attack differentiates: :class:`TwiceDifferentiable` where
        the model holds a unit whose torch kernel has no second derivative (``nn.Hardsigmoid``), else none."""
        return TwiceDifferentiable() if self._composite else contextlib.nullcontext()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with self.running():
            return self.model(x)

    __call__ = forward

    def head_inputs(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the model's output on ``x``, the inputs of its head, one row per example) from one forward pass in the
        model's current mode and grad mode; the head must exist (``self.head`` is not None)."""
        assert self.head is not None, "head_inputs needs a victim with a linear head"
        seen: list[torch.Tensor] = []
        handle = self.head.register_forward_hook(lambda module, args, output: seen.append(args[0].detach()))
        try:
            with self.running():
                out = self.model(x)
        finally:
            handle.remove()
        if not seen:  # named as the head (head=, leakattack_head) while its weight is used without calling it
            where = next((n for n, m in self.model.named_modules() if m is self.head), repr(self.head))
            raise UserError(f"the classifier head '{where}' of model '{self.name}' does not run in its forward pass "
                            "(its weight used through F.linear, or the layer never called), and the label rules read "
                            "the inputs it is called on: name a layer the forward pass calls, or give --labels given")
        return out, seen[0].reshape(x.shape[0], -1)


__all__ = ["Victim", "TASKS", "BN_MODES", "DEEP_WEIGHTS", "PARALLEL_EXAMPLES", "cpu_cores", "share_cores",
           "cross_entropy", "squared_error", "shaped_like", "TargetsShaped", "not_module", "head_problem",
           "has_batchnorm", "batchnorm_layers", "batchnorm_input_moments",
           "batch_moments", "uses_batch_statistics", "batchnorm_without_running_statistics",
           "running_statistics_layers", "statistics_tracked",
           "last_linear", "output_linear", "first_line", "output_problem",
           "code_files", "module_files", "defined_at", "forward_at",
           "kept_buffers", "NARROW", "precision_problem", "TwiceDifferentiable", "needs_composite", "not_twice",
           "same_values"]
