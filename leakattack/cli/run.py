"""``leakattack run``: attack one (sketched) gradient or protocol message and write a run folder."""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable, Iterator

from defenses import build as build_defense
from targets.protocols import privacy_caveats

from ..attacks.gauss_newton import steps_note
from ..attacks.recipes import inexact_words, next_settings
from ..attacks.seed_search import found_text, sketch_not_held
from ..config.arguments import config_from_args
from ..errors import SlowWarning
from ..experiment import loose_tolerance, run_attack
from ..metrics import RunMetrics, closed_forms_line, failed_kind, failed_part, identified_line
from ..rebuilt import (
    HALTED,
    REBUILT,
    ZERO_NOTE,
    faint_words,
    image_verdicts,
    images_note,
    images_words,
    label_choice_line,
    matched_not_unique,
    message_unreadable,
    not_the_budget,
    rebuilt_images,
    truth_not_sent,
    why_not_rebuilt,
)


def summary_line(m: RunMetrics, folder, objective: str = "l2", num_classes: int | None = None,
                 protocol_noise: dict | None = None, protocol_round: int | None = None,
                 residual_name: str = "residual") -> str:
    """The one line a run ends with: what the attack rebuilt, beside its baselines, or that it attacked nothing.

    A run that attacked nothing (its objective was not finite at the start, or
    never went below it) says so instead of its image scores; otherwise the
    line starts with the verdict (:func:`leakattack.metrics.verdict`) and puts
    PSNR and SSIM beside the better baselines', a reconstruction that is not
    rebuilt naming the metric that kept it from rebuilt
    (:func:`leakattack.rebuilt.why_not_rebuilt`).  Where a batch's images on
    their own disagree with its verdict on the means, the verdict says how
    many came back (``rebuilt (2 of 4 images)``, ``not rebuilt (...; 1 of 4
    images rebuilt)``: :func:`leakattack.rebuilt.images_words`).  The final loss is named after the
    ``objective`` it is (``L_R`` for the squared distance, the cosine distance
    for ``cosine``, the relative residual of a closed-form attack's solve for
    ``residual``, named by the attack's ``residual_name``: imprint's is the share of its bins' signal left
    out); a defended run adds its defense, ε and, with ``--utility``, the test accuracy of training under it
    (said to be below chance when it is under 1/``num_classes``).  A DP protocol's message adds its own noise
    (``protocol_noise``: ``Protocol.privacy`` over rounds 1..``protocol_round``,
    which config.json records) with the accountant's ε over those rounds.
    """
    name = {"cosine": "cosine distance", "residual": residual_name}.get(objective, "L_R")
    record = m.to_dict()
    tail = (f"{name} {_loss(m.final_loss)} | {_labels(m, record)} | {_steps(m)} | "
            f"{m.wall_s:.1f} s | d={m.d} b={m.b} | {_defense(m, num_classes, protocol_noise, protocol_round)}")
    if m.attacked is False:
        return f"nothing was attacked: {m.nothing_attacked} | {tail}{folder}"
    if m.truth is False:  # a message attacked without a truth file
        return (f"no image metrics (no --truth) | {name} {_loss(m.final_loss)} | labels {m.labels_attack} "
                f"({m.label_mode}) | {_steps(m)} | {m.wall_s:.1f} s | "
                f"d={m.d} b={m.b} | reconstruction.pt in {folder}")
    lp = f"{m.lpips:.3f}" if m.lpips is not None else \
        "n/a (--no-lpips)" if m.lpips_note == "LPIPS not requested" else "n/a (backbone weights not cached)"
    scores = f"PSNR {_db(m.psnr)} | SSIM {_ssim(m.ssim)} | LPIPS {lp} | "
    against = (f"PSNR {_db(m.psnr)}, SSIM {_ssim(m.ssim)} against {_db(m.baseline_psnr)}, "
               f"{_ssim(m.baseline_ssim)} for the better baseline | LPIPS {lp} | ")
    images = images_words(record)
    if m.verdict == "not rebuilt":
        why = why_not_rebuilt(record)[0] + (f"; {images}" if images else "")
        return f"not rebuilt ({why}) | {against}{tail}{folder}"
    if m.verdict == "rebuilt":
        words = "; ".join(w for w in (images, faint_words(record)) if w)
        return f"rebuilt{f' ({words})' if words else ''} | " \
               f"{against if m.baseline_psnr is not None else scores}{tail}{folder}"
    return f"{scores}{tail}{folder}"


