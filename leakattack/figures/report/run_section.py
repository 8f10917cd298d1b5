"""A run folder's section of the report: its headline and verdict, setting, scores per image, baselines,
identifiability and uniqueness, and the machine it ran on."""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from pathlib import Path

from defenses.accounting.analysis import paper_epsilon_holds
from targets.protocols import privacy_caveats

from ...attacks.priors import parse_prior
from ...attacks.recipes import inexact_words, next_settings
from ...attacks.seed_search import found_text, sketch_not_held
from ...constraints import duration_seconds
from ...errors import SettingWarning, UserError, ratio_text
from ...metrics import (
    NOT_REBUILT,
    REBUILT,
    MetricsError,
    RunMetrics,
    closed_forms_line,
    failed_kind,
    failed_part,
    identified_line,
)
from ...metrics.identify import SCORES
from ...rebuilt import (
    FAINT_SSIM,
    HALTED,
    ZERO_NOTE,
    adds_noise,
    faint_words,
    image_scores,
    image_verdicts,
    images_note,
    images_words,
    label_choice_line,
    message_unreadable,
    not_the_budget,
    truth_not_sent,
    why_not_rebuilt,
)
from ...rebuilt import verdict as verdict_of
from ...results import (
    is_number,
    quoted,
    read_config,
    read_object,
)
from .shared import (
    FAILURE_NOTE,
    NOT_A_BOUND_MARK,
    NOT_A_BOUND_NOTE,
    NOT_A_NUMBER,
    NOT_RECORDED,
    _attack_class,
    _clips,
    _e,
    _figure,
    _int,
    _kv,
    _machine_text,
    _name,
    _num,
    _or,
    _paper_rule,
    _percent,
    _protocol_class,
    _score,
    _seconds,
    _threat,
)

#: at most this many images of one run get a row in its per-image table
MAX_IMAGE_ROWS = 64
#: in its place where every value of the message is NaN or infinite (:func:`leakattack.rebuilt.message_unreadable`)
UNREADABLE_NOTE = "every value of the message is NaN or infinite, and no attack can read anything from it"


def _failure_note(record: dict) -> str:
    """The words beside a run that rebuilt nothing: a failure of the attack, or, where no attack can read the
    message (:func:`leakattack.rebuilt.message_unreadable`), why: every value 0, or NaN or infinite; where the truth
    does not send the message (:func:`leakattack.rebuilt.truth_not_sent`), that, which no attack's failure is."""
    if truth_not_sent(record):
        return "the truth does not send this message"
    if not message_unreadable(record):
        return FAILURE_NOTE
    return ZERO_NOTE if record.get("message_zero") is True else UNREADABLE_NOTE


#: the start baseline's row of a run whose attack has no start (a closed-form attack)
NO_START = "none: a closed-form attack has no start"
#: the keys every run's metrics.json has held since the first one: a file without one of them is not a run's metrics
RUN_REQUIRED = ("psnr", "ssim", "iterations", "stop_reason", "d", "b")
#: metrics.json keys by the type RunMetrics declares for them
_TYPES = {f.name: str(f.type) for f in dataclasses.fields(RunMetrics)}
#: metrics.json keys that hold a number or null (a score that is not finite is stored as null); the last three are a
#: defended run's (leakattack.utility.privacy_metrics), which RunMetrics keeps among its extra keys
RUN_NUMBERS = tuple(k for k, t in _TYPES.items() if t in ("float", "float | None")) + ("epsilon", "delta",
                                                                                         "utility_acc")
#: metrics.json keys that hold a whole number or null
RUN_COUNTS = tuple(k for k, t in _TYPES.items() if t in ("int", "int | None"))
#: metrics.json keys that hold a list of numbers (null where one is not finite)
RUN_NUMBER_LISTS = tuple(k for k, t in _TYPES.items() if t == "list[float | None]")
_STAMP = re.compile(r"(?:^|-)(\d{8})-(\d{6})(?:-|$)")


# ---------------------------------------------------------------- run folders

def _run_section(folder: Path, anchor: str) -> tuple[str, str, str]:
    """The run folder's section of the report; a value inside its config.json or metrics.json of another type than a
    run writes (a hand-edited file: a list for model_params, a string for the machine) is one sentence naming the
    folder, not a traceback."""
    try:
        return _run_section_of(folder, anchor)
    except UserError:  # the reader's own sentence (a file that is not JSON, cut short): said as it is
        raise
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as err:
        raise UserError(f"'{folder}' holds a value in its config.json or metrics.json that is not what a run writes "
                        f"({type(err).__name__}: {err}): a hand-edited file; run it again to write the folder anew"
                        ) from None


