"""The run configuration: one typed, frozen dataclass beside the declared parameters.

:class:`RunConfig` has one field per :data:`~leakattack.config.params.RUN_PARAMS`
entry, in its order, with its default (a test checks that the two agree).
:meth:`RunConfig.validate` checks every value against its declared constraint and
raises :class:`ConfigError` with one sentence; checks that need the built
model (b against d) come later through :meth:`RunConfig.validate_for`.
Values derived from others (seeds, the step size) are computed by
:meth:`RunConfig.derived`, never stored.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import targets
from defenses import build as build_defense
from defenses.pruning import Prune
from targets.protocols import list_protocols, protocol_class, unread_settings

from .. import attacks
from ..data import reads_root
from ..errors import SettingWarning, UserError, listed
from ..sketch import check_sketch_params, is_identity, list_sketches, sketch_dim
from . import names
from .params import PROTOCOL_PARAMS, RUN_PARAMS

#: a --delta at or above this gets a one-line warning: an (epsilon, delta) guarantee is weak there whatever epsilon
WEAK_DELTA = 0.1


class ConfigError(UserError):
    """A user-facing configuration error: its message is one sentence."""


def check_value(label: str, constraint, value) -> None:
    """Refuse ``value`` where ``constraint`` does not hold (ConfigError: the constraint's sentence under ``label``)."""
    if not constraint.ok(value):
        raise ConfigError(constraint.error(label, value))


@dataclass(frozen=True, kw_only=True)
class Derived(attacks.Recipe):
    """Values a run derives from its configuration (recorded in config.json): the seeds, the recipe it
    follows and every attacker setting as run (the recipe's fields, ``lr`` resolved to a number)."""

    model_seed: int
    sketch_seed: int
    init_seed: int
    noise_seed: int
    recipe: str


@dataclass(frozen=True)
class RunConfig:
    """One attack: which victim, which sketch and defense, which attacker, which data.

    One field per :data:`~leakattack.config.params.RUN_PARAMS` entry, in its order, with the declared default
    (``tests/config/test_run_config.py`` checks that the two agree).
    """

    # victim
    model: str = "lenet"
    model_params: dict[str, Any] = field(default_factory=dict)
    weights: str | None = None
    bn: str = "auto"
    weight_init: str | None = None
    model_seed: int | None = None
    # sketch and defense
    sketch: str = "srht"
    sketch_dim: int | None = None
    sketch_ratio: float = 0.5
    sketch_params: dict[str, Any] = field(default_factory=dict)
    sketch_seed: int | None = None
    sketch_seed_search: int = 0
    sketch_memory: float | None = None
    defense: str = ""
    delta: float = 1e-05
    noise_seed: int | None = None
    utility: bool = False
    utility_steps: int = 300
    utility_batch: int = 64
    utility_lr: float = 0.5
    attacker_knows_clip: bool = False
    attacker_knows_prune: bool = False
    # attacker
    attack: str = names.DEFAULT_ATTACK
    attack_params: dict[str, Any] = field(default_factory=dict)  #: values of the attack's own ``options``
    recipe: str = "auto"
    optimizer: str | None = None
    iterations: int | None = None
    lr: float | None = None
    objective: str | None = None
    schedule: str | None = None
    signed: bool | None = None
    tv: float | None = None
    surrogate: float | None = None
    priors: list[str] = field(default_factory=list)
    bn_stats: str = "running"
    box: bool | None = None
    tol: float = 1e-10
    stall_window: int = names.STALL_WINDOW
    label_mode: str = "idlg"
    dummy_init: str = "gaussian"
    restarts: int = 1
    prune_restarts: bool = False
    refine: str = "auto"
    time_limit: str | float | None = None
    seed: int = 0
    # data
    dataset: str | None = None
    data_root: str | None = None
    download: bool = False
    image_index: int = 0
    batch_size: int = 1
    batch_draw: str = "consecutive"
    image_size: int | None = None
    # output and machine
    device: str = "auto"
    threads: int | None = None
    dtype: str | None = None
    trace_every: int = 10
    # protocol message
    protocol: str = ""
    protocol_round: int = 1
    protocol_client: int = 0
    protocol_dir: str | None = None
    protocol_spec: dict[str, Any] = field(default_factory=dict)
    protocol_act: str = "tanh"
    match_space: str = "sketch"
    sketch_known: bool = True
    # captured message
    message: str | None = None
    truth: str | None = None
    #: the settings given explicitly (the run flags' names, and ``protocol_spec.NAME`` for a protocol flag), a
    #: value equal to the default included: the checks that refuse or warn about a setting that is not read or
    #: contradicts a stored one read it (:meth:`set_by_user`).  Not part of what a run records: the same
    #: settings run alike however they were given.
    given: frozenset[str] = field(default=frozenset(), compare=False, repr=False, metadata={"recorded": False})

    def validate(self) -> RunConfig:
        """Check every value against its declared constraint; raise ConfigError (one sentence)."""
        for p in RUN_PARAMS:
            v = getattr(self, p.name)
            if not p.constraint.ok(v):
                raise ConfigError(p.constraint.error(p.label, v))
        declared = {p.name: p for p in self.attack_class.options}
        for key, v in self.attack_params.items():
            if key not in declared:
                owners = [n for n in attacks.list_attacks() if key in {p.name for p in attacks.attack_class(n).options}]
                whose = f" (an option of {', '.join(repr(n) for n in owners)})" if owners else ""
                raise ConfigError(f"attack '{self.attack}' takes no parameter '{key}'{whose}")
            if not declared[key].constraint.ok(v):
                raise ConfigError(declared[key].constraint.error(declared[key].label, v))
        check_protocol_spec(self.protocol_spec, partial=True, protocol=self.protocol)
        taken = [k for k in self.model_params if k in targets.RESERVED_MODEL_PARAMS]
        if taken:
            raise ConfigError(f"--model-param {taken[0]}: a model's {taken[0]} is "
                              f"{targets.RESERVED_MODEL_PARAMS[taken[0]]}, not a model parameter")
        if self.protocol and self.message:
            raise ConfigError("--message and --protocol name two different messages: give one of them")
        if not self.protocol:
            given = [flag for flag, v in (("--protocol-dir", self.protocol_dir),
                                          ("--round", self.set_by_user("protocol_round")),
                                          ("--client", self.set_by_user("protocol_client"))) if v]
            if given:
                raise ConfigError(f"{' and '.join(given)} choose{'s' if len(given) == 1 else ''} a protocol's "
                                  "message: give --protocol too (the one that trained the folder)")
            spec = self.spec_given()
            if spec:
                one = len(spec) == 1
                raise ConfigError(f"{', '.join(spec)} set{'s' if one else ''} up a protocol's training and "
                                  f"change{'s' if one else ''} nothing without --protocol: give --protocol too, or "
                                  f"leave {'it' if one else 'them'} out")
            if self.set_by_user("protocol_act"):
                own = self.model in targets.list_models() and "act" in targets.model_params(self.model)
                other = (f", or --model-param act={self.protocol_act} for the activation of model '{self.model}'"
                         if own else f" (model '{self.model}' has no activation parameter)")
                raise ConfigError(f"--act {self.protocol_act} sets the activation of a protocol's model and changes "
                                  f"nothing without --protocol: give --protocol too{other}")
        self._check_protocol_flags()
        if self.protocol and self.protocol_dir:
            protocol_json(self.protocol_dir)
        try:
            pipeline = build_defense(self.defense)
            if not self.protocol or "sketch_params" in protocol_class(self.protocol).reads:  # else: warned unread
                check_sketch_params(self.sketch, self.sketch_params)
        except UserError as err:
            raise ConfigError(str(err)) from None
        settings = self._settings()
        if settings["signed"] and attacks.sees_normalised_loss(settings["optimizer"]):
            whose = "" if self.optimizer is not None else f" (the {self._recipe_name()} recipe's; add --optimizer adam)"
            raise ConfigError("signed gradients need a first-order optimizer (adam or gd), not "
                              f"{settings['optimizer']}{whose}")
        self._warn_unread(pipeline)
        if self.set_by_user("match_space") and not (self.protocol and protocol_class(self.protocol).decodable):
            decodable = [n for n in list_protocols() if protocol_class(n).decodable]
            where = f" for protocol {self.protocol!r}" if self.protocol else " without --protocol"
            warnings.warn(f"--match-space {self.match_space} changes nothing{where}: it chooses between the sketch and "
                          f"the server's un-sketch, which only {' and '.join(decodable)} have", SettingWarning,
                          stacklevel=2)
        if self.set_by_user("batch_draw") and self.batch_size == 1 and not (self.message or self.protocol):
            warnings.warn(f"--batch-draw {self.batch_draw} changes nothing with one image: it chooses how a batch's "
                          "images are drawn", SettingWarning, stacklevel=2)
        steps = self._settings()["iterations"]
        if self.set_by_user("trace_every") and not self.attack_class.closed_form and self.trace_every >= steps:
            warnings.warn(f"--trace-every {self.trace_every} is not below the {steps} iterations: trace.csv records "
                          "the PSNR of step 0 and of the last step only", SettingWarning, stacklevel=2)
        if self.device.startswith("cuda"):
            if not torch.cuda.is_available():
                raise ConfigError(f"device '{self.device}' was asked for but no CUDA device is available")
            index, count = self.device.partition(":")[2], torch.cuda.device_count()
            if index and int(index) >= count:
                raise ConfigError(f"device '{self.device}' was asked for but CUDA has {count} device"
                                  f"{'s' if count != 1 else ''} here (cuda:0 to cuda:{count - 1})")
        return self

    def _warn_unread(self, pipeline) -> None:
        """One warning line for each client setting the run does not read: the noise seed and delta without the
        noise they are for (``pipeline``: the defense built from :attr:`defense`), --download for an embedded data
        set (a message file fixes its own defense and data)."""
        if self.protocol:  # its noise is drawn from its shared seed by round and client, at its own --dp-delta
            unread = [f"{flag} {v:g}" for flag, key, v in (("--noise-seed", "noise_seed", self.noise_seed),
                                                             ("--delta", "delta", self.delta))
                      if self.set_by_user(key) and v is not None]
            if unread:
                warnings.warn(f"{' and '.join(unread)} change{'s' if len(unread) == 1 else ''} nothing with "
                              "--protocol: a protocol's own noise is drawn from its shared seed (--seed) by round and "
                              "client, and its epsilon is at --dp-delta", SettingWarning, stacklevel=3)
            return
        if self.message:  # the file's noise is in the message; --delta is read where its defense adds Gaussian noise
            if self.set_by_user("noise_seed") and not self.utility:
                warnings.warn(f"--noise-seed {self.noise_seed} changes nothing with --message: the noise of the file's "
                              "defense is in the message it holds", SettingWarning, stacklevel=3)
            return
        # a clip or a pruning draws no random numbers; --utility draws its batches from the noise seed too
        if self.set_by_user("noise_seed") and not self.utility and all(
                t.bounds_norm or isinstance(t, Prune) for t in pipeline.steps):
            warnings.warn(f"--noise-seed {self.noise_seed} changes nothing: the defense draws no noise",
                          SettingWarning, stacklevel=3)
        bound = pipeline.noise_bound(1.0)
        if self.set_by_user("delta") and bound is None:
            warnings.warn(f"--delta {self.delta:g} changes nothing: it is the delta of the epsilon of Gaussian noise, "
                          "and the defense adds none", SettingWarning, stacklevel=3)
        elif self.set_by_user("delta") and bound.sensitivity is None:  # epsilon is infinite at every delta
            warnings.warn(f"--delta {self.delta:g} changes nothing: the defense's Gaussian noise has no bound on what "
                          f"it is added to ({bound.reason}), so its epsilon is infinite at any delta", SettingWarning,
                          stacklevel=3)
        elif self.delta >= WEAK_DELTA:
            warnings.warn(f"--delta {self.delta:g}: an (epsilon, delta) guarantee allows a release that gives the data "
                          "away outright with probability delta, so the epsilon at this delta (near 0 as delta nears "
                          "1) says little; delta is taken far below one over the number of examples (1e-05 by "
                          "default)", SettingWarning, stacklevel=3)
        remaps = self._reparametrising()
        if remaps and not self.attack_class.closed_form:  # the images are a generator's output (dip)
            unread = ([f"--dummy-init {self.dummy_init}"] if self.set_by_user("dummy_init") else []) + (
                ["--box"] if self.box else [])
            if unread:
                warnings.warn(f"{' and '.join(unread)} change{'s' if len(unread) == 1 else ''} nothing with --prior "
                              f"{remaps[0]}: the images are its generator's output, drawn from its own seeded weights "
                              "and kept in [0, 1] by it", SettingWarning, stacklevel=3)
        if self.download and not reads_root(self.dataset or "photos"):
            warnings.warn(f"--download is not read: the embedded data set {self.dataset or 'photos'} reads no files",
                          SettingWarning, stacklevel=3)
        elif self.download and self.dataset == "imagefolder":
            warnings.warn("--download is not read: an image folder is read from --data-root as it is, never "
                          "downloaded", SettingWarning, stacklevel=3)

    def spec_given(self) -> list[str]:
        """The protocol flags given (``--clients 5``): :attr:`given`'s ``protocol_spec.NAME`` entries, or, for a
        configuration built in Python, the protocol settings away from their defaults."""
        out = []
        for p in PROTOCOL_PARAMS:
            if p.name in self.protocol_spec and p.option is not None and (
                    f"protocol_spec.{p.name}" in self.given or self.protocol_spec[p.name] != p.default):
                v = self.protocol_spec[p.name]
                out.append(p.option if isinstance(v, bool) or v is None else f"{p.option} {v}")
        return out

    def _check_protocol_flags(self) -> None:
        """Refuse the sketch and model flags a protocol's message does not read, a match space it lacks, and a model no
        protocol trains (a regression)."""
        if self.match_space != "sketch":
            decodable = [n for n in list_protocols() if protocol_class(n).decodable]
            if not self.protocol:
                raise ConfigError(f"--match-space {self.match_space} chooses how a protocol's message is matched: "
                                  f"give --protocol too (one of {', '.join(decodable)})")
            if not protocol_class(self.protocol).decodable:
                raise ConfigError(f"--match-space {self.match_space} matches the server's un-sketch of a message, "
                                  f"and only {' and '.join(decodable)} un-sketch theirs (not protocol "
                                  f"'{self.protocol}'): leave it out")
        if not self.protocol:
            return
        if targets.task_of(self.model) != "classification":  # the rule of `leakattack train`, which trains no other
            trainable = [m for m in targets.list_models() if targets.task_of(m) == "classification"]
            raise ConfigError(f"model '{self.model}' cannot be trained by a protocol here (it is a regression); "
                              f"choose one of: {', '.join(trainable)}")
        if self.model_params:
            act = self.model_params.get("act")
            instead = f": give --act {act} for its activation and leave --model-param out" if act is not None else \
                ": leave it out"
            raise ConfigError(f"--model-param {', '.join(f'{k}={v}' for k, v in self.model_params.items())} changes "
                              "nothing for a protocol's message, whose model is built from --model, --act and "
                              f"--weight-init alone{instead}")
        if self.utility:
            raise ConfigError(f"--utility trains under the run's own --sketch and --defense, which protocol "
                              f"'{self.protocol}' does not send: leakattack train --protocol {self.protocol} records "
                              "the protocol's test accuracy each round (train.jsonl)")
        given = [flag for flag, v in (("--sketch-dim", self.sketch_dim), ("--sketch-seed", self.sketch_seed),
                                      ("--model-seed", self.model_seed), ("--weights", self.weights))
                 if v is not None]
        if not given:
            return
        flags, one = ", ".join(given), len(given) == 1
        if self.protocol_dir:
            raise ConfigError(f"{flags} contradict{'s' if one else ''} --protocol-dir '{self.protocol_dir}', whose "
                              "protocol.json fixes the model, its seed and the sketch, and whose checkpoints hold "
                              f"the weights w^t of each round: leave {'it' if one else 'them'} out")
        raise ConfigError(f"{flags} change{'s' if one else ''} nothing for a protocol's message, whose model and "
                          "round seeds come from --seed, whose sketch size comes from --sketch-ratio and whose "
                          "weights w^t come from re-simulating the rounds before t (or from the checkpoints of "
                          f"--protocol-dir): leave {'it' if one else 'them'} out")

    def validate_for(self, d: int) -> None:
        """Checks that need d, the gradient length of the built model."""
        b = self.sketch_b(d)
        if not is_identity(self.sketch) and not 1 <= b <= d:
            how = "" if self.sketch_dim is not None else f" (the sketch ratio {self.sketch_ratio:g} times d)"
            least = "" if self.sketch_dim is not None else \
                f": the ratio must be at least 1/(2d) = {0.5 / d:.3g}, which rounds to b = 1"
            raise ConfigError(f"sketch dimension b = {b}{how} must lie in [1, d] with d = {d} for model "
                              f"'{self.model}'{least}")
        try:
            check_sketch_params(self.sketch, self.sketch_params, b)
        except UserError as err:
            raise ConfigError(str(err)) from None

    def sketch_b(self, d: int) -> int:
        """The sketch dimension b for a gradient of length d."""
        if is_identity(self.sketch):
            return d
        if self.sketch_dim is not None:
            return int(self.sketch_dim)
        return sketch_dim(self.sketch_ratio, d)

    def _input_shape(self) -> tuple:
        """The shape of one example of the data set (its images' size), for models built on the meta device."""
        from ..data import input_shape

        return input_shape(self.dataset or "photos", self.image_size) or (3, 32, 32)

    def _recipe_name(self) -> str:
        if self.recipe != "auto":
            return self.recipe
        # a model without a recipe of its own takes one by its units, built for the data set's images
        model, params = self._built_model()
        try:
            return attacks.model_recipe(self.model, targets.recipe_of(model, in_shape=self._input_shape(), **params))
        except UserError as err:  # a user class's leakattack_recipe that names no recipe
            raise ConfigError(str(err)) from None

    def _batch_statistics(self) -> bool:
        """Whether the victim's BatchNorm normalises by the batch's own statistics (train mode, a batch under
        ``--bn auto``), as far as the model built on the meta device tells."""
        if targets.resolve_bn_mode(self.bn, self.batch_size) != "train":
            return False
        model, params = self._built_model()
        return targets.has_batchnorm_of(model, in_shape=self._input_shape(), **params)

    def _built_model(self) -> tuple[str, dict]:
        """The model the victim is built as and its parameters: ``--model`` with ``--model-param``, or a protocol's
        model with ``--act`` (where the model has an activation), or with the stored run's model and activation
        under ``--protocol-dir``, so that ``--recipe auto`` chooses for the model the attack meets."""
        if not self.protocol:
            return self.model, dict(self.model_params)
        model, act = self.model, self.protocol_act
        if self.protocol_dir:  # an unreadable protocol.json is the run's to refuse (leakattack.training)
            try:
                stored = json.loads((Path(self.protocol_dir) / "protocol.json").read_text())["model"]
                model, act = str(stored["model"]), stored.get("act", act)
            except (OSError, ValueError, KeyError, TypeError):
                pass
        return model, ({"act": act} if act and "act" in targets.model_params(model) else {})

    def _settings(self) -> dict:
        """The attacker settings: the ones given, the recipe's for the rest, on every device (a GPU included: the
        ``dlg`` recipe's L-BFGS stalls in float32, docs/attack.md#why-float64-by-default)."""
        recipe = attacks.get_recipe(self._recipe_name())
        out = {name: getattr(recipe, name) if getattr(self, name) is None else getattr(self, name)
               for name in attacks.RECIPE_FIELDS}
        if self.signed is None and attacks.sees_normalised_loss(out["optimizer"]):
            out["signed"] = False  # a recipe's signed steps do not carry over to an L-BFGS the user asked for
        if self.tv is None and (recipe.batch_statistics_tv or recipe.trained_tv is not None):
            # weights loaded from a file: a trained victim; the model is built on the meta device only for a batch
            # in train mode (_batch_statistics)
            out["tv"] = recipe.tv_for(self.batch_size, self._batch_statistics(), trained=self.weights is not None)
        for text in self.priors:
            name, weight = attacks.parse_prior(text)
            # --prior tv:W overrides --tv and the recipe; a bare --prior tv keeps their weight where it is positive
            # (the ig recipe's 0.02 and up), and adds TV at the prior's default weight where they have none
            keeps = ":" not in text and out["tv"] > 0
            if name == "tv" and not keeps:
                out["tv"] = weight
        if self._reparametrising():  # the images are a generator's output, which it keeps in [0, 1]: no box
            out["box"] = False
        # the recipe's time limit belongs to its iteration budget: a budget or a time limit given replaces both
        given = self.iterations is not None or self.time_limit is not None
        out["time_limit"] = self.time_limit if given else recipe.time_limit
        return out

    def _reparametrising(self) -> list[str]:
        """The priors on (weight > 0) that re-parametrise the images rather than add a term (``dip``)."""
        return [n for n, w in self.other_priors().items() if w > 0 and attacks.penalty_label(n) is None]

    def other_priors(self) -> dict:
        """The priors of ``--prior`` other than ``tv`` (whose weight is the ``tv`` setting): name -> weight, the last
        mention of a name winning."""
        return {name: w for name, w in map(attacks.parse_prior, self.priors) if name != "tv"}

    def resolved(self) -> RunConfig:
        """This configuration with every recipe setting written out and ``recipe`` back to auto.

        Two configurations that run the same attack resolve alike: a sweep keys its
        points on this, so naming a recipe's own value changes nothing (``--prior tv:W``
        resolves to ``tv`` W; the other priors to sorted NAME:WEIGHT entries).
        """
        priors = [f"{name}:{w!r}" for name, w in sorted(self.other_priors().items())]
        return dataclasses.replace(self, recipe="auto", priors=priors, attack_params=self.attack_options(),
                                   **self._settings())

    def _step_size(self, optimizer: str) -> float:
        """The given --lr, else the recipe's step when its optimiser runs, else the optimiser's default."""
        if self.lr is not None:
            return self.lr
        return attacks.get_recipe(self._recipe_name()).step_size(optimizer)

    def derived(self) -> Derived:
        """The seeds, the recipe and every attacker setting this configuration runs with."""
        settings = self._settings()
        return Derived(
            model_seed=self.seed if self.model_seed is None else self.model_seed,
            sketch_seed=self.seed + 1 if self.sketch_seed is None else self.sketch_seed,
            init_seed=self.seed + 2,
            noise_seed=self.seed + 3 if self.noise_seed is None else self.noise_seed,
            lr=self._step_size(settings["optimizer"]),
            recipe=self._recipe_name(), **settings,
        )

    @property
    def attack_class(self) -> type[attacks.Attack]:
        """The configured attack's class, whose capabilities the run asks (``closed_form``, ``reads_labels``)."""
        return attacks.attack_class(self.attack)

    def attack_options(self) -> dict[str, Any]:
        """The keyword arguments of the attack's own ``options``: the values given, the declared defaults for the
        rest."""
        return {p.name: self.attack_params.get(p.name, p.default) for p in self.attack_class.options}

    def unused_options(self) -> list[str]:
        """The flags set away from their defaults that the configured attack does not read: the settings other
        attacks own (gradient matching's under a closed-form attack), and ``--labels dlg`` (soft labels optimised
        with x), which a closed-form attack replaces by the labels it recovers."""
        return [flag for flag, _ in self._unused()]

    def unused_fields(self) -> list[str]:
        """:meth:`unused_options` in the words of Python: the fields of this configuration (``label_mode='dlg'``)."""
        return [field for _, field in self._unused()]

    def _unused(self) -> list[tuple[str, str]]:
        """(flag, field) of each setting :meth:`unused_options` names."""
        cls = self.attack_class
        others = {n for name in attacks.list_attacks() for n in attacks.attack_class(name).settings}
        others -= set(cls.settings)
        if not cls.closed_form:  # an optimising attack is passed gradient matching's settings (experiment.attack_of)
            others -= set(attacks.attack_class(attacks.DEFAULT_ATTACK).settings)
        out = [(opt, p.name) for p in RUN_PARAMS
               if p.name in others and getattr(self, p.name) != p.default and (opt := p.option) is not None]
        return out + ([("--labels dlg", "label_mode='dlg'")] if cls.closed_form and self.label_mode == "dlg" else [])

    def unused_note(self, python: bool = False) -> str | None:
        """One sentence naming the settings given that the configured attack does not read (:meth:`unused_options`;
        their fields where ``python``), or None."""
        unused = self.unused_fields() if python else self.unused_options()
        if not unused:
            return None
        how = " solves in closed form and" if self.attack_class.closed_form else ""
        one = len(unused) == 1
        said = (f"{listed(unused)} change{'s' if one else ''} nothing for the {self.attack} attack, which{how} does "
                f"not read {'it' if one else 'them'}")
        if self.attack_class.closed_form and self.label_mode == "dlg":  # it reads labels, but never optimises them
            idlg, given = ("label_mode='idlg'", "label_mode='given'") if python else ("--labels idlg", "--labels given")
            said += f"; it optimises no labels and reads them from the message as the default {idlg} does ({given} " \
                    "grants them)"
        return said

    @property
    def label_source(self) -> str:
        """Where the attack's labels come from: given, idlg (recovered from the message) or dlg (optimised)."""
        if self.labels_given:
            return "given"
        return "idlg" if self.attack_class.closed_form else self.label_mode

    @property
    def labels_given(self) -> bool:
        """The attacker is granted the labels: asked for, or the victim is a regression (no sign rule)."""
        return self.label_mode == "given" or targets.task_of(self.model) == "regression"

    def set_by_user(self, key: str) -> bool:
        """Whether setting ``key`` was given explicitly (:attr:`given`, at any value) or differs from its default
        (a configuration built in Python, whose defaults cannot be told from values given equal to them)."""
        return key in self.given or getattr(self, key) != RUN_DEFAULTS[key]

    def to_dict(self) -> dict:
        """Every recorded field, but ``attack_params`` only when it holds something (attacks without options record
        what they always did)."""
        out = copy.deepcopy({f.name: getattr(self, f.name) for f in recorded_fields()})
        if not out["attack_params"]:
            del out["attack_params"]
        return out

    @classmethod
    def from_dict(cls, values: dict) -> RunConfig:
        """Build from a plain dict, whose keys may also name attack options (gathered into ``attack_params``);
        an unknown key is a ConfigError naming it.  ``threads = "auto"`` is the default choice, as ``--threads
        auto`` is."""
        known, options = {f.name for f in recorded_fields()}, attack_option_names()
        values, extra = dict(values), {}
        threads = values.get("threads")
        if isinstance(threads, str) and threads.strip().lower() == "auto":  # as --threads auto: the run's own choice
            values["threads"] = None
        for key in list(values):
            if key not in known:
                if key not in options:
                    raise ConfigError(f"unknown run parameter '{key}'")
                extra[key] = values.pop(key)
        if extra:
            values["attack_params"] = {**values.get("attack_params", {}), **extra}
        return cls(**values)


#: every run setting's declared default (the dataclass's, ``tests/config/test_run_config.py`` checks)
RUN_DEFAULTS = {p.name: p.default for p in RUN_PARAMS}


def recorded_fields() -> list[dataclasses.Field]:
    """RunConfig's fields that a run records (every one but :attr:`RunConfig.given`), one per declared run parameter."""
    return [f for f in dataclasses.fields(RunConfig) if f.metadata.get("recorded", True)]


def attack_option_names() -> set[str]:
    """The names of the options every registered attack declares (keys a sweep or a config dict may use)."""
    return {p.name for n in attacks.list_attacks() for p in attacks.attack_class(n).options}


def protocol_label(p, protocol: str = "") -> str:
    """How errors name protocol parameter ``p``: its label, with ``{protocol}`` the protocol given when that protocol
    reads the setting (``privsgd delta``), else ``DP`` (``DP delta``)."""
    reads = bool(protocol) and p.name in protocol_class(protocol).reads
    return p.label.replace("{protocol}", protocol if reads else "DP")


def check_protocol_spec(spec: dict, partial: bool = False, protocol: str = "") -> None:
    """Every protocol value against its declared constraint; unknown keys refused.  ``protocol``: the protocol the
    spec is for, which errors about its own settings name."""
    declared = {p.name: p for p in PROTOCOL_PARAMS}
    for key, v in spec.items():
        if key not in declared:
            if key in ("seed", "sketch", "sketch_ratio", "sketch_params"):
                continue
            raise ConfigError(f"unknown protocol parameter '{key}'")
        p = declared[key]
        if not p.constraint.ok(v):
            raise ConfigError(p.constraint.error(protocol_label(p, protocol), v))
    if not partial:
        missing = [k for k in declared if k not in spec]
        if missing:
            raise ConfigError(f"protocol parameter '{missing[0]}' is missing")


#: the server optimiser's settings each optimiser leaves unused: sgd keeps no moment, sgdm a first one alone
SERVER_OPT_UNUSED = {"sgd": ("server_beta1", "server_beta2", "server_eps", "second_moment"),
                     "sgdm": ("server_beta2", "server_eps", "second_moment")}


def warn_unread(name: str, given, spec: dict | None = None) -> None:
    """One warning naming the settings among ``given`` (spec names a user set) that protocol ``name`` does not
    read, and one naming those its server optimiser (``spec``'s ``server_opt``) leaves unused."""
    unread = unread_settings(protocol_class(name), given, spec)
    if unread:
        flags = ", ".join("--sketch-param" if k == "sketch_params" else "--" + k.replace("_", "-") for k in unread)
        one = len(unread) == 1
        warnings.warn(f"{flags} change{'s' if one else ''} nothing for protocol '{name}', which does not read "
                      f"{'it' if one else 'them'} (`leakattack train --help` says which protocols do)", SettingWarning,
                      stacklevel=3)
    opt = (spec or {}).get("server_opt")
    idle = [k for k in SERVER_OPT_UNUSED.get(str(opt), ()) if k in given and k not in unread]
    if idle:
        one = len(idle) == 1
        warnings.warn(f"{', '.join('--' + k.replace('_', '-') for k in idle)} change{'s' if one else ''} nothing "
                      f"with --server-opt {opt}, which keeps {'no moment' if opt == 'sgd' else 'a first moment alone'}",
                      SettingWarning, stacklevel=3)


def protocol_json(folder: str | Path) -> Path:
    """The protocol.json of the `leakattack train` run folder ``folder``; ConfigError, one sentence, where the folder
    does not exist, is a file, or holds no protocol.json (``run --protocol-dir`` and the stored protocol's reader
    say the same)."""
    path = Path(folder)
    if not path.exists():
        raise ConfigError(f"protocol folder '{folder}' does not exist (write one with `leakattack train`)")
    if not path.is_dir():
        raise ConfigError(f"protocol folder '{folder}' is a file, not a folder: give the `leakattack train` run "
                          "folder that holds protocol.json")
    if not (path / "protocol.json").is_file():
        raise ConfigError(f"protocol folder '{folder}' has no protocol.json (write one with `leakattack train`)")
    return path / "protocol.json"


def validate_protocol(name: str, spec: dict, d: int | None = None) -> None:
    """A protocol's spec, with the checks its capabilities need (the sketch for sketched ones)."""
    cls = protocol_class(name)
    check_protocol_spec(spec, protocol=name)
    if not 0 < spec["sketch_ratio"] <= 1:
        raise ConfigError(f"sketch ratio must lie in (0, 1], got {spec['sketch_ratio']}")
    if d is not None and spec["sketch_buckets"] > d:
        raise ConfigError(f"count-sketch buckets m = {spec['sketch_buckets']} exceed d = {d}: such a table "
                          "compresses nothing")
    problem = cls.spec_error(spec)
    if problem:
        raise ConfigError(problem)
    if cls.uses_sketch:
        if spec["sketch"] not in list_sketches():
            raise ConfigError(f"unknown sketch '{spec['sketch']}'; choose one of: {', '.join(list_sketches())}")
        if d is not None and not is_identity(spec["sketch"]) and sketch_dim(spec["sketch_ratio"], d) < 1:
            raise ConfigError(f"sketch ratio {spec['sketch_ratio']} gives b < 1 for d = {d}")


__all__ = ["ConfigError", "Derived", "RunConfig", "RUN_DEFAULTS", "attack_option_names", "check_value",
           "check_protocol_spec", "protocol_json", "protocol_label", "validate_protocol", "warn_unread"]