def _labels(m: RunMetrics, record: dict | None = None) -> str:
    """The summary line's label part (``record``: ``m.to_dict()`` where the caller has it)."""
    if m.label_acc is None:  # a regression's given targets, or no true labels to score against
        classes = isinstance(m.labels_attack, list) and all(type(v) is int for v in m.labels_attack)
        if m.labels_attack is None and m.label_mode != "given":  # an attack of one's own that returned none
            return "no labels returned"
        if m.labels_attack is None or (m.label_mode == "given" and not classes):
            return "label given"
        return f"labels {m.labels_attack} ({m.label_mode}{', not scored' if m.truth is not False else ''})"
    n = len(m.labels_true or ())
    lab = f"labels {round(m.label_acc * n)}/{n} ({m.label_mode})"
    verdicts = image_verdicts(m.to_dict() if record is None else record)
    # the matched labels say something only where images were found (docs/victims.md): none rebuilt, none shown
    if n > 1 and m.label_acc_matched is not None and (verdicts is None or REBUILT in verdicts):
        lab += f", {round(m.label_acc_matched * n)}/{n} on the matched images"
    return lab


def _defense(m: RunMetrics, num_classes: int | None, noise: dict | None = None, rounds: int | None = None) -> str:
    """``defense SPEC, ε E (δ D; pure DP, δ 0 for Laplace noise) | utility ... | `` for a defended run (ε ∞ where
    noise has no bound on what it is added to, or where it adds no noise), ``utility ... | `` for an undefended one
    with ``--utility``, empty
    otherwise; a DP protocol's own noise (``noise``, with its ε over rounds 1..``rounds``) as
    ``protocol noise σ S, ε E (δ D) over rounds 1..T | ``."""
    out = ""
    if noise and noise.get("sigma") is not None:
        over = f" over rounds 1..{rounds}" if isinstance(rounds, int) else ""
        eps, delta = noise.get("epsilon_rdp"), noise.get("delta_paper")
        bound = f"ε {eps:.3g} (δ {delta:.3g}){over}" if isinstance(eps, (int, float)) and isinstance(
            delta, (int, float)) else f"no ε{over} (its δ reaches 1)"
        out += f"protocol noise σ {noise['sigma']:.3g}, {bound}{privacy_caveats(noise, rounds)} | "
    if m.defense:
        out += f"defense {m.defense}"
        if m.epsilon is not None:
            out += f", ε {m.epsilon:.3g} ({'pure DP, δ 0' if m.delta == 0 else f'δ {m.delta:.3g}'})"
        elif m.delta is not None:  # noise with no bound on what it is added to: delta is set, epsilon is not
            out += ", ε ∞ (see privacy_note)"
        else:  # no noise (a clip, pruning, quantisation): no DP bound, as the report and a sweep's table say
            out += f", ε ∞ ({m.privacy_note})" if m.privacy_note else ", ε ∞"
        out += " | "
    acc = m.utility_acc
    if acc is not None:
        chance = 1 / num_classes if num_classes else None
        below = f", below chance ({chance:.2f})" if chance is not None and acc < chance else ""
        out += f"utility: test accuracy {acc:.3f}{below} | "
    return out


def _loss(v) -> str:
    return "n/a (not finite)" if v is None or v != v else f"{v:.3e}"


def _db(v) -> str:
    return "n/a" if v is None else f"{v:.2f} dB"


def _ssim(v) -> str:
    return "n/a" if v is None else f"{v:.4f}"


#: the note under a run that rebuilt nothing: a failed attack is not a measurement of privacy
FAILURE_NOTE = ("this is a failure of this attack at this budget (its settings and iterations), not evidence that "
                "the message is private: a stronger attack may still rebuild the input")
#: :data:`FAILURE_NOTE` of a closed-form attack, which has no budget of steps: one solve of this message failed
CLOSED_FAILURE_NOTE = ("this is a failure of this closed-form attack on this message, not evidence that the message is "
                       "private: a stronger attack may still rebuild the input")
#: :data:`CLOSED_FAILURE_NOTE` of a closed form that its time limit or Ctrl-C stopped before its solve ended
STOPPED_CLOSED_FAILURE_NOTE = ("this is a failure of this closed-form attack at this budget (its solve was stopped "
                               "before it ended), not evidence that the message is private: a longer --time-limit or "
                               "a stronger attack may still rebuild the input")
#: :data:`FAILURE_NOTE` of a run that matched its message to the tolerance where another input matches as well
#: (:func:`leakattack.rebuilt.matched_not_unique`): its steps found an input that sends the message, not the client's
UNDETERMINED_FAILURE_NOTE = ("this is a failure of this attack on a message that another input matches as well "
                             "(it has fewer numbers than unknowns, or the attack matched it at an image other than "
                             "the truth), not of its budget and not evidence that the message is private: an image "
                             "prior or a stronger attack may still rebuild the input")