def _run_section_of(folder: Path, anchor: str) -> tuple[str, str, str]:
    metrics = run_metrics(folder / "metrics.json")
    recorded = (folder / "config.json").is_file()
    config = read_config(folder / "config.json") if recorded else {}  # a hand-edited file: one sentence
    if not recorded:  # the section says so too; collect warns alike
        warnings.warn(f"'{folder}' holds no config.json: its section shows the scores without the setting",
                      SettingWarning, stacklevel=3)
    run, derived, env = config.get("run", {}), config.get("derived", {}), config.get("environment", {})
    head, cls, sentence = _run_headline(metrics, clip_blind=_clips(run.get("defense") or metrics.defense)
                                        and not run.get("attacker_knows_clip"), run=run, derived=derived)
    parts = [f'<section class="item run" id="{anchor}"><h2>Run: {_e(_name(folder))}</h2>',
             f'<p class="path">{_e(folder)}</p>', f'<p class="headline {cls}">{_e(sentence)}</p>']
    parts.append("<h3>Setting</h3>" + _kv(_run_setting(run, derived, metrics)) if config else
                 '<h3>Setting</h3><p class="note">config.json not found: the setting is not recorded.</p>')
    parts.append("<h3>Reconstruction</h3>")
    figs = []
    attack_cls = _attack_class(run.get("attack"))
    closed = attack_cls is not None and attack_cls.closed_form
    if (folder / "reconstruction.png").is_file():
        what = ("the reconstructed images (no true images to compare with)" if metrics.truth is False else
                "truth | attack's start | the image the attack returned, its start itself: nothing was attacked"
                if metrics.attacked is False else
                "truth | reconstruction, per-image PSNR and SSIM (a closed-form attack has no start)"
                if closed else
                "truth | attack's start | reconstruction, per-image PSNR and SSIM")
        figs.append(_figure(folder / "reconstruction.png", what))
    unstepped = closed and metrics.iterations == 0  # its figure holds one value: "no iterations to draw"
    if (folder / "convergence.png").is_file() and not unstepped:
        figs.append(_figure(folder / "convergence.png", "the closed-form attack's residual at each of its "
                            "iterations" if closed else "the minimised loss against the step", width=420))
    if figs:
        parts.append(f'<div class="pair">{"".join(figs)}</div>')
    if not (folder / "reconstruction.png").is_file():  # said also beside a loss curve that is there
        parts.append('<p class="note">reconstruction.png not found: the images are not shown.</p>')
    if unstepped:
        parts.append('<p class="note">No loss curve: the closed-form attack took no iterative step.</p>')
    parts.append(_per_image(metrics))
    parts.append("<h3>Verdict and baselines</h3>" + _run_verdict(metrics))
    parts.append("<h3>Machine and time</h3>" + _kv(_machine(env, metrics, folder)))
    parts.append("</section>")
    return "\n".join(parts), head, cls


