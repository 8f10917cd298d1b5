"""Every parameter a user can set, declared once: name, default, constraint, label, help, flag.

The declarations below generate the ``leakattack run`` flags, the validation
with its one-sentence errors, and the keys a sweep file may use; the typed
:class:`~leakattack.config.RunConfig` has one field per declaration (a test
checks names, defaults and types).  Adding a run parameter is one ``Param``
line here, one field there, plus the code that uses it.  The registry names and constants the declarations
show come from :mod:`.names` (copies checked by a test), so importing this
module, and building every command's flags from it, imports no torch.
"""

from __future__ import annotations

from ..constraints import (
    DURATION_UNITS,
    MAX_ITERATIONS,
    MAX_RESTARTS,
    MAX_SEED,
    NOTHING,
    DeviceName,
    Param,
    duration_seconds,
)
from . import names
from .constraints import (
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
)

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("float64", "float32")
MATCH_SPACES = ("sketch", "unsketched")

#: a round runs every sampled client's local steps and a test evaluation, writes a checkpoint and appends to
#: train.jsonl, and an attack on round t re-simulates the rounds before it: a hundred thousand rounds already take
#: hours of a small model; more is a typo, not a plan
MAX_ROUNDS = 100_000
#: the rounds T of a training (`leakattack train --rounds`, `training.train`)
ROUNDS = Number(1, MAX_ROUNDS, integer=True)

def _choices(fn):
    return Choice(fn)


class Round(Index):
    """A protocol round: an integer in [1, :data:`MAX_ROUNDS`], the rounds ``leakattack train --rounds`` allows."""

    def __init__(self):
        super().__init__(1)
        self.high = MAX_ROUNDS

    def error(self, label, v):
        if isinstance(v, int) and not isinstance(v, bool) and v > MAX_ROUNDS:
            return (f"{label} {v} does not exist: a protocol runs at most {MAX_ROUNDS:,} rounds (`leakattack train "
                    "--rounds` allows no more)")
        return super().error(label, v)


class Duration(Constraint):
    """A positive wall-clock duration: ``90s``, ``10m``, ``1h``, ``1h30m`` or a number of seconds (read by
    :func:`duration_seconds`)."""

    what = "be a positive duration such as 90s, 10m, 1h, 1h30m or a number of seconds"

    def ok(self, v) -> bool:
        return duration_seconds(v) is not None


#: a copy of targets.victim.DEEP_WEIGHTS for the help text (declaring parameters imports no torch; a test compares)
DEEP_WEIGHTS = 100_000
#: a copy of targets.victim.PARALLEL_EXAMPLES for the help text
PARALLEL_EXAMPLES = 4


POS_INT = Number(1, integer=True)
NONNEG_INT = Number(0, integer=True)
SEED = Number(0, MAX_SEED, integer=True, what="be an integer in [0, 2^63 - 1]")
#: the master seed: the seeds derived from it (it plus 1, 2 and 3) stay seeds
MASTER_SEED = Number(0, MAX_SEED - 3, integer=True, what="be an integer in [0, 2^63 - 4] (the seeds derived from it "
                     "are it plus 1, 2 and 3)")

