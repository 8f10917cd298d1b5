"""The attack contract: ``Attack.reconstruct(obs) -> AttackResult``.

An attack sees only an :class:`~leakattack.observation.Observation` (the message
and what the threat model grants) and returns its best reconstruction.  The
truth never reaches it; a ``monitor`` callback (step, x) -> dict lets the caller
record evaluation numbers (PSNR) along the way without the attack seeing them.
"""

from __future__ import annotations

import contextlib
import functools
import math
import numbers
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

import defenses
import targets
from targets.victim import code_files, first_line

from ..constraints import Param
from ..errors import UserError, a_type, allocation_failed, listed
from ..observation import Observation
from ..plugins import raised_at
from ..seeds import torch_defaults

Monitor = Callable[[int, torch.Tensor], dict]


class AttackError(UserError):
    """The attack cannot run on this observation (one sentence saying why)."""


@dataclass
class AttackResult:
    """What one attack produced."""

    x: torch.Tensor  #: best iterate (lowest matching loss), detached, unclamped
    labels: torch.Tensor | None  #: the labels the attack used or found
    x0: torch.Tensor  #: the dummy data it started from
    losses: list[float]  #: the matching loss L_R(x_t) at every step t = 0..T (without priors)
    extra: list[dict] = field(default_factory=list)  #: monitor outputs with their step
    #: the steps taken; left out (-1), one per loss after the start: len(losses) - 1
    iterations: int = -1
    #: the step whose iterate x is; left out (-1), that of the lowest loss (the first of equals; 0 where none is finite)
    best_step: int = -1
    #: iterations | tolerance | stalled | diverged | time-limit | pruned | interrupted
    stop_reason: str = "iterations"
    message: str = ""
    wall_s: float = 0.0
    restart_losses: list[float] = field(default_factory=list)  #: final loss of each restart (the lowest is kept)
    restart_stops: list[str] = field(default_factory=list)  #: why each restart stopped (``pruned``: by halving)
    #: how several starts were evaluated: ``batched`` (one pass for all) or ``one by one`` and why; None for one start
    restart_path: str | None = None
    #: how the labels were chosen when the label rules read different ones (GradientMatching.choose_labels)
    label_choice: dict | None = None
    #: what the Gauss-Newton steps after the first-order phase did (GradientMatching.refine), None if none ran
    gauss_newton: dict | None = None
    #: the analytic attack's solve of a batch in its first block's row space (Analytic._solve_batch), None if none ran
    row_space_solve: dict | None = None
    #: the rank of the equations a closed form solved the input from (R-GAP's input layer), None where none was formed
    input_rank: int | None = None
    #: made by a closed-form attack (``Attack.closed_form``): it solved for x and has no start to score as a baseline
    closed_form: bool = False
    #: the prior whose value was NaN or infinite where the search stopped (diverged or stalled there), else None
    prior_not_finite: str | None = None

    def __post_init__(self) -> None:
        # an attack of one's own that leaves these out is read from its losses, not as 0 steps (which a run reported
        # as "nothing was attacked: the objective never went below its start value")
        losses = list(self.losses) if isinstance(self.losses, (list, tuple)) else []
        if self.iterations == -1:
            self.iterations = max(len(losses) - 1, 0)
        if self.best_step == -1:
            finite = []
            for t, v in enumerate(losses):
                try:
                    f = float(v)
                except (TypeError, ValueError):  # a loss that is not a number is no step's to keep
                    continue
                if math.isfinite(f):
                    finite.append((f, t))
            self.best_step = min(finite)[1] if finite else 0

    @property
    def final_loss(self) -> float:
        return self.losses[self.best_step]


