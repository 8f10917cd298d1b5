"""Typed run configuration, validated once at the edge.

Every value a user can set for one attack lives in :class:`RunConfig`; the CLI
and the sweep loader build it and call :meth:`RunConfig.validate`, which turns
a bad value into :class:`ConfigError` carrying one clear sentence.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


class ConfigError(ValueError):
    """A user-facing configuration error: its message is one sentence."""


OPTIMIZERS = ("lbfgs", "adam", "gd")
OBJECTIVES = ("l2", "cosine")
LABEL_MODES = ("idlg", "given", "dlg")
DUMMY_INITS = ("uniform", "gaussian")
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("float64", "float32")


@dataclass
class RunConfig:
    """One attack: which victim, which sketch, which attacker, which data."""

    model: str = "lenet"
    sketch: str = "srht"
    sketch_dim: int | None = None  #: b; wins over sketch_ratio when set
    sketch_ratio: float = 0.5  #: b/d when sketch_dim is not set
    sketch_params: dict = field(default_factory=dict)  #: e.g. {"s": 4} for sparse
    optimizer: str = "lbfgs"
    iterations: int = 4000
    lr: float | None = None  #: None: the optimiser's default (see DEFAULT_LR)
    objective: str = "l2"
    tv: float = 0.0  #: weight of the total-variation prior
    box: bool = False  #: project x onto [0, 1] after every step
    tol: float = 1e-10  #: stop when L_R(x) / ||y||^2 <= tol
    label_mode: str = "idlg"
    dummy_init: str = "gaussian"
    restarts: int = 1  #: independent dummy starts; the one with the lowest L_R is kept
    seed: int = 0  #: master seed: model, sketch and dummy-init seeds derive from it
    model_seed: int | None = None
    sketch_seed: int | None = None
    weight_init: str | None = None  #: None: the model's default (lenet: U(-0.5, 0.5))
    dataset: str | None = None  #: None: photos (3x32x32); digits for 1-channel use
    data_root: str | None = None
    download: bool = False
    image_index: int = 0
    batch_size: int = 1
    device: str = "auto"
    threads: int = 1  #: CPU threads for torch; the attack's small ops run fastest on one (no oversubscription)
    dtype: str = "float64"  #: float32 stalls L-BFGS near L_R/||y||^2 ~ 2e-7 (29 dB on the default attack)
    trace_every: int = 10  #: PSNR is recorded in trace.csv every this many steps
    defense: str = ""  #: defense spec, e.g. "clip:C=1,gaussian:sigma=1e-3@after_sketch"

    # defenses (issue 3)
    delta: float = 1e-5  #: the delta at which epsilon is reported for Gaussian noise
    noise_seed: int | None = None  #: seed of the client's noise generator (default: seed + 3)
    utility: bool = False  #: also train the target under the defense and record utility_acc
    utility_steps: int = 300  #: training steps of the utility run (batch utility_batch, digits train split)
    utility_batch: int = 64
    utility_lr: float = 0.5
    attacker_knows_clip: bool = False  #: the attacker's simulate applies the defense's deterministic clips too

    # protocol attack (issue 5)
    protocol: str = ""  #: "": attack one gradient; else a protocol of targets.protocols (see leakattack.protocol_attack)
    protocol_round: int = 1  #: round t of the attacked message (w^1 = initial weights)
    protocol_client: int = 0  #: client c whose message is attacked
    protocol_dir: str | None = None  #: a `train` run folder (w^t, protocol.json); None: re-simulate from the seeds
    protocol_spec: dict = field(default_factory=dict)  #: protocol parameters (targets.protocols.SPEC_DEFAULTS) without a dir
    protocol_act: str = "tanh"  #: activation of lenet/mlp in the protocol (the sigmoid LeNet does not train)
    match_space: str = "sketch"  #: fedsketch-*: match the count-sketch table or its PRIVIX un-sketch ("unsketched")
    sketch_known: bool = True  #: False: the attacker draws R_t from another seed

    # -- derived ------------------------------------------------------------
    @property
    def model_seed_(self) -> int:
        return self.seed if self.model_seed is None else self.model_seed

    @property
    def sketch_seed_(self) -> int:
        return self.seed + 1 if self.sketch_seed is None else self.sketch_seed

    @property
    def init_seed(self) -> int:
        return self.seed + 2

    @property
    def noise_seed_(self) -> int:
        return self.seed + 3 if self.noise_seed is None else self.noise_seed

    @property
    def lr_(self) -> float:
        return DEFAULT_LR[self.optimizer] if self.lr is None else self.lr

    def sketch_b(self, d: int) -> int:
        """The sketch dimension b for a gradient of length d."""
        if self.sketch == "none":
            return d
        if self.sketch_dim is not None:
            return int(self.sketch_dim)
        from leakattack.sketch import sketch_dim

        return sketch_dim(self.sketch_ratio, d)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "RunConfig":
        """Build from a plain dict; an unknown key is a ConfigError naming it."""
        names = {f.name for f in dataclasses.fields(cls)}
        for key in values:
            if key not in names:
                raise ConfigError(f"unknown run parameter '{key}'")
        return cls(**values)

    def validate(self) -> "RunConfig":
        """Check every value that needs no model or data; raise ConfigError."""
        from leakattack.sketch import list_sketches
        from leakattack.data import list_datasets
        import targets

        _choice("model", self.model, targets.list_models())
        _choice("sketch", self.sketch, list_sketches())
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        _choice("objective", self.objective, OBJECTIVES)
        _choice("label mode", self.label_mode, LABEL_MODES)
        _choice("dummy init", self.dummy_init, DUMMY_INITS)
        _choice("device", self.device, DEVICES)
        _choice("dtype", self.dtype, DTYPES)
        if self.weight_init is not None:
            _choice("weight init", self.weight_init, targets.INITS)
        if self.dataset is not None:
            _choice("dataset", self.dataset, list_datasets())
        if self.sketch_dim is not None and self.sketch_dim <= 0:
            raise ConfigError(f"sketch dimension must be a positive integer, got {self.sketch_dim}")
        if not 0 < self.sketch_ratio <= 1:
            raise ConfigError(f"sketch ratio must lie in (0, 1], got {self.sketch_ratio}")
        if self.iterations <= 0:
            raise ConfigError(f"iterations must be positive, got {self.iterations}")
        if self.lr is not None and not self.lr > 0:
            raise ConfigError(f"learning rate must be positive, got {self.lr}")
        if self.tv < 0:
            raise ConfigError(f"TV weight must be non-negative, got {self.tv}")
        if self.tol < 0:
            raise ConfigError(f"tolerance must be non-negative, got {self.tol}")
        if self.batch_size < 1:
            raise ConfigError(f"batch size must be at least 1, got {self.batch_size}")
        if self.image_index < 0:
            raise ConfigError(f"image index must be non-negative, got {self.image_index}")
        if self.restarts < 1:
            raise ConfigError(f"restarts must be at least 1, got {self.restarts}")
        if self.threads < 1:
            raise ConfigError(f"threads must be at least 1, got {self.threads}")
        if self.trace_every < 1:
            raise ConfigError(f"trace interval must be at least 1, got {self.trace_every}")
        _check_defense(self)
        if self.model == "linreg" and self.label_mode != "given":
            # linreg's target is a real number: there is no sign rule to read it from
            self.label_mode = "given"
        if self.protocol:  # protocol attack (issue 5)
            from targets.protocols import list_protocols

            _choice("protocol", self.protocol, list_protocols())
            _choice("match space", self.match_space, ("sketch", "unsketched"))
            if self.protocol_round < 1:
                raise ConfigError(f"round {self.protocol_round} does not exist: rounds start at 1")
            if self.protocol_client < 0:
                raise ConfigError(f"client {self.protocol_client} does not exist: clients start at 0")
        if self.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise ConfigError("device 'cuda' was asked for but no CUDA device is available")
        return self

    def validate_for(self, d: int) -> None:
        """Checks that need d, the gradient length of the built model."""
        b = self.sketch_b(d)
        if self.sketch != "none" and not 1 <= b <= d:
            raise ConfigError(f"sketch dimension b = {b} must lie in [1, d] with d = {d} for model '{self.model}'")


#: step sizes that work for the defaults (lbfgs: the DLG setting)
DEFAULT_LR = {"lbfgs": 1.0, "adam": 0.1, "gd": 0.01}


def _check_defense(cfg: "RunConfig") -> None:
    """The defense spec and its accounting/utility settings (defenses issue 3)."""
    import defenses

    try:
        defenses.build(cfg.defense)
    except defenses.DefenseError as err:
        raise ConfigError(str(err)) from None
    if not 0 < cfg.delta < 1:
        raise ConfigError(f"delta must lie in (0, 1), got {cfg.delta}")
    if cfg.utility_steps < 1 or cfg.utility_batch < 1:
        raise ConfigError(f"utility steps and batch must be positive, got {cfg.utility_steps} and {cfg.utility_batch}")
    if not cfg.utility_lr > 0:
        raise ConfigError(f"utility learning rate must be positive, got {cfg.utility_lr}")


def _choice(what: str, value, options) -> None:
    if value not in options:
        raise ConfigError(f"unknown {what} '{value}'; choose one of: {', '.join(map(str, options))}")