#: the run parameters, in the order of ``leakattack run --help``
RUN_PARAMS: tuple[Param, ...] = (
    # victim
    Param("model", "lenet", ModelName(names.MODELS), "model",
          "victim model, one of {choices}, or your own nn.Module class as path/to/file.py:Name or package.module:Name",
          "victim"),
    Param("model_params", {}, Table(), "model parameters",
          "model parameter, e.g. act=relu, width=32, depth=20 (repeatable; `leakattack list --model M` names them)",
          "victim", flag="--model-param"),
    Param("weights", None, Optional(PathName("file")), "weights",
          "weights file to load into the model: a state_dict, a flat vector of the trainable weights, or a "
          "`leakattack train` checkpoint (read with weights_only: a file cannot run code)", "victim"),
    Param("bn", "auto", Choice(("auto",) + tuple(names.BN_MODES)), "BatchNorm mode",
          "BatchNorm statistics of the client's forward pass: train (batch statistics) or eval (running statistics); "
          "auto: eval for one example (the field's single-image case), train for a batch",
          "victim"),
    Param("weight_init", None, Optional(Choice(names.INITS)), "weight init",
          "weight initialisation: uniform (U(-0.5,0.5), DLG), default, xavier, normal (default: the model's own; "
          "lenet: uniform)", "victim"),
    Param("model_seed", None, Optional(SEED), "model seed", "seed of the model weights (default: --seed)", "victim"),
    # sketch and defense
    Param("sketch", "srht", _choices(names.SKETCHES), "sketch", "sketch kind, one of {choices}", "sketch"),
    Param("sketch_dim", None, Optional(Number(0, integer=True, low_open=True)),
          "sketch dimension", "sketch dimension b (overrides --sketch-ratio)", "sketch"),
    Param("sketch_ratio", 0.5, Number(0, 1, low_open=True), "sketch ratio", "b/d, in (0, 1]", "sketch"),
    Param("sketch_params", {}, Table(), "sketch parameters",
          "extra sketch parameter, e.g. s=4 for sparse (repeatable)", "sketch", flag="--sketch-param"),
    Param("sketch_seed", None, Optional(SEED), "sketch seed",
          "seed of R, shared by client and attacker (default: --seed + 1)", "sketch"),
    # the bound is seed_search.MAX_BITS (a literal: declaring parameters imports no torch; a test compares them)
    Param("sketch_seed_search", 0, Number(0, 32, integer=True, what="be a number of bits in [0, 32] (0: off)"),
          "sketch seed search", "with --sketch-unknown: the attacker knows all but the low BITS bits of the client's "
          "sketch seed, scores the 2^BITS candidate seeds on the message alone and attacks with the best one "
          "(0: off; at most 32)", "sketch"),
    Param("sketch_memory", None, Optional(Number(0)), "sketch memory",
          "GB a dense sketch (gaussian, ams) may hold as one matrix; beyond it R is regenerated every call "
          "(default: 1/4 of the available RAM)", "sketch"),
    Param("defense", "", Steps(), "defense",
          "defense spec applied by the client, e.g. 'clip:C=1,gaussian:sigma=1e-3@after_sketch' (default: none)",
          "sketch"),
    Param("delta", 1e-5, Number(0, 1, low_open=True, high_open=True), "delta",
          "delta at which epsilon is reported for Gaussian noise", "sketch"),
    Param("noise_seed", None, Optional(SEED), "noise seed", "seed of the client's noise (default: --seed + 3)",
          "sketch"),
    Param("utility", False, Flag(), "utility",
          "also train the target under the defense on digits and record utility_acc", "sketch"),
    Param("utility_steps", 300, Number(1, MAX_ITERATIONS, integer=True), "utility steps", "training steps of --utility",
          "sketch"),
    Param("utility_batch", 64, POS_INT, "utility batch", "", "sketch", flag=NOTHING),
    Param("utility_lr", 0.5, Number(0, low_open=True), "utility learning rate",
          "step size of --utility's training (the server steps to w - lr R^T y)", "sketch"),
    Param("attacker_knows_clip", False, Flag(), "attacker knows clip",
          "the attacker models the defense's deterministic clips (never its noise)", "sketch"),
    Param("attacker_knows_prune", False, Flag(), "attacker knows prune",
          "the attacker models the defense's pruning: it zeroes the same share of its own simulated message's "
          "smallest entries", "sketch"),
    # attacker
    Param("attack", names.DEFAULT_ATTACK, _choices(names.ATTACKS), "attack", "attack, one of {choices}"),
    # the options the attack declares (Attack.options): each has its own flag, added by add_attack_arguments
    Param("attack_params", {}, Table(), "attack parameters", "", flag=NOTHING),
    Param("recipe", "auto", Choice(names.RECIPES_OR_AUTO), "recipe",
          "one of {choices}: the attacker settings used where none is given; auto: the model's own, else by its "
          "units (dlg: L-BFGS on L_R in float64, for smooth victims, the MLP and the 32 px ViT; ig: Inverting "
          "Gradients' cosine, signed Adam with step decay, TV and box in float32, for ResNets, vit_b_16 and "
          "victims with ReLU or max pooling)"),
    Param("optimizer", None, Optional(_choices(names.OPTIMIZERS)), "optimizer",
          "one of {choices} (default: from the recipe)"),
    Param("iterations", None, Optional(Number(1, MAX_ITERATIONS, integer=True)), "iterations",
          "optimiser steps (default: from the recipe)"),
    Param("lr", None, Optional(Number(0, low_open=True)), "learning rate",
          "step size (default: the recipe's own where it sets one, as the ig recipe does for its Adam, config.json's "
          "derived lr; else " + ", ".join(f"{k} {v}" for k, v in names.DEFAULT_LR.items()) + ")"),
    Param("objective", None, Optional(Choice(names.OBJECTIVES)), "objective",
          "one of {choices}: squared distance L_R or cosine distance (default: from the recipe)"),
    Param("schedule", None, Optional(Choice(names.SCHEDULES)), "step-size schedule",
          "one of {choices}: step multiplies the step size by 0.1 at 3/8, 5/8 and 7/8 of the iterations "
          "(Inverting Gradients) (default: from the recipe)"),
    Param("signed", None, Optional(Flag()), "signed gradients",
          "first-order optimisers step along sign(gradient) (Inverting Gradients; not with lbfgs) "
          "(default: from the recipe)"),
    Param("tv", None, Optional(Number(0, what="be non-negative")), "TV weight",
          "weight of the total-variation prior (0: off) (default: from the recipe)"),
    Param("surrogate", None, Optional(Number(0, what="be non-negative")), "ReLU surrogate",
          "width tau of the attacker's smooth stand-in for ReLU's derivative, sigmoid(z/tau) in place of 1[z > 0] "
          "(nn.ReLU modules; forward exact, L_R exact), divided by 10 at each decay of the step schedule "
          "(0: exact) (default: from the recipe)", flag="--relu-surrogate"),
    Param("priors", [], Items(names.checked_by("leakattack.attacks:prior_error"), "NAME[:WEIGHT]"), "priors",
          "image prior added to the matching objective, one of {priors} (tv: total "
          "variation; bn: BatchNorm statistics against the granted ones, Yin et al. 2021; dip: the deep image prior, "
          "an untrained generator whose weights are optimised, WEIGHT = its width multiplier), e.g. tv:0.1 "
          "(repeatable; tv:W overrides --tv; a missing weight takes the prior's default, but a bare tv keeps the "
          "weight --tv or the recipe gives where it is positive) (default: none)",
          flag="--prior"),
    Param("bn_stats", "running", Choice(("running", "client")), "bn statistics granted",
          "the BatchNorm statistics the bn prior pulls towards: running (the model's, always held by the "
          "attacker) or client (the threat model grants the client's batch statistics at every BatchNorm input)"),
    Param("box", None, Optional(Flag()), "box",
          "project the dummy data onto [0, 1] after every step (default: from the recipe)"),
    Param("tol", 1e-10, Number(0, what="be non-negative"), "tolerance",
          "stop when L_R/||y||^2 <= tol (with --objective cosine: the cosine distance <= tol)"),
    Param("stall_window", names.STALL_WINDOW, NONNEG_INT, "stall window",
          f"stop a start once its lowest L_R stays above {1 - names.STALL_GAIN:g} times its value this many "
          "steps before (with --schedule step, counted from its last decay) (0: never)"),
    Param("label_mode", "idlg", Choice(names.LABEL_MODES), "label mode",
          "one of {choices}: recover from the message through the sketch (the pooled count rule, and the row-sum "
          "rules sign, llg and llg-star where the head's inputs are non-negative, leakattack.attacks.labels; where "
          "they differ, a short run of the attack with each keeps the labels that match the message best), take "
          "the true labels, or optimise soft labels (DLG) (regression victims always use given)", flag="--labels"),
    Param("dummy_init", "gaussian", Choice(names.DUMMY_INITS), "dummy init", "one of {choices}"),
    Param("restarts", 1, Number(1, MAX_RESTARTS, integer=True), "restarts",
          f"independent dummy starts, at most {MAX_RESTARTS}; the lowest final L_R (cosine: distance) wins"),
    Param("prune_restarts", False, Flag(), "prune restarts",
          "successive halving of the starts: at 1/8, 1/4 and 1/2 of the budget (iterations or time limit) for 8 "
          "starts, the half with the higher lowest L_R stops (stop reason pruned), so 8 starts take 2.5 starts' "
          "steps instead of 8"),
    Param("refine", "auto", Choice(names.REFINES), "refine",
          "what follows the first-order phase on the best start: Levenberg-Marquardt (Gauss-Newton) steps on L_R, "
          "which converge to the input itself where the message pins it down (auto: on a float64 attack of L_R "
          "alone with fixed labels, b >= m*B and at most 4096 unknowns, after it stalled, met --tol or used a "
          "budget of at least 1000 steps, and after its first 1000 steps when the budget is larger, running the "
          "rest only if they do not converge; where forming J is too large a job for that, only under a "
          "--time-limit that leaves room for two J at the pace of the first one's columns; gauss-newton: wherever "
          "L_R alone is the objective; none)"),
    Param("time_limit", None, Optional(Duration()), "time limit",
          "wall-clock budget of the attack's optimisation, e.g. 90s, 10m, 1h, 1h30m or a number of seconds: at the "
          "deadline "
          "every start still running stops with its best iterate (stop reason time-limit; the analytic attack: its "
          "best sweep, no further solve step or label set); with a step schedule its "
          "decays fit the steps the limit allows (default: the recipe's when --iterations is not given either: "
          f"{names.IG_TIME_LIMIT / 60:g}m for ig, none for dlg)"),
    Param("seed", 0, MASTER_SEED, "seed",
          "master seed (the sketch, start and noise seeds are it plus 1, 2 and 3; --sketch-seed and --noise-seed "
          "give their own)"),
    # data
    Param("dataset", None, Optional(DatasetName(names.DATASETS)), "dataset",
          "one of {choices} (default: photos, embedded 3x32x32 crops of scikit-image's sample photographs; with "
          "--protocol: digits, the protocols' training set)", "data"),
    Param("data_root", None, Optional(PathName("folder")), "data root",
          "folder holding torchvision data sets (mnist, cifar10, cifar100), or ROOT/<class>/<images> for imagefolder",
          "data"),
    Param("download", False, Flag(), "download", "allow torchvision to download the data set into --data-root", "data"),
    Param("image_index", 0, NONNEG_INT, "image index", "index of the first attacked image", "data"),
    Param("batch_size", 1, POS_INT, "batch size", "images attacked together", "data"),
    Param("batch_draw", "consecutive", Choice(names.BATCH_DRAWS), "batch draw",
          "how a batch's other images are taken: consecutive (images I..I+B-1 from --image-index I), class (image "
          "I and the next B-1 images of its class: a client holding one class) or random (B-1 more drawn at "
          "random, seeded by I)", "data"),
    Param("image_size", None, Optional(Number(names.SSIM_WIN, names.MAX_IMAGE_SIZE, integer=True)), "image size",
          "image side in pixels: the embedded photos are cut at this size (real crops; default 32), image folders "
          f"are resized and centre-cropped to it (default 224); from {names.SSIM_WIN}, SSIM's window, to "
          f"{names.MAX_IMAGE_SIZE}", "data"),
    # output and machine
    Param("device", "auto", DeviceName(DEVICES), "device",
          "one of {choices} (auto: CUDA when present), or cuda:N for GPU N", "output"),
    Param("threads", None, Optional(Cores()), "threads",
          f"CPU threads for torch, or auto (default: auto: every core for victims of at least {DEEP_WEIGHTS:,} "
          f"weights, the ResNets and ViTs, and for attacks that put {PARALLEL_EXAMPLES} or more images through the "
          "victim at each evaluation, restarts times the batch; one thread otherwise, for LeNet-size victims on fewer "
          "images, whose small tensor ops only slow down with more; the Python API's attack makes the same choice)",
          "output"),
    Param("dtype", None, Optional(Choice(DTYPES)), "dtype",
          "one of {choices}: precision of model, data and attack (default: from the recipe, on every device)",
          "output"),
    Param("trace_every", 10, POS_INT, "trace interval", "record PSNR in trace.csv every N steps", "output"),
    # protocol message
    Param("protocol", "", Choice(names.PROTOCOLS, allow_empty=True), "protocol",
          "attack a protocol message instead of one gradient: one of {protocols}", "protocol"),
    Param("protocol_round", 1, Round(), "round", "round t of the attacked message", "protocol", flag="--round"),
    Param("protocol_client", 0, Index(0), "client", "client c whose message is attacked", "protocol", flag="--client"),
    Param("protocol_dir", None, Optional(PathName("folder")), "protocol folder",
          "a `leakattack train` run folder: w^t from its checkpoints (default: re-simulate from the seeds)",
          "protocol"),
    Param("protocol_spec", {}, Table(), "protocol parameters", "", "protocol", flag=NOTHING),
    Param("protocol_act", "tanh", Choice(names.ACTIVATIONS), "activation",
          "activation of the protocol's model, for one that takes an act parameter (leakattack list --model M; "
          "default: tanh; sigmoid does not train)", "protocol", flag="--act"),
    Param("match_space", "sketch", Choice(MATCH_SPACES), "match space",
          "fedsketch-*: match the count-sketch table (sketch) or its PRIVIX un-sketch (unsketched)", "protocol"),
    Param("sketch_known", True, Flag(), "sketch known", "the attacker does not know R_t: it uses another seed",
          "protocol", flag="--sketch-unknown", invert=True),
    # captured message
    Param("message", None, Optional(PathName("file")), "message file",
          "attack a captured message file (leakattack.results.message.write_message) instead of a simulated client: "
          "its sketch, batch size, labels and defense come from the file; give the model with --model and --weights",
          "message"),
    Param("truth", None, Optional(PathName("file")), "truth file",
          "with --message: the client's true images (a tensor (B, C, H, W) in [0, 1], or a dict with 'images' and "
          "optional 'labels'), for the image metrics; without it the run saves the reconstruction unscored",
          "message"),
)