class Attack:
    """Base class: subclasses set ``name`` and implement :meth:`reconstruct`.

    Class attributes state what an attack can do, so that callers ask them instead of testing names:
    ``closed_form`` (it solves for x directly: no optimiser, no data-free start to score as a baseline, and its
    labels are recovered from the message or granted, never optimised), ``reads_labels`` (it takes a ``labels``
    option: ``"given"`` uses the granted labels) and ``settings`` (the run settings it reads that not every attack
    reads, which ``leakattack run`` reports as unused under another attack).

    ``uses_labels`` (True unless set otherwise) says that its reconstruction depends on the labels it reads or is
    granted: labels read wrong can then explain a failed run (:func:`leakattack.rebuilt.failed_part`); imprint reads
    its images from its block whatever the labels, and sets it False.

    ``modifies_model`` marks a malicious server's attack: it changes the model the server sends before the client
    computes its gradient (:meth:`modify`, given the victim and the server's own images).

    ``options`` declares the attack's own parameters (:class:`~leakattack.constraints.Param`: name, default,
    constraint, label, help): each is a keyword argument of the class, and ``leakattack run`` gives it a flag
    (``--name-with-dashes``), validates it, records it in ``attack_params`` and lets sweeps grid over it.
    """

    name = "base"
    closed_form: bool = False
    #: what a closed form's final loss is, as the summary line names it
    residual_name: str = "residual"
    reads_labels: bool = False
    uses_labels: bool = True
    modifies_model: bool = False
    #: whether a message holding NaN or infinite values is refused before the attack runs (a closed form whose
    #: factorisation fails on them); else the attack runs and the run records what such a message gives
    refuses_nonfinite: bool = False
    settings: tuple[str, ...] = ()
    options: tuple[Param, ...] = ()

    def __init_subclass__(cls, **kwargs):
        """Every ``reconstruct`` a subclass defines first refuses, in one sentence, anything but an Observation."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("reconstruct")
        if callable(own) and not getattr(own, "checks_observation", False):
            cls.reconstruct = _checking_observation(own)

    def modify(self, victim, public) -> None:  # pragma: no cover
        """Change ``victim`` in place into the model the server sends (``modifies_model`` attacks only);
        ``public``: images the server holds (an image set or a tensor)."""
        raise NotImplementedError

    def supports(self, obs: Observation) -> str | None:
        """None when the attack can run on ``obs``, else one sentence saying why not."""
        return None

    def refusal(self, obs: Observation) -> str | None:
        """Why the attack cannot run on ``obs`` (one sentence), or None: where it :attr:`refuses_nonfinite`, a
        message that holds NaN or infinite values (a defense's noise beyond the dtype's range), through which it
        solves no system, or one whose squared norm overflows float64 (the closed forms read the message in float64
        and their solves square it), else what :meth:`supports` says."""
        if self.refuses_nonfinite and isinstance(obs.y, torch.Tensor):
            bad = int((~torch.isfinite(obs.y)).sum())
            if bad:
                return (f"{bad} of the message's {obs.y.numel()} values are NaN or infinite, and this closed form "
                        "solves nothing through them; gradient-matching runs and records what such a message gives")
            if not bool(torch.isfinite(obs.y.detach().to(torch.float64).pow(2).sum())):  # noise near float64's range
                return (f"the message's values reach {float(obs.y.detach().abs().max()):.3g}, whose squares overflow "
                        "float64, in which the closed forms solve; gradient-matching runs and records what such a "
                        "message gives")
        return self.supports(obs)

    def check(self, obs: Observation) -> None:
        """Raise AttackError when the attack cannot run on ``obs``."""
        reason = self.refusal(obs)
        if reason:
            raise AttackError(f"attack '{self.name}' cannot run here: {reason}")

    def reconstruct(self, obs: Observation, *, monitor: Monitor | None = None, monitor_every: int = 10,
                    progress: bool = False) -> AttackResult:  # pragma: no cover
        raise NotImplementedError


def check_result(name: str, result, shape: tuple, num_classes: int | None = None) -> None:
    """Refuse, in one sentence naming attack ``name``, what its ``reconstruct`` returned when that is not an
    AttackResult holding a floating-point batch of ``shape``, at least the loss at its start and (a classifier's,
    ``num_classes`` given) labels that are one class index per image, or none."""
    if not isinstance(result, AttackResult):
        got = "None" if result is None else a_type(result)
        raise UserError(f"attack '{name}' returned {got} from reconstruct, not the leakattack.attacks.AttackResult "
                        "every attack returns")
    if not isinstance(result.x, torch.Tensor) or tuple(result.x.shape) != tuple(shape):
        got = f"shape {tuple(result.x.shape)}" if isinstance(result.x, torch.Tensor) else type(result.x).__name__
        raise UserError(f"attack '{name}' returned a reconstruction x of {got}, not the batch of shape "
                        f"{tuple(shape)} it attacks")
    if not result.x.is_floating_point():  # an integer x scores 0.6 as 0; a bool one is no image at all
        raise UserError(f"attack '{name}' returned a reconstruction x of {str(result.x.dtype)[6:]} values, not "
                        "floating-point images like the batch it attacks")
    if not isinstance(result.losses, (list, tuple)):  # a tensor's truth value is ambiguous; its steps unread
        raise UserError(f"attack '{name}' returned losses as {a_type(result.losses)}, not the list of "
                        "floats AttackResult.losses holds (the matching loss at each step, at least at its start)")
    if not result.losses:
        raise UserError(f"attack '{name}' returned no losses (AttackResult.losses holds the matching loss at each "
                        "step, at least at its start)")
    for t, v in enumerate(result.losses):
        try:
            float(v)
        except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of several values
            raise UserError(f"attack '{name}' returned a loss at step {t} that is not a number ({v!r:.40}): "
                            "AttackResult.losses holds one float per step") from None
    for key in ("iterations", "best_step"):  # a run writes them: a null step count is no run's
        v = getattr(result, key)
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
            raise UserError(f"attack '{name}' returned {key} = {v!r:.40}, not a whole number of at least 0 "
                            f"(AttackResult.{key}; leave it out to have it read from the losses)")
        setattr(result, key, int(v))
    if result.best_step >= len(result.losses):
        raise UserError(f"attack '{name}' returned best_step = {result.best_step}, past its {len(result.losses)} "
                        "losses (AttackResult.best_step is the step of the iterate x returned)")
    if not isinstance(result.stop_reason, str) or not result.stop_reason:
        raise UserError(f"attack '{name}' returned stop_reason = {result.stop_reason!r:.40}, not a text naming why "
                        "it stopped (AttackResult.stop_reason: iterations, tolerance, stalled, ...)")
    labels = result.labels
    if num_classes is not None and labels is not None:
        if not isinstance(labels, torch.Tensor) or labels.is_floating_point() or labels.is_complex() \
                or labels.dtype == torch.bool or tuple(labels.shape) != (shape[0],):
            got = f"{tuple(labels.shape)} {labels.dtype}" if isinstance(labels, torch.Tensor) else type(labels).__name__
            raise UserError(f"attack '{name}' returned labels of {got}, not one integer class index per image "
                            f"({shape[0]},) (or None)")
        low, high = (int(labels.min()), int(labels.max())) if labels.numel() else (0, 0)
        if not 0 <= low <= high < num_classes:
            raise UserError(f"attack '{name}' returned label {high if high >= num_classes else low}, outside the "
                            f"classes 0..{num_classes - 1}")


#: the folders of leakattack's own packages: an error raised in them is not an attack of one's own failing
_OUR_FOLDERS = tuple(os.path.dirname(os.path.abspath(str(m.__file__))) + os.sep
                     for m in (defenses, targets, sys.modules[__name__.split(".")[0]]) if getattr(m, "__file__", None))


def _raised_in(err: BaseException, files) -> bool:
    """Whether ``err`` arose in the user's code (``files``): its last traceback frame that is the user's or
    leakattack's is the user's (torch or Python below it, called by that code, is the user's call); an error
    raised inside leakattack's own code (a built-in attack's steps a subclass runs) is not."""
    last = None
    tb = err.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name in files:
            last = "user"
        elif os.path.abspath(name).startswith(_OUR_FOLDERS):
            last = "ours"
        tb = tb.tb_next
    return last == "user"


def own_reconstruct(attack) -> bool:
    """Whether the ``reconstruct`` an attack (or attack class) runs is the user's code, not a built-in attack's it
    inherits: what a run says of its result (steps past its budget, pixels outside [0, 1]) is said of that code."""
    cls = attack if isinstance(attack, type) else type(attack)
    owner = next((k for k in cls.__mro__ if "reconstruct" in vars(k)), None)
    return owner is not None and bool(code_files([owner]))


def _checking_observation(reconstruct):
    """``reconstruct`` preceded by the check that its ``obs`` is an :class:`Observation` and followed by the check of
    what it returned (:func:`check_result`), each one UserError sentence."""

    @functools.wraps(reconstruct)
    def checked(self, obs, *args, **kwargs):
        if not isinstance(obs, Observation):
            raise UserError(f"attack '{self.name}' reconstructs from an Observation (leakattack.observe(victim, x, "
                            f"labels, channel)), got {type(obs).__name__} {obs!r:.60}")
        changed = obs.weights_changed()
        if changed:
            raise UserError(f"the victim's weights are not those this observation's message was made at ({changed} "
                            "since observe): observe the client again at the weights to attack")
        obs.victim.set_mode()  # the client's mode, whatever the module was switched to since (dropout off)
        try:
            with torch_defaults():  # gradients on and float32 starts, whatever the caller's notebook set
                result = reconstruct(self, obs, *args, **kwargs)
        except Exception as err:
            files = code_files([type(self)])  # an attack of one's own: its failure in one sentence, at its line
            if isinstance(err, (UserError, OSError)) or allocation_failed(err) or not _raised_in(err, files):
                raise  # ours to say (a refusal, a full disk, a closed pipe, memory), or raised inside leakattack
            raise UserError(f"attack '{self.name}' failed ({first_line(err)}){raised_at(err, files)}") from err
        victim = obs.victim  # what it returned, refused as leakattack run refuses it, from Python too
        check_result(self.name, result, obs.input_shape,
                     victim.num_classes if victim.task == "classification" else None)
        if isinstance(result, AttackResult):
            result.closed_form = bool(self.closed_form)
            result.message = not_unique_message(result, obs)
        return result

    checked.checks_observation = True
    return checked


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch on ``n`` threads inside the block; its own count is given back afterwards (:func:`threads_seen`
    remembers the most set)."""
    global _most_threads
    own = torch.get_num_threads()
    torch.set_num_threads(n)
    _most_threads = max(_most_threads, int(n))
    try:
        yield
    finally:
        torch.set_num_threads(own)