def run_metrics(path: Path) -> RunMetrics:
    """A run's metrics.json as its record, refused in one sentence naming the file and the key when it lacks a key
    every run writes (:data:`RUN_REQUIRED`), holds null for one of them other than a score, or holds a metric that is
    not a number; a score that is not finite (NaN) reads as null, as the run itself stores it."""
    data = read_object(path)
    missing = [k for k in RUN_REQUIRED if k not in data]
    if missing:
        raise UserError(f"'{path}' has no {_or(missing)}, which every run's metrics.json holds")
    empty = next((k for k in RUN_REQUIRED if data[k] is None and "None" not in _TYPES[k]), None)
    if empty is not None:  # a step count, a stop reason or a size is never null; a score that is not finite is
        raise UserError(f"'{path}' holds {empty} = null, which every run's metrics.json records")
    for key in RUN_NUMBERS + RUN_COUNTS:
        v = data.get(key)
        if v is not None and not is_number(v):
            raise UserError(f"'{path}' holds {key} = {quoted(v)}, not a number")
        if key in RUN_COUNTS and v is not None and not isinstance(v, int):
            raise UserError(f"'{path}' holds {key} = {quoted(v)}, not a whole number")
    for key in RUN_NUMBER_LISTS:
        v = data.get(key)
        if v is not None and not (isinstance(v, list) and all(e is None or is_number(e) for e in v)):
            raise UserError(f"'{path}' holds {key} = {quoted(v)}, not a list of numbers")
    for key in ("stop_reason", "message"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise UserError(f"'{path}' holds {key} = {quoted(data[key])}, not a text")
    if data.get("verdict") not in (None, REBUILT, NOT_REBUILT):
        raise UserError(f"'{path}' holds verdict = {quoted(data['verdict'])}, neither '{REBUILT}' nor '{NOT_REBUILT}'")
    clean = {k: (None if k in RUN_NUMBERS and is_number(v) and not math.isfinite(v) else v) for k, v in data.items()}
    for key in RUN_NUMBER_LISTS:
        each = clean.get(key)
        if isinstance(each, list):
            clean[key] = [None if e is not None and not math.isfinite(e) else e for e in each]
    try:
        return RunMetrics.from_dict(clean)
    except MetricsError as err:
        raise UserError(f"'{path}' cannot be read: {err}") from None


def _run_scores(m: RunMetrics) -> str:
    """The reconstruction's PSNR and SSIM as a headline quotes them: a score that is not finite (stored as null)
    reads "not a number", followed by why the attack stopped."""
    psnr = f"{_num(m.psnr, 1)} dB" if m.psnr is not None else NOT_A_NUMBER
    ssim = _num(m.ssim, 3) if m.ssim is not None else NOT_A_NUMBER
    text = f"PSNR {psnr}, SSIM {ssim}"
    if m.psnr is None or m.ssim is None:
        text += f" (stop reason {m.stop_reason or NOT_RECORDED}{': ' + m.message if m.message else ''})"
    return text


def _run_headline(m: RunMetrics, clip_blind: bool = False, run: dict | None = None,
                  derived: dict | None = None) -> tuple[str, str, str]:
    """(short tag, CSS class, the headline sentence) of a run; ``clip_blind``: its defense clips and the attacker
    did not model the clip (:func:`leakattack.rebuilt.failed_part`); ``run``, ``derived``: its config.json's
    sections, from which a run that was not rebuilt names the measured settings to try next
    (:func:`leakattack.attacks.recipes.next_settings`)."""
    if m.truth is False:
        return "no truth", "unjudged", "No verdict: the run has no true images to compare its reconstruction with."
    record = m.to_dict()
    images = images_words(record)  # a batch whose images on their own disagree with its verdict
    counted = f" ({images})" if images else ""
    note = images_note(record) if images else None
    named = f" {note[:1].upper()}{note[1:]}." if note else ""
    if m.verdict == REBUILT:
        faint = (f" Faint: its SSIM is below {FAINT_SSIM:g}, about where images become barely visible; the "
                 "reconstruction shows how much of the image came back.") if faint_words(record) else ""
        one = len(m.psnr_each or m.labels_true or [0, 0]) == 1  # a batch of one image
        if images:  # rebuilt on the batch's means while some of its images are not on their own
            return f"rebuilt{counted}", "rebuilt", (f"Rebuilt{counted}: the batch's mean scores clear its baselines "
                                                    f"({_run_scores(m)}).{named}{faint}")
        return "rebuilt", "rebuilt", (f"Rebuilt: the attack reconstructed the private "
                                      f"image{'' if one else 's'} from the message ({_run_scores(m)}).{faint}")
    if m.verdict == NOT_REBUILT:
        part = failed_part(record, clip_blind=clip_blind, sketch_blind=sketch_not_held(run or {}))
        attack_cls = _attack_class((run or {}).get("attack"))
        tips = next_settings(failed_kind(record), run or {}, derived or {}, record,
                             closed_form=attack_cls is not None and attack_cls.closed_form)
        readers = closed_forms_line(m.closed_forms, inexact_words(run or {}, derived or {}, record)) \
            if m.closed_forms else None
        told = [identified_line(record), part, *tips, readers]
        which = "".join(f" {t[:1].upper()}{t[1:]}." for t in told if t)
        if m.nothing_attacked or m.attacked is False:
            note = _failure_note(record)
            return "nothing attacked", "failed", (f"Nothing was attacked ({note}): "
                                                  f"{m.nothing_attacked or NOT_RECORDED}.{which}")
        ahead = why_not_rebuilt(record)[1]
        which = (f" {ahead[:1].upper()}{ahead[1:]}." if ahead else "") + which
        note = _failure_note(record)
        # one solve has no budget of steps, no budget rebuilds a truth that does not send the message, and a match of
        # fewer numbers than unknowns, another seed's R or a prior that turned NaN lacked no steps
        # a closed form that its time limit or Ctrl-C stopped (the analytic attack's fit) did lack its budget
        closed = (attack_cls is not None and attack_cls.closed_form and m.stop_reason not in HALTED) \
            or not_the_budget(record)
        return f"not rebuilt{counted}", "failed", (f"Not rebuilt{'' if closed else ' at this budget'} "
                                                   f"({note}{'; ' + images if images else ''}): "
                                                   f"{_run_scores(m)}.{named}{which}")
    return "verdict not recorded", "unjudged", (
        f"Verdict not recorded: this run folder was written before runs recorded one ({_run_scores(m)}; compare "
        "with the baselines of newer runs).")


def _protocol_batch(run: dict, m: RunMetrics, described: dict) -> str:
    """The batch a protocol run's message was computed on, and where the run's --batch-size made it another than
    the client's round trains on (run --protocol warned of it): ``client_batch``, recorded with the message, else
    (a run recorded before it) the protocol's --client-batch, where a client holding fewer images sends them all."""
    spec = run.get("protocol_spec") or {}
    n, asked = len(m.get("labels_true") or []), run.get("batch_size")
    own = described.get("client_batch", spec.get("batch_size"))
    if not n or spec.get("local_epochs"):  # local epochs run over the client's whole shard
        return ""
    if not isinstance(own, int) or n == own or (isinstance(asked, int) and n < asked and n <= own):
        return f", a batch of {n}"
    return f", a batch of {n} where the client's round trains on batches of {own} (--batch-size {asked})"


def _local_steps(protocol, described: dict) -> str:
    """``, K = 3 local steps at learning rate 0.1``: the client's local training the message covers, where recorded
    (a protocol's message describes it); ``, one gradient at w^t`` for a protocol whose clients send no update."""
    cls = _protocol_class(protocol)
    if cls is not None and cls.sends_gradient:
        return ", one gradient at w^t (no local step)"
    k, lr = described.get("local_steps"), described.get("local_lr")
    if not isinstance(k, int) or isinstance(k, bool):
        return ""
    steps = f", K = {k} local step{'s' if k != 1 else ''}"
    return steps + (f" at learning rate {_num(lr, 3, 'g')}" if isinstance(lr, (int, float)) else "")


#: settings a protocol reads that other rows of the report give (the sketch's kind, and b/d)
_SHOWN_ELSEWHERE = frozenset({"sketch", "sketch_ratio"})


def _protocol_settings(protocol, described: dict) -> str:
    """``dp_clip = 1, dp_delta = 1e-05, ...``: the settings of its spec (config.json's ``protocol_spec``) that this
    protocol reads beyond those every protocol does (a sketched-dp's clip C, a sacfl's threshold τ), as config.json
    names them; "" where the protocol or its spec is not known."""
    cls, spec = _protocol_class(protocol), described.get("protocol_spec")
    if cls is None or not isinstance(spec, dict):
        return ""
    shown = [f"{key} = {_num(spec[key], 4, 'g') if isinstance(spec[key], float) else spec[key]}"
             for key in cls.reads if key in spec and key not in _SHOWN_ELSEWHERE and spec[key] not in ({}, None)]
    return ", ".join(shown)


def _search_settings(run: dict, derived: dict) -> list[str]:
    """What the search minimised and how it stepped, beyond its optimiser and objective, as config.json records
    them: its schedule, signed steps, the TV weight and the other priors, the box and the dtype (two recipes, or a
    recipe and a --prior, that differ in these read apart)."""
    read: dict[str, str] = {}
    for spec in run.get("priors") or []:  # as the run reads them: the last weight of a name, a weight of 0 off
        try:
            name, weight = parse_prior(spec)
        except (UserError, KeyError, TypeError, ValueError):  # a plugin's prior not registered here: as written
            read[str(spec)] = str(spec)
            continue
        read.pop(name, None)
        if name != "tv" and weight:
            read[name] = f"{name}:{weight:g}"
    other = list(read.values())
    tv = derived.get("tv")
    return [f"schedule {derived['schedule']}" if derived.get("schedule") not in (None, "none") else "",
            "signed steps" if derived.get("signed") else "",
            f"TV {tv:g}" if is_number(tv) and tv else "",
            f"prior{'s' if len(other) != 1 else ''} {', '.join(other)}" if other else "",
            "box [0, 1]" if derived.get("box") else "",
            f"in {derived['dtype']}" if derived.get("dtype") else ""]


def _run_setting(run: dict, derived: dict, m: RunMetrics) -> list[tuple[str, str]]:
    model = str(run.get("model", NOT_RECORDED))
    if run.get("model_params"):
        model += " (" + ", ".join(f"{k}={v}" for k, v in run["model_params"].items()) + ")"
    shape = derived.get("in_shape")
    victim = f"{model} on {derived.get('dataset') or run.get('dataset') or NOT_RECORDED}"
    if shape:
        victim += f" ({'×'.join(map(str, shape))}"
        victim += f", {derived['num_classes']} classes)" if derived.get("num_classes") else ")"
    if run.get("data_root") and not run.get("message"):
        victim += f" from {run['data_root']}"
    described = derived.get("sketch") or {}
    weights = run.get("weights") or (f"random initial weights (model seed {derived.get('model_seed')})"
                                     if derived.get("model_seed") is not None else "random initial weights")
    if run.get("protocol"):  # the protocol's w^t: its training folder's checkpoint, or rounds 1..t-1 re-simulated
        source = described.get("w_source") or NOT_RECORDED
        weights = (f"w^t of round {run.get('protocol_round', NOT_RECORDED)}, "
                   + (f"the checkpoint of {run.get('protocol_dir')}" if source == "checkpoint" else source))
    rows = [("victim", f"{victim}; {weights}")]
    if run.get("protocol"):
        message = (f"protocol {run['protocol']}, round {run.get('protocol_round')}, client "
                   f"{run.get('protocol_client')}") + _protocol_batch(run, m, described) + \
            _local_steps(run["protocol"], described)
    elif run.get("message"):
        message = f"captured message file {run['message']}"
    else:
        draw, first = run.get("batch_draw", "consecutive"), run.get("image_index", 0)
        which = {"class": f"image index {first} and the next images of its class",
                 "random": f"image index {first} and others drawn at random"}.get(draw, f"first image index {first}")
        message = f"one gradient of a batch of {run.get('batch_size', 1)} ({which})"
    rows.append(("message", message))
    if run.get("protocol") and (own := _protocol_settings(run["protocol"], described)):
        rows.append(("protocol settings", own))
    d, b = derived.get("d", m.d), derived.get("b", m.b)
    rows.append(("d, b", f"d = {_int(d)} weights, b = {_int(b)} numbers sent" +
                 (f" (b/d = {ratio_text(b, d)})" if isinstance(d, int) and isinstance(b, int) and d else "")))
    # a captured message describes itself (its kind: gradient or update) and its sketch under ``encoder``
    sketch = (described.get("encoder") or described).get("kind") or run.get("sketch") or NOT_RECORDED
    seed = f"seed {derived.get('sketch_seed', NOT_RECORDED)}"
    if run.get("protocol"):  # each protocol draws round t's R_t from its shared seed in its own way
        seed = f"R_t of round {run.get('protocol_round', NOT_RECORDED)} from the protocol's shared seed"
    rows.append(("sketch", "none (the true gradient)" if sketch == "none" else f"{sketch}, {seed}"))
    noise = described.get("privacy") if run.get("protocol") else None  # a DP protocol's own noise
    rows.append(("defense", f"the protocol's own Gaussian noise, σ = {_num(noise.get('sigma'), 3, 'g')}" if noise
                 else m.defense or run.get("defense") or "none"))
    rows.append(("threat model", _threat(run, sketch)))
    if m.seed_search:  # what the search found, which the attack then ran with
        rows.append(("seed search", found_text(m.seed_search)))
    if m.label_choice:  # how the labels were chosen where the rules read different ones, as the run's note says
        rows.append(("label choice", label_choice_line(m.label_choice).removeprefix("labels: ")))
    if noise:  # a DP protocol's run records its ε among the metrics too; this row says over which rounds
        rows.append(("privacy", _protocol_epsilon(noise, run.get("protocol_round"), run.get("protocol"))))
    elif m.recorded("epsilon"):
        rows.append(("privacy", _run_epsilon(m)))  # its text names ε: a row named ε read "ε ε = ..."
    if m.utility_acc is not None:
        steps, eps = m.extra.get("utility_steps"), m.extra.get("utility_epsilon")
        over = f" over its {steps} training steps" if steps else ""
        spent = f"; ε = {_num(eps, 3, 'g')} at δ = {_num(m.delta, 3, 'g')}{over}" if eps is not None else \
            ("; no DP guarantee for the training" if m.defense else "")
        # a training that scored an accuracy carries a note only where it did not learn
        cause = ("the defense's noise or its step size or length" if adds_noise(m.defense) else
                 "its step size or length more than the defense")
        unlearned = (" — the training did not learn (test accuracy below twice chance), so this measures "
                     f"{cause}" if m.extra.get("utility_note") else "")
        rows.append(("utility", f"test accuracy {_num(m.utility_acc, 3)} when training under the defense{spent}"
                     f"{unlearned}"))
    opt = [str(derived.get("optimizer") or run.get("optimizer") or "")
           + (f" (step {derived['lr']:g})" if is_number(derived.get("lr")) else ""),
           f"objective {derived.get('objective') or run.get('objective')}" if derived.get("objective") else "",
           *_search_settings(run, derived),
           _budget(run, derived),
           f"{run.get('restarts', 1)} start{'s' if run.get('restarts', 1) != 1 else ''}"
           + (f" ({(m.restart_stops or []).count('pruned')} pruned by halving)" if run.get("prune_restarts") else "")]
    cls = _attack_class(run.get("attack"))
    params = run.get("attack_params") or {}
    if cls is not None:  # with the declared defaults of the options not given
        params = {p.name: params.get(p.name, p.default) for p in cls.options}
    own = ", ".join(f"{k} {v}" for k, v in params.items())
    if cls is not None and cls.closed_form:  # no optimiser, recipe or budget of steps; the analytic attack's time
        limit = duration_seconds(derived.get("time_limit"))  # limit, where it had one (derived: null where unread)
        own = ", ".join(t for t in (own, f"time limit {_limit(limit)}" if limit is not None else "") if t)
        rows.append(("attack", f"{run['attack']}, in closed form" + (f": {own}" if own else "")))
    else:
        recipe = f", recipe {derived['recipe']}" if derived.get("recipe") else ""
        rows.append(("attack", f"{run.get('attack', NOT_RECORDED)}{recipe}: " + ", ".join(t for t in opt + [own]
                                                                                         if t)))
    stop = f"{_int(m.iterations)} iterations, stop reason {m.stop_reason or NOT_RECORDED}"
    if m.message:
        stop += f": {m.message}"
    rows.append(("stopped", stop))
    return rows


def _protocol_epsilon(noise: dict, rounds, protocol=None) -> str:
    """The ε row of a DP protocol's message: its accountant's ε over the rounds up to it, at the paper's δ, and the
    paper's own ε (``Protocol.privacy``) with the formula its protocol takes it from (``Protocol.paper_epsilon``),
    marked where it lies outside the paper's conditions (a protocol whose ε bounds only below 1,
    ``Protocol.paper_epsilon_below_one``) or bounds no message at any value, with the reason
    (``Protocol.paper_epsilon_unguaranteed``); a protocol not registered in this process gives the number alone."""
    over = f" over rounds 1..{rounds}" if isinstance(rounds, int) else ""
    paper, delta = noise.get("epsilon_paper"), noise.get("delta_paper")
    rdp = noise.get("epsilon_rdp")
    text = (f"ε = {_num(rdp, 3, 'g')} (RDP accountant) at δ = {_num(delta, 3, 'g')}{over}" if is_number(rdp)
            else f"no accountant's ε{over} (its δ reaches 1: nothing is bounded)")
    cls = _protocol_class(protocol)
    if isinstance(paper, (int, float)) and is_number(paper) and math.isfinite(paper):
        text += f"; the paper's ε = {_num(paper, 3, 'g')}"
        if cls is not None and cls.paper_epsilon:
            text += f" ({cls.paper_epsilon})"
        rule = _paper_rule(protocol) if cls is not None else None  # unregistered: the number alone
        if rule == "below one" and not paper_epsilon_holds(paper):
            text += f" {NOT_A_BOUND_NOTE}"
        elif rule == "never":  # at no value (privsgd's)
            text += f" {NOT_A_BOUND_MARK} not a DP bound: {cls.paper_epsilon_unguaranteed}"
    return text + privacy_caveats(noise, rounds)


def _run_epsilon(m: RunMetrics) -> str:
    """The ε row of a defended run: the accountant's ε of the one message at its δ (a Laplace mechanism's pure ε:
    "pure DP, δ = 0", as the run's summary line says), and the paper's ε where the run records one, marked
    :data:`NOT_A_BOUND_MARK` and explained where it lies outside the paper's conditions, as the sweep table does."""
    if m.epsilon is None:
        return f"ε = ∞: {m.privacy_note or 'no DP guarantee'}"
    at = ", pure DP (δ = 0)," if m.delta == 0 else f" at δ = {_num(m.delta, 3, 'g')}"
    text = f"ε = {_num(m.epsilon, 3, 'g')}{at} for this one message"
    paper, paper_delta = m.extra.get("epsilon_paper"), m.extra.get("delta_paper")
    if isinstance(paper, (int, float)) and is_number(paper) and math.isfinite(paper):
        text += f"; the paper's ε = {_num(paper, 3, 'g')}" + (
            f" at δ = {_num(paper_delta, 3, 'g')}" if is_number(paper_delta) else "")
        if not paper_epsilon_holds(paper):
            text += f" {NOT_A_BOUND_NOTE}"
    return text


def _budget(run: dict, derived: dict) -> str:
    """The attack's budget: its iterations, and its time limit where it had one (``time_limit`` of the derived
    settings, seconds or null; the run's own setting where an older config.json has none), whichever came first
    (stop reason time-limit); "" when neither is recorded."""
    iterations = derived.get("iterations") or run.get("iterations")
    limit = duration_seconds(derived["time_limit"] if "time_limit" in derived else run.get("time_limit"))
    steps = f"{_int(iterations)} iterations" if iterations else ""
    if limit is None:
        return f"budget {steps}" if steps else ""
    return f"budget {steps} or {_limit(limit)}, whichever came first" if steps else f"budget {_limit(limit)}"


def _limit(seconds: float) -> str:
    """A time limit as the user sets one (90s, 10m, 1h): in the largest unit that holds it whole, else in seconds
    (:func:`leakattack.errors.duration_text` rounds, as an estimate may: 90 s would read "2 min")."""
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size and (seconds / size).is_integer():
            return f"{seconds / size:g} {unit}"
    return f"{seconds:,.0f} s" if seconds >= 100 else f"{seconds:.3g} s"


def _per_image(m: RunMetrics) -> str:
    psnr, ssim = m.psnr_each or [], m.ssim_each or []
    if not psnr:
        return ""
    truth = m.labels_true or []
    n = len(psnr)
    # the label the attack gave the reconstruction matched to each true image (match[i]: its index in the attack's
    # order); where the run attacked nothing its start was matched, and its labels are not shown against it
    found = m.labels_attack if n > 1 and m.labels_attack and m.attacked is not False and len(m.labels_attack) == n \
        else None
    order = m.match if m.match and sorted(m.match) == list(range(n)) else list(range(n))  # a permutation, or none
    rows = []
    scored = m.truth is not False  # without a truth no score was taken: null reads "–", not "not a number"

    def per_image(v):  # a list of one entry per image, or None (not recorded, or of another length: edited)
        return v if v and len(v) == n else None

    each = (per_image(m.verdict_each) or []) if n > 1 else []  # a batch's images on their own (older runs: none)
    nearer = per_image(m.nearer_each) or [None] * n
    record = m.to_dict()
    bp_each, bs_each = per_image(m.baseline_psnr_each), per_image(m.baseline_ssim_each)
    # the rank of each truth among the data set's images by distance to its reconstruction (image identifiability)
    heads = [(f"rank of its truth among {_int(m.get(f'identified{k}_among'))} by {how}", m.get(f"identified{k}_each"))
             for k, _, how in SCORES if per_image(m.get(f"identified{k}_each"))]
    ranks = [each_rank for _, each_rank in heads]
    for i, (p, s) in enumerate(zip(psnr[:MAX_IMAGE_ROWS], ssim[:MAX_IMAGE_ROWS])):
        label = truth[i] if i < len(truth) else None
        given = f"<td>{_e(found[order[i]])}</td>" if found is not None and label is not None else ""
        own = ""
        if each:  # the image's own verdict beside the better of its baselines' scores
            base = (f"{_score(bp_each[i], 2, scored)} / {_score(bs_each[i], 4, scored)}"
                    if bp_each and bs_each else NOT_RECORDED)
            shows = f" (shows image {nearer[i]})" if _shows_another(record, i, nearer[i]) else ""
            own = f"<td>{base}</td><td>{_e(each[i] + shows)}</td>"
        ranked = "".join(f"<td>{_e(_rank(r, i))}</td>" for r in ranks)
        rows.append(f"<tr><td class=key>{i}</td><td>{_e(label if label is not None else '–')}</td>{given}"
                    f"<td>{_score(p, 2, scored)}</td><td>{_score(s, 4, scored)}</td>{own}{ranked}</tr>")
    more = (f'<p class="note">{len(psnr) - MAX_IMAGE_ROWS} more images not listed; mean PSNR '
            f'{_num(m.psnr, 2)} dB.</p>' if len(psnr) > MAX_IMAGE_ROWS else "")
    acc, matched = m.label_acc, m.label_acc_matched
    # as in the summary line, the matched labels say something only where images were found: none rebuilt, none shown
    verdicts = image_verdicts(record)
    on_matched = (f"; {round(matched * n)} of {n} on the images they were matched to" if n > 1 and
                  isinstance(matched, (int, float)) and (verdicts is None or REBUILT in verdicts) else "")
    lab = (f'<p class="note">labels recovered: {_percent(acc)} (as a multiset){on_matched}.</p>'
           if isinstance(acc, (int, float)) else "")
    return ('<h4>Per image (in ground-truth order)</h4><div class="scroll"><table class="num"><tr><th>image</th>'
            "<th>true label</th>" + ("<th>attack's label</th>" if found is not None and truth else "")
            + "<th>PSNR (dB)</th><th>SSIM</th>"
            + ("<th>better baseline: PSNR / SSIM</th><th>verdict on its own</th>" if each else "")
            + "".join(f"<th>{_e(head)}</th>" for head, _ in heads) + "</tr>"
            + "".join(rows) + "</table></div>" + more + lab)


def _rank(ranks: list, i: int) -> str:
    """Image ``i``'s rank from an identifiability list (``1 (nearest)``), or "–" where it was not measured."""
    r = ranks[i] if i < len(ranks) else None
    return "–" if r is None else f"{r} (nearest)" if r == 1 else str(r)


def _shows_another(record: dict, i: int, j: int | None) -> bool:
    """Whether the reconstruction matched to image ``i`` is said to show image ``j`` (``nearer_each``): only where its
    own scores would count it rebuilt, as :func:`leakattack.rebuilt.images_note` says it.  Nearer in MSE is all
    ``nearer_each`` measures, and noise is nearer to some image of the batch than to the one it was matched to: a
    reconstruction that does not clear its image's baselines shows nothing to name."""
    own = image_scores(record, i) if j is not None else None
    return own is not None and verdict_of(own["psnr"], own["ssim"], own["baseline_psnr"],
                                          own["baseline_ssim"]) == REBUILT


def _run_verdict(m: RunMetrics) -> str:
    """The verdict with what decided it, the scores beside the baselines', and whether the match is unique.

    A run that attacked nothing says so first, as its summary line does, and its scores are those of the image it
    returned, its start, not of a reconstruction."""
    verdict = m.verdict
    lines = []
    idle = m.attacked is False or bool(m.nothing_attacked)
    if idle:
        note = _failure_note(m.to_dict())
        lines.append(f'<p class="verdict"><strong>Nothing was attacked</strong> ({_e(note)}): '
                     f"{_e(m.nothing_attacked or NOT_RECORDED)}. The attack returned its start, scored below as "
                     "what it returned: no reconstruction was made to score.</p>")
    elif m.truth is False:  # a message without its images: nothing to score, no baseline
        lines.append('<p class="verdict">No verdict: the run has no true images to compare its reconstruction '
                     "with (a message file without --truth), so it has no scores and no baselines.</p>")
        if m.unique is not None or m.unknowns:
            lines.append(f'<p class="note">{_e(_uniqueness(m))}</p>')
        return "".join(lines)
    elif verdict is None:
        lines.append(f'<p class="verdict">Verdict: {NOT_RECORDED}.</p>')
    else:
        record = m.to_dict()
        why, ahead = why_not_rebuilt(record) if verdict == NOT_REBUILT else ("", None)
        reason = f" Reason: {why}." if why and m.verdict_baseline is not None else ""
        extra = f" ({FAILURE_NOTE})" if verdict == NOT_REBUILT else ""
        more = f" {ahead[:1].upper()}{ahead[1:]}." if ahead else ""
        images = images_words(record)  # a batch whose images on their own disagree with its verdict
        # as the summary line words it: a rebuilt run's faint note beside the batch's count
        words = "; ".join(w for w in (images, faint_words(record) if verdict == REBUILT else None) if w)
        counted = f" ({words})" if words else ""
        lines.append(f'<p class="verdict"><strong>Verdict: {_e(verdict)}{_e(counted)}</strong>{_e(extra)}.'
                     f"{_e(reason)}{_e(more)}</p>")
    rows = [
        ("the image returned (its start: nothing was attacked)" if idle else "reconstruction", m.psnr, m.ssim,
         m.lpips, True),
        ("baseline: the attack's start", m.baseline_start_psnr, m.baseline_start_ssim, m.baseline_start_lpips,
         m.recorded("baseline_start_psnr")),
        (f"baseline: {m.baseline_mean_image or 'mean image'}", m.baseline_mean_psnr, m.baseline_mean_ssim,
         m.baseline_mean_lpips, m.recorded("baseline_mean_psnr")),
        ("better baseline", m.baseline_psnr, m.baseline_ssim, m.baseline_lpips, m.recorded("baseline_psnr")),
    ]
    scored = m.truth is not False  # a score against the truth stored as null is not finite
    # a closed-form attack has no data-free start, so no start to score (leakattack.experiment.judgement): its row
    # is recorded with nothing in it, which says so in words rather than with dashes
    no_start = scored and m.recorded("baseline_start_psnr") and all(
        v is None for v in (m.baseline_start_psnr, m.baseline_start_ssim, m.baseline_start_lpips))
    body = "".join(
        f"<tr><td class=key>{_e(label)}</td>" + (
            f"<td colspan=3>{_e(NO_START)}</td>" if i == 1 and no_start else
            f"<td>{_score(p, 2, i == 0 and scored)}</td><td>{_score(s, 4, i == 0 and scored)}</td>"
            f"<td>{_num(lp, 4)}</td>" if known else f"<td colspan=3>{NOT_RECORDED}</td>") + "</tr>"
        for i, (label, p, s, lp, known) in enumerate(rows))
    lines.append('<table class="num"><tr><th></th><th>PSNR (dB)</th><th>SSIM</th><th>LPIPS</th></tr>' + body +
                 "</table>")
    if m.lpips is None and m.lpips_note:
        lines.append(f'<p class="note">{_e(m.lpips_note)}</p>')
    if m.unique is not None or m.unknowns:
        lines.append(f'<p class="note">{_e(_uniqueness(m))}</p>')
    if m.iip is not None:
        lines.append(f'<p class="note">{_e(_identifiability(m))}</p>')
    return "".join(lines)


def _identifiability(m: RunMetrics) -> str:
    """How many images the reconstruction singles out of its data set, by pixel distance and (where recorded) by the
    victim's features, beside the baselines' shares, in one sentence (:mod:`leakattack.metrics.identify`)."""
    parts = []
    for suffix, how, _ in SCORES:
        if m.get(f"iip{suffix}") is None:
            continue
        each = [r for r in (m.get(f"identified{suffix}_each") or []) if r is not None]
        found = sum(r == 1 for r in each)
        base = ", ".join(f"{label} {_percent(v)}" for label, v in (("the start", m.get(f"baseline_start_iip{suffix}")),
                                                            ("the mean image", m.get(f"baseline_mean_iip{suffix}")))
                         if v is not None)
        ranked = (f"the truth's rank: {each[0]}" if len(each) == 1 else
                  f"the truths' ranks: {', '.join(map(str, each))}")
        parts.append(f"by {how} among {_int(m.get(f'identified{suffix}_among'))} images of the data set, {found} of "
                     f"{len(each)} ({ranked}" + (f"; baselines: {base})" if base else ")"))
    return "Identifiability (Yin et al. 2021), images whose nearest image is their truth: " + "; ".join(parts) + "."


def _uniqueness(m: RunMetrics) -> str:
    """Whether the match is unique, in one sentence: b numbers sent beside the m·B unknowns, "fewer numbers than
    unknowns: not unique by count" where b < m·B (or where the sketch's zero rows leave fewer independent numbers
    than unknowns), else what the Jacobian's rank says (``jacobian_note``)."""
    count = f"b = {_int(m.b)} numbers sent for m·B = {_int(m.unknowns)} unknowns"
    fewer = isinstance(m.b, int) and isinstance(m.unknowns, int) and m.b < m.unknowns
    if m.unique_by_count is False or fewer:
        why = ("fewer numbers than unknowns" if fewer or not isinstance(m.b, int) else
               "fewer independent numbers than unknowns (the sketch's zero rows)")
        return f"{count}: {why}: not unique by count (another input matches as well)."
    u = m.unique
    said = "unique" if u else "not unique" if u is False else "of unknown uniqueness"
    note = f" ({m.jacobian_note})" if m.jacobian_note and m.recorded("jacobian_note") else ""
    return f"{count}; the match is {said}{note}."


def _machine(env: dict, m: RunMetrics, folder: Path) -> list[tuple[str, str]]:
    rows = [("machine", _machine_text(env))]
    soft = [f"{k} {env[k]}" for k in ("leakattack", "torch", "python") if env.get(k)]
    rows.append(("software", ", ".join(soft) + (f"; {env['platform']}" if env.get("platform") else "") if soft
                 else NOT_RECORDED))
    rows.append(("time", f"attack {_seconds(m.attack_s)}, with its scores and baselines {_seconds(m.wall_s)} "
                         "(start-up and files not counted)"))
    rows.append(("written", _when(folder)))
    return rows


def _when(folder: Path) -> str:
    hit = _STAMP.search(Path(folder).resolve().name)  # "." names the folder too
    if not hit:
        return f"{NOT_RECORDED} (the folder name carries no time stamp)"
    d, t = hit.groups()
    return f"{d[:4]}-{d[4:6]}-{d[6:]} {t[:2]}:{t[2:4]}:{t[4:]} (from the folder name)"