#: protocol parameters (``protocol.json``'s spec), shared by ``train`` and ``run --protocol``; a label's
#: ``{protocol}`` names the protocol given when it reads the setting, else "DP"
#: (:func:`~leakattack.config.run.check_protocol_spec`)
PROTOCOL_PARAMS: tuple[Param, ...] = (
    Param("clients", names.SPEC_DEFAULTS["clients"], POS_INT, "number of clients N", "number of clients N",
          "protocol"),
    # at most as many as --iterations: each is one SGD step of every client, unrolled by the attacker at every
    # evaluation
    Param("local_steps", names.SPEC_DEFAULTS["local_steps"], Number(1, MAX_ITERATIONS, integer=True),
          "local steps K", "local SGD steps K per round", "protocol"),
    # each epoch is at least one local step: more epochs than --local-steps allows steps is a typo, not a plan
    Param("local_epochs", names.SPEC_DEFAULTS["local_epochs"], Number(0, MAX_ITERATIONS, integer=True),
          "local epochs E",
          "local epochs E per round: each a seeded pass over the client's whole shard in mini-batches of "
          "--client-batch (the last one smaller), one SGD step each, so K = E ceil(n_c/B) (0: K steps on one "
          "batch)", "protocol"),
    Param("local_lr", names.SPEC_DEFAULTS["local_lr"], Number(0, low_open=True), "local learning rate",
          "local learning rate eta", "protocol"),
    Param("global_lr", names.SPEC_DEFAULTS["global_lr"], Number(0, low_open=True), "global learning rate",
          "server learning rate eta_global / gamma", "protocol"),
    Param("batch_size", names.SPEC_DEFAULTS["batch_size"], POS_INT, "client batch size",
          "images a client uses per round", "protocol", flag="--client-batch"),
    Param("noniid", names.SPEC_DEFAULTS["noniid"], Flag(), "non-iid",
          "non-iid split: each client holds one or two classes", "protocol"),
    Param("client_fraction", names.SPEC_DEFAULTS["client_fraction"], Optional(Number(0, 1, low_open=True)),
          "client fraction", "fraction of clients sampled per round (default: 0.5 for fedsketch-*, else 1)",
          "protocol"),
    Param("sketch_rows", names.SPEC_DEFAULTS["sketch_rows"], Number(1, 1000, integer=True), "count-sketch rows t",
          "FedSKETCH count-sketch rows t", "protocol"),
    Param("sketch_buckets", names.SPEC_DEFAULTS["sketch_buckets"], POS_INT, "count-sketch buckets m",
          "FedSKETCH buckets m per row", "protocol"),
    Param("dp_epsilon", names.SPEC_DEFAULTS["dp_epsilon"], Number(0, low_open=True), "{protocol} epsilon",
          "sketched-dp: per-step epsilon^; privsgd: epsilon over --dp-rounds rounds", "protocol"),
    Param("dp_delta", names.SPEC_DEFAULTS["dp_delta"], Number(0, 1, low_open=True, high_open=True), "{protocol} delta",
          "sketched-dp: per-step delta^; privsgd: delta over --dp-rounds rounds", "protocol"),
    Param("dp_clip", names.SPEC_DEFAULTS["dp_clip"], Number(0, low_open=True), "{protocol} clip",
          "sketched-dp, privsgd: per-example clip norm = Lipschitz bound l_c (L)", "protocol"),
    Param("dp_rounds", names.SPEC_DEFAULTS["dp_rounds"], POS_INT, "{protocol} rounds T",
          "privsgd: rounds T the (epsilon, delta) guarantee covers (sets sigma)", "protocol"),
    Param("server_opt", names.SPEC_DEFAULTS["server_opt"], Choice(names.SERVER_OPTS), "server optimiser",
          "safl: server optimiser ADA_OPT, one of {choices}", "protocol"),
    Param("server_lr", names.SPEC_DEFAULTS["server_lr"], Optional(Number(0, low_open=True)),
          "server learning rate kappa",
          "safl, sacfl: server step kappa (default: adam/amsgrad 0.01, sgd/sgdm and sacfl 1.0)", "protocol"),
    Param("server_beta1", names.SPEC_DEFAULTS["server_beta1"], Number(0, 1, high_open=True), "server beta1",
          "safl: first-moment decay beta1 (adam, amsgrad, sgdm momentum)", "protocol"),
    Param("server_beta2", names.SPEC_DEFAULTS["server_beta2"], Number(0, 1, high_open=True), "server beta2",
          "safl: second-moment decay beta2 (adam, amsgrad)", "protocol"),
    Param("server_eps", names.SPEC_DEFAULTS["server_eps"], Number(0, low_open=True), "server epsilon",
          "safl: the small constant epsilon of adam/amsgrad", "protocol"),
    Param("second_moment", names.SPEC_DEFAULTS["second_moment"], Choice(names.SECOND_MOMENTS), "second moment",
          "safl: second-moment input, one of {choices}: R^T of the averaged squared sketches (the paper's), "
          "or the square of the de-sketched average", "protocol"),
    Param("clip_threshold", names.SPEC_DEFAULTS["clip_threshold"], Number(0, low_open=True), "clip threshold tau",
          "sacfl: clipping threshold tau on the mean update norm", "protocol"),
    Param("projection_blocks", names.SPEC_DEFAULTS["projection_blocks"], Choice(names.PROJECTION_BLOCKS),
          "projection blocks",
          "compsgd, privsgd: one projection and l1 ball per layer (m_i = ratio d_i) or one global, one of {choices}",
          "protocol"),
    Param("l1_scale", names.SPEC_DEFAULTS["l1_scale"], Number(0, low_open=True), "l1 scale",
          "compsgd, privsgd: radius of the l1 constraint as a multiple of the initial weights' l1 norm", "protocol"),
)


def help_text(p: Param) -> str:
    """The flag's help with its choices filled in and its default stated."""
    choice = p.constraint.inner if isinstance(p.constraint, Optional) else p.constraint
    text = p.help.replace("{choices}", ", ".join(map(str, choice.shown if isinstance(choice, Choice) else [])))
    text = text.replace("{protocols}", ", ".join(names.PROTOCOLS.current()))  # a plugin's too
    text = text.replace("{priors}", ", ".join(names.PRIORS.current()))  # with a plugin's, where it registered some
    if isinstance(p.constraint, Flag) or "default" in text or p.default in (None, {}, ""):
        return text
    return f"{text} (default: {p.default})"


__all__ = ["Param", "RUN_PARAMS", "PROTOCOL_PARAMS", "DEVICES", "DTYPES", "MATCH_SPACES", "NOTHING", "help_text",
           "MAX_ITERATIONS", "MAX_RESTARTS", "MAX_ROUNDS", "ROUNDS", "Round",
           "Duration", "duration_seconds", "DURATION_UNITS", "DEEP_WEIGHTS", "PARALLEL_EXAMPLES"]