#: the most threads :func:`torch_threads` set since :func:`threads_seen` last reset it (0: none)
_most_threads = 0


def threads_seen(reset: bool = False) -> int | None:
    """The most threads an attack's blocks ran torch on since the last reset (None: none set one), which a run
    records as its thread count (the count changes a CPU run's last bits); ``reset`` starts a new count."""
    global _most_threads
    most = _most_threads or None
    if reset:
        _most_threads = 0
    return most


_STOP = threading.Event()


def stop_requested() -> bool:
    """Whether Ctrl-C asked the running attack to stop at its best iterate (inside :func:`stop_on_interrupt`)."""
    return _STOP.is_set()


def halt_reason(deadline: float) -> str | None:
    """Why a running attack stops now: ``interrupted`` once Ctrl-C asked it to (:func:`stop_requested`), ``time-limit``
    once ``deadline`` (``time.perf_counter()`` seconds) has passed, else None."""
    return "interrupted" if stop_requested() else "time-limit" if time.perf_counter() >= deadline else None


@contextlib.contextmanager
def stop_on_interrupt() -> Iterator[None]:
    """Inside the block the first Ctrl-C (SIGINT) asks the running attack to stop at its best iterate, with stop
    reason ``interrupted``, so that what it found is still scored and written; the second interrupts at once
    (KeyboardInterrupt).  Off the main thread, where no handler can be set, and where SIGINT is ignored (``nohup``,
    a background job), the block changes nothing."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield
        return

    def ask(signum, frame):
        if _STOP.is_set():
            raise KeyboardInterrupt
        _STOP.set()
        print("\nleakattack: stopping at the best iterate so far (Ctrl-C again to abort)", file=sys.stderr, flush=True)

    previous = signal.signal(signal.SIGINT, ask)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _STOP.clear()


def add_note(message: str, note: str, link: str = "") -> str:
    """``message; <link> note``, or ``note`` as it is when there is no message yet (an attack's message starts in
    lower case: it is printed after ``note:`` and after a run's stop reason)."""
    return f"{message}; {link}{note}" if message else note


def not_unique_message(result: AttackResult, obs: Observation) -> str:
    """The result's message, which a run that met its tolerance with fewer numbers in the message than unknowns
    (b < m*B, or fewer independent ones: ``Observation.rank_bound``) ends with the sentence that the match is not
    unique: another input matches as well."""
    unknowns = obs.unknowns
    if result.stop_reason != "tolerance" or obs.rank_bound >= unknowns or "not unique" in result.message:
        return result.message  # a message that says it already (the analytic fit's count of its unknowns) stays
    said = f"{result.message}, " if result.message else "the attack met its tolerance, "  # an attack may say nothing
    return (f"{said}but with {obs.numbers_said()} for m*B = {unknowns} unknowns another input matches as well: the "
            "match is not unique")


#: a closed form's words where :func:`inexact_causes` finds nothing in the channel that changes the gradient
NO_CAUSE = ("the arithmetic's round-off, or a model beyond the attack's assumptions: nothing in this channel changes "
            "the gradient by more than a factor (no noise, pruning or rounding, no sketch, one local step)")


def channel_words(spec: str, sigma, local_steps, protocol: str | None = None) -> list[str]:
    """The words, those present, for what a closed form's message holds besides one step's gradient up to a factor:
    the defense steps of ``spec`` that change it by more (:meth:`defenses.Pipeline.changing`; "" for none), a DP
    protocol's own noise of ``sigma`` (named for ``protocol`` where given) and ``local_steps`` above one; values that
    are not such numbers (a config.json written by hand) say nothing."""
    words = [f"the defense {spec}"] if spec else []
    if isinstance(sigma, (int, float)) and sigma > 0:
        words.append(f"the {protocol + ' ' if protocol else ''}protocol's own noise, σ {sigma:.3g}")
    if isinstance(local_steps, int) and local_steps > 1:
        words.append(f"{local_steps} local steps")
    return words


def inexact_causes(obs: Observation, sketch: bool = True) -> str | None:
    """What in the channel of ``obs`` keeps the g a closed form reads from its message from being the exact gradient
    of the batch at these weights, up to a positive factor, in words for its note, those present: the client's
    defense steps that change the message by more than a factor (by their spec; a clip of the whole update only
    rescales it, :meth:`defenses.base.Transform.only_rescales`), a protocol's own noise, several local steps (of a
    protocol or an update message file, as its map records them) and a sketch or protocol map with a null space
    (b < d, or not ruled out at b >= d; not with ``sketch`` false, for an attack that models the map's null space
    itself); None where none is (what is left is the arithmetic's round-off or the attack's own assumptions,
    :data:`NO_CAUSE`)."""
    spec = ""
    if obs.defense:
        try:
            spec = ",".join(t.spec() for t in defenses.build(obs.defense).changing(obs.d, obs.b, obs.batch_size))
        except (UserError, TypeError, ValueError):  # a spec this version cannot read: named as it is
            spec = obs.defense
    M = obs.linear_map
    info = getattr(M, "info", None) or {}  # a protocol's or an update message file's map (MessageMap)
    kind = str(info.get("kind", ""))
    protocol = kind.split(":", 1)[1] if kind.startswith("protocol:") else None
    causes = channel_words(spec, (obs.extra.get("privacy") or {}).get("sigma"),
                           info.get("local_steps", obs.extra.get("local_steps")), protocol)
    inner = getattr(M, "inner", None)  # a protocol's map scales its encoder's: the encoder says what is sketched
    if sketch and not (getattr(M, "identity", False) or getattr(inner, "identity", False)):
        # b >= d does not rule a null space out (a countsketch's empty buckets, an SRHT's padding)
        which = f"the {protocol} protocol's map" if protocol else "a sketch"
        causes.append(f"{which} with a null space (b = {obs.b} < d = {obs.d})" if obs.b < obs.d else
                      f"{which} with a null space, if this {obs.b} x {obs.d} one has one")
    return listed(causes) if causes else None


def closed_form_result(x: torch.Tensor, labels: torch.Tensor | None, losses: list[float], notes: list[str], *,
                       solved: str, non_finite: str, step: int, monitor: Monitor | None, wall_s: float
                       ) -> AttackResult:
    """A closed-form attack's result: stop reason ``diverged`` (message ``non_finite``) where a loss or x is not
    finite, ``stalled`` where ``notes`` say what went wrong (joined into the message), else ``tolerance`` with the
    message ``solved``; ``step`` is the last of its steps (its layers), ``x0`` zeros (it has no start)."""
    if not all(math.isfinite(v) for v in losses) or not bool(torch.isfinite(x).all()):
        stop, message = "diverged", non_finite
    elif notes:
        stop, message = "stalled", "; ".join(notes)
    else:
        stop, message = "tolerance", solved
    extra = [{"step": step, **monitor(step, x)}] if monitor is not None else []
    return AttackResult(x=x.detach(), labels=labels, x0=torch.zeros_like(x), losses=losses, extra=extra,
                        iterations=step, best_step=step, stop_reason=stop, message=message, wall_s=wall_s)


__all__ = ["Attack", "AttackError", "AttackResult", "Monitor", "closed_form_result", "inexact_causes",
           "channel_words", "NO_CAUSE", "torch_threads", "add_note",
           "stop_requested", "stop_on_interrupt", "halt_reason", "check_result"]