#: :data:`FAILURE_NOTE` of a run whose failure a note below names a cause of that no budget mends (a seed search that
#: took another seed, a prior that turned NaN: :func:`leakattack.rebuilt.not_the_budget`)
CAUSED_FAILURE_NOTE = ("this is a failure of this attack as it ran here, for the reason the note below gives, not of "
                       "its budget and not evidence that the message is private: a stronger attack may still rebuild "
                       "the input")
#: the note in its place where every value of the message is NaN or infinite (metrics.json's ``message_nonfinite``
#: equals b): no attack can read anything there, so a stronger one would not do better
NONFINITE_NOTE = ("all {n} values of the message are NaN or infinite, and no attack can read anything from them: this "
                  "run shows that the defense destroyed the message, not what a finite message under a weaker setting "
                  "of it would leak")
#: the note beside :data:`FAILURE_NOTE` where only some of the message's values are NaN or infinite
SOME_NONFINITE_NOTE = ("{n} of the message's {b} values are NaN or infinite; an attack that leaves them out may still "
                       "read the other {rest}")


def partly_rebuilt(note: str, record: dict) -> str:
    """``note`` (a failure note ending in "rebuild the input") for a batch that is not rebuilt on its means while some
    of its images are on their own (metrics.json's ``verdict_each``): those images are what the message leaks, and
    the failure is the rest's; ``note`` itself elsewhere."""
    counted = rebuilt_images(record)
    if counted is None or not 0 < counted[0] < counted[1] or not note.endswith("rebuild the input"):
        return note
    k, b = counted
    rest = "other image" if b - k == 1 else f"other {b - k} images"
    return (f"{note[:-len('the input')]}the batch's {rest}; {k} of its {b} {'are' if k > 1 else 'is'} rebuilt on "
            f"{'their' if k > 1 else 'its'} own, which the message leaks")


def cmd_run(a) -> int:
    cfg = config_from_args(a)
    with _note_first(_unused_flags_warning(cfg)) as noted:
        m, folder = run_attack(cfg, out=a.out, progress=not a.quiet, with_lpips=not a.no_lpips, interruptible=True,
                               prepared=noted)
    config = _config(folder)
    derived = config.get("derived", {})
    closed = cfg.attack_class.closed_form
    print(summary_line(m, folder, objective="residual" if closed else derived.get("objective", "l2"),
                       num_classes=derived.get("num_classes"),
                       protocol_noise=(derived.get("sketch") or {}).get("privacy") if cfg.protocol else None,
                       protocol_round=cfg.protocol_round, residual_name=cfg.attack_class.residual_name))
    # a note when the run diverged, its loss rose, or a match is not unique; not for an optimiser's ordinary stops,
    # unless Gauss-Newton steps were tried after them and not kept (the line says so, the note why); always for a
    # closed-form attack, whose message says what it solved
    tried = m.gauss_newton is not None and bool(m.gauss_newton) and not m.gauss_newton.get("kept")
    record = m.to_dict()
    if m.message and (m.stop_reason not in ("tolerance", "stalled") or m.unique is False or closed or tried
                      or (m.stop_reason == "tolerance" and loose_tolerance(cfg) and m.verdict == "not rebuilt")
                      or record.get("prior_not_finite")):  # a stall where a prior turned NaN: the prior's
        print(f"note: {m.message}", file=sys.stderr)
    gn = m.gauss_newton or {}
    if m.stop_reason == "tolerance" and gn.get("kept") and gn.get("jacobian_rank") is None and \
            m.jacobian_rank is None and m.jacobian_note:
        # converged, then Ctrl-C (or the time limit) came before J at the reconstruction: nothing else says so
        print(f"note: uniqueness {m.jacobian_note}", file=sys.stderr)
    images = images_note(record)
    if images:
        print(f"note: {images}", file=sys.stderr)
    if m.attacked is False or m.verdict == "not rebuilt":
        ahead = why_not_rebuilt(record)[1] if m.attacked is not False and m.truth is not False else None
        if ahead:
            print(f"note: {ahead}", file=sys.stderr)
        nonfinite, b = record.get("message_nonfinite") or 0, record.get("b") or 0
        unreadable = message_unreadable(record)
        said = ZERO_NOTE if record.get("message_zero") is True else NONFINITE_NOTE.format(n=nonfinite)
        # a closed form that a time limit or Ctrl-C stopped (the analytic attack's solve) failed at its budget
        if cfg.attack_class.closed_form:
            failure = STOPPED_CLOSED_FAILURE_NOTE if m.stop_reason in HALTED else CLOSED_FAILURE_NOTE
        else:
            failure = UNDETERMINED_FAILURE_NOTE if matched_not_unique(record) else \
                CAUSED_FAILURE_NOTE if not_the_budget(record) else FAILURE_NOTE
        if unreadable or not truth_not_sent(record):  # a truth that does not send the message: no attack failed
            print(f"note: {said if unreadable else partly_rebuilt(failure, record)}", file=sys.stderr)
        if nonfinite and not unreadable:
            print(f"note: {SOME_NONFINITE_NOTE.format(n=nonfinite, b=b, rest=b - nonfinite)}", file=sys.stderr)
        identified = identified_line(record)
        if identified:
            print(f"note: {identified}", file=sys.stderr)
        part = failed_part(record, clip_blind=clip_not_modelled(cfg, config.get("run", {}).get("defense")),
                           sketch_blind=sketch_not_held(config.get("run", {})))
        if part:
            print(f"note: {part}", file=sys.stderr)
        for tip in next_settings(failed_kind(record), config.get("run", {}), derived, record,
                                 closed_form=cfg.attack_class.closed_form):
            print(f"note: {tip}", file=sys.stderr)
        if m.closed_forms:
            print(f"note: {closed_forms_line(m.closed_forms, inexact_words(config.get('run', {}), derived, record))}",
                  file=sys.stderr)
    if m.seed_search is not None:
        print(f"note: {seed_search_line(m.seed_search)}", file=sys.stderr)
    if m.label_choice is not None:
        print(f"note: {label_choice_line(m.label_choice)}", file=sys.stderr)
    return 0


def _unused_flags_warning(cfg) -> str | None:
    """The warning line naming the flags given that the configured attack does not read, or None."""
    note = cfg.unused_note()
    return None if note is None else f"leakattack: warning: {note}"


@contextlib.contextmanager
def _note_first(note: str | None) -> Iterator[Callable[[object], None]]:
    """A callback for :func:`run_attack`'s ``prepared`` that prints ``note`` once the run has passed every check
    before its attack, and the warnings its checks gave after it: a refused run prints its refusal alone, one that
    goes ahead its note first (where there is one), then each warning once.  A :class:`SlowWarning` (long work under
    way in the preparation: a seed search, rounds re-simulated) prints the note and the warnings held so far, and
    itself, at once."""
    shown = warnings.showwarning
    held: list[tuple[tuple, dict]] = []

    def flush() -> None:
        nonlocal note
        if note is not None:  # said once
            print(note, file=sys.stderr)
            note = None
        for args, kwargs in held:
            shown(*args, **kwargs)
        held.clear()

    def noted(p) -> None:
        warnings.showwarning = shown
        flush()

    def hold(*args, **kwargs) -> None:
        held.append((args, kwargs))
        category = args[1] if len(args) > 1 else kwargs.get("category")
        if isinstance(category, type) and issubclass(category, SlowWarning):  # long work under way: say it now
            flush()

    warnings.showwarning = hold
    try:
        yield noted
    finally:
        warnings.showwarning = shown


def clip_not_modelled(cfg, defense: str | None = None) -> bool:
    """Whether the run's defense clips and the attacker was not told (no ``--attacker-knows-clip``): its model of
    the client then sends an unclipped gradient the message does not hold.  ``defense``: the one the run recorded
    (a message file's own, which config.json's ``run.defense`` holds), else ``cfg.defense``."""
    spec = defense if defense is not None else cfg.defense
    return bool(spec) and not cfg.attacker_knows_clip and bool(build_defense(spec).clips())


def _config(folder) -> dict:
    """The run's config.json: the settings given (``run``) and those the run resolved (``derived``: objective, number
    of classes, recipe)."""
    import json
    from pathlib import Path
    try:
        return json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def _steps(m) -> str:
    """The steps and the stop reason, with the Gauss-Newton steps among them: ``1004 it (tolerance, 4 Gauss-Newton)``,
    and the starts that successive halving pruned (``--prune-restarts``: ``200 it (iterations, 7 of 8 starts
    pruned)``)."""
    gn, note = m.gauss_newton, ""
    if gn and gn.get("kept"):
        note = f", {steps_note(gn)}"
    elif gn:
        note = (", no Gauss-Newton" if "error" in gn else ", no Gauss-Newton step" if not gn.get("accepted")
                else ", Gauss-Newton not converged")
    stops = m.restart_stops or []
    if stops.count("pruned"):  # --prune-restarts: how many starts halving stopped early
        note += f", {stops.count('pruned')} of {len(stops)} starts pruned"
    return f"{m.iterations} it ({m.stop_reason}{note})"


def seed_search_line(s: dict) -> str:
    """What a seed search found, in one line."""
    return f"seed search: {found_text(s)}, {s['wall_s']:.1f} s"
