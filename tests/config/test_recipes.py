"""Attack recipes: each victim's default attacker settings, and how given settings override them."""

from __future__ import annotations

import pytest
import torch

import targets
from leakattack.attacks import RECIPE_FIELDS, get_recipe, list_recipes, recipe_options
from leakattack.config import ConfigError, RunConfig
from leakattack.errors import UserError
from leakattack.sweep.plan import point_key


def test_smooth_victims_get_dlg_and_relu_batchnorm_ones_ig():
    assert set(list_recipes()) == {"dlg", "ig"}
    for name in ("lenet", "mlp", "logreg", "linreg", "vit_small"):
        assert targets.recipe_of(name) == "dlg"
    for name in ("resnet18", "resnet20", "resnet50", "vit_b_16"):
        assert targets.recipe_of(name) == "ig"


def test_the_recipe_fills_what_is_not_given():
    s = RunConfig(model="resnet18", device="cpu").derived()
    ig = get_recipe("ig")
    assert (s.recipe, s.optimizer, s.objective, s.schedule, s.signed, s.box, s.dtype) == \
        ("ig", "adam", "cosine", "step", True, True, "float32")
    assert s.tv == ig.tv and s.iterations == ig.iterations and s.lr == ig.lr == 0.025
    lenet = RunConfig(device="cpu").derived()
    assert (lenet.optimizer, lenet.objective, lenet.dtype, lenet.box, lenet.signed) == \
        ("lbfgs", "l2", "float64", False, False)


def test_ig_takes_its_batch_statistics_tv_for_a_batch_batchnorm_normalises_by_its_own_statistics():
    """A batch of four or more under --bn auto (train mode) on a BatchNorm victim gets a heavier TV weight, a batch
    of eight or more a heavier one still; one image, a batch of two, eval mode, a victim without BatchNorm and a
    weight given keep theirs."""
    ig = get_recipe("ig")
    four, eight = ig.tv_for(4, True), ig.tv_for(8, True)
    assert ig.tv < four < eight and ig.tv_for(7, True) == four and ig.tv_for(64, True) == eight
    assert ig.tv_for(3, True) == ig.tv_for(8, False) == ig.tv
    tv = [RunConfig(device="cpu", **kw).derived().tv for kw in [
        dict(model="resnet20"), dict(model="resnet20", batch_size=4), dict(model="resnet20", batch_size=8, bn="train"),
        dict(model="resnet20", batch_size=2), dict(model="resnet20", bn="train"),
        dict(model="resnet20", batch_size=4, bn="eval"), dict(model="vit_b_16", batch_size=4),
        dict(model="resnet20", batch_size=4, tv=0.05), dict(model="resnet20", batch_size=8, priors=["tv:0.01"])]]
    assert tv == [ig.tv, four, eight, ig.tv, ig.tv, ig.tv, ig.tv, 0.05, 0.01]
    assert targets.has_batchnorm_of("resnet20") and not targets.has_batchnorm_of("vit_b_16")


def test_ig_takes_its_trained_tv_for_one_image_at_weights_the_user_loaded():
    """--weights (a trained victim) with one image gets ig's trained_tv; a batch, a weight given, a bare --prior tv
    (which keeps the run's weight) and the dlg recipe behave as without weights, and so does the Python API."""
    ig = get_recipe("ig")
    assert ig.trained_tv is not None and ig.trained_tv > ig.tv
    assert ig.tv_for(1, False, trained=True) == ig.tv_for(1, True, trained=True) == ig.trained_tv
    assert ig.tv_for(2, False, trained=True) == ig.tv and ig.tv_for(8, True, trained=True) == ig.tv_for(8, True)
    w = "w.pt"  # derived() reads no file
    tv = [RunConfig(device="cpu", **kw).derived().tv for kw in [
        dict(model="resnet20", weights=w), dict(model="resnet20", weights=w, bn="train"),
        dict(model="resnet20", weights=w, priors=["tv"]), dict(model="resnet20", weights=w, batch_size=2),
        dict(model="resnet20", weights=w, batch_size=8), dict(model="resnet20", weights=w, tv=0.05),
        dict(model="resnet20", weights=w, priors=["tv:1e-3"]), dict(model="lenet", weights=w)]]
    assert tv == [ig.trained_tv, ig.trained_tv, ig.trained_tv, ig.tv, ig.tv_for(8, True), 0.05, 1e-3, 0.0]
    assert recipe_options("ig", trained=True)["priors"] == {"tv": ig.trained_tv}
    assert recipe_options("ig", batch_size=2, trained=True)["priors"] == recipe_options("ig")["priors"] == \
        {"tv": ig.tv}
    with pytest.raises(UserError, match="trained must be True or False"):
        recipe_options("ig", trained="yes")


def test_a_bare_tv_prior_keeps_the_tv_weight_the_run_has_and_adds_the_default_where_it_has_none():
    """``--prior tv`` without a weight on the ig recipe keeps its 0.02 (the prior's default, 1e-4, is 200 times less
    TV than the recipe's); a weight given wins; on dlg, whose TV is 0, it adds the prior's default."""
    ig, default = get_recipe("ig"), 1e-4
    tv = [RunConfig(device="cpu", **kw).derived().tv for kw in [
        dict(model="resnet20", priors=["tv"]), dict(model="resnet20", batch_size=8, priors=["tv"]),
        dict(model="resnet20", tv=0.05, priors=["tv"]), dict(model="resnet20", priors=["tv:1e-3"]),
        dict(model="lenet", priors=["tv"]), dict(model="lenet", tv=0.0, priors=["tv"])]]
    assert tv == [ig.tv, ig.tv_for(8, True), 0.05, 1e-3, default, default]


def test_a_gpu_runs_each_recipe_in_its_own_precision(monkeypatch):
    """On a GPU the dlg recipe stays float64: in float32 its L-BFGS stalls (35.4 dB on an H200 against 200 dB)."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    for device in ("cuda", "auto"):
        assert RunConfig(model="lenet", device=device).derived().dtype == "float64"
        assert RunConfig(model="resnet18", device=device).derived().dtype == "float32"
        assert RunConfig(model="lenet", device=device, dtype="float32").derived().dtype == "float32"


def test_given_settings_win_and_recipe_can_be_named():
    s = RunConfig(model="resnet18", objective="l2", box=False, iterations=7, dtype="float64", device="cpu").derived()
    assert (s.objective, s.box, s.iterations, s.dtype, s.optimizer) == ("l2", False, 7, "float64", "adam")
    s = RunConfig(model="lenet", recipe="ig", device="cpu").derived()
    assert (s.recipe, s.optimizer, s.objective) == ("ig", "adam", "cosine")


def test_an_lbfgs_asked_for_drops_the_recipes_signed_steps_but_an_explicit_sign_is_refused():
    assert RunConfig(model="resnet18", optimizer="lbfgs", device="cpu").validate().derived().signed is False
    with pytest.raises(ConfigError, match="signed"):
        RunConfig(model="resnet18", optimizer="lbfgs", signed=True, device="cpu").validate()


def test_resolved_configs_key_sweep_points_alike():
    """Naming a recipe's own value is the same point; the resolved form leaves nothing to the recipe."""
    plain = RunConfig(model="resnet18")
    explicit = RunConfig(model="resnet18", recipe="ig", objective="cosine", box=True)
    assert point_key(plain.resolved().to_dict()) == point_key(explicit.resolved().to_dict())
    assert point_key(RunConfig().resolved().to_dict()) == point_key(RunConfig(optimizer="lbfgs").resolved().to_dict())
    other = RunConfig(model="resnet18", objective="l2")
    assert point_key(other.resolved().to_dict()) != point_key(plain.resolved().to_dict())
    r = plain.resolved()
    assert r.recipe == "auto" and all(getattr(r, f) is not None for f in RECIPE_FIELDS)


def test_the_cli_has_on_and_off_for_recipe_flags(tmp_path):
    from leakattack.cli import build_parser
    from leakattack.config.arguments import config_from_args

    parser = build_parser()
    a = parser.parse_args(["run", "--model", "resnet18", "--no-box"])
    assert config_from_args(a).box is False
    a = parser.parse_args(["run", "--model", "resnet18"])
    assert config_from_args(a).box is None


def test_a_user_class_names_its_recipe_and_an_unknown_one_is_one_sentence(tmp_path):
    net = tmp_path / "nets.py"
    net.write_text("import torch.nn as nn\n\n"
                   "class Deep(nn.Module):\n    leakattack_recipe = 'ig'\n"
                   "    def __init__(self, num_classes=10):\n        super().__init__()\n"
                   "        self.fc = nn.Linear(3 * 32 * 32, num_classes)\n"
                   "    def forward(self, x):\n        return self.fc(x.flatten(1))\n\n"
                   "class Odd(Deep):\n    leakattack_recipe = 'fast'\n")
    assert RunConfig(model=f"{net}:Deep", device="cpu").derived().recipe == "ig"
    with pytest.raises(ConfigError, match="names the attack recipe 'fast'; choose one of: dlg, ig"):
        RunConfig(model=f"{net}:Odd", device="cpu").validate()


def test_the_ig_budget_is_breachings_steps_or_its_time_limit_and_a_given_budget_replaces_both():
    ig = get_recipe("ig")
    assert (ig.iterations, ig.time_limit) == (24000, 480.0) and get_recipe("dlg").time_limit is None
    default = RunConfig(model="resnet18", device="cpu")
    assert (default.derived().iterations, default.derived().time_limit) == (24000, 480.0)
    assert default.resolved().time_limit == 480.0 and default.resolved().resolved() == default.resolved()
    assert RunConfig(model="resnet18", iterations=300, device="cpu").derived().time_limit is None
    assert RunConfig(model="resnet18", time_limit="2m", device="cpu").derived().time_limit == "2m"
    assert RunConfig(model="lenet", device="cpu").derived().time_limit is None


def test_the_attack_of_a_default_deep_run_stops_at_the_recipes_time_limit():
    from leakattack.experiment import attack_of
    assert attack_of(RunConfig(model="resnet18")).time_limit == 480.0
    assert attack_of(RunConfig(model="resnet18", iterations=50)).time_limit is None
    assert attack_of(RunConfig(model="resnet18", time_limit="90s")).time_limit == 90.0
    assert attack_of(RunConfig(model="lenet")).time_limit is None


def test_the_relu_surrogate_reaches_the_attack_from_the_recipe_or_the_flag():
    from leakattack.cli import build_parser
    from leakattack.config.arguments import config_from_args
    from leakattack.experiment import attack_of

    ig, dlg = get_recipe("ig"), get_recipe("dlg")
    assert dlg.surrogate == 0.0  # the smooth victims' recipe has no ReLU to stand in for
    assert attack_of(RunConfig(model="resnet18", device="cpu")).surrogate == ig.surrogate
    a = build_parser().parse_args(["run", "--model", "resnet18", "--relu-surrogate", "0.3"])
    cfg = config_from_args(a)
    assert cfg.surrogate == 0.3 and attack_of(cfg).surrogate == 0.3
    assert RunConfig(model="resnet18", surrogate=0.3, device="cpu").derived().surrogate == 0.3
    with pytest.raises(ConfigError, match="ReLU surrogate"):
        RunConfig(model="resnet18", surrogate=-1.0).validate()


def test_prune_restarts_reaches_the_attack_and_warns_with_one_start():
    from leakattack.cli import build_parser
    from leakattack.config.arguments import config_from_args
    from leakattack.errors import SettingWarning
    from leakattack.experiment import attack_of, prepare

    assert attack_of(RunConfig(model="lenet", device="cpu")).prune_restarts is False
    cfg = config_from_args(build_parser().parse_args(["run", "--restarts", "4", "--prune-restarts"]))
    assert cfg.prune_restarts and attack_of(cfg).prune_restarts and attack_of(cfg).restarts == 4
    with pytest.warns(SettingWarning, match="--prune-restarts changes nothing with one start"):
        prepare(RunConfig(model="lenet", prune_restarts=True, device="cpu"))


@pytest.mark.parametrize("settings,said", [
    (dict(data_root="/tmp"), "--data-root is not read: the embedded data set photos reads no files"),
    (dict(bn="train"), "--bn train changes nothing: model 'lenet' has no BatchNorm"),
    (dict(model="resnet20", bn_stats="client"), "--bn-stats client changes nothing without --prior bn"),
    (dict(model="linreg", label_mode="dlg"), "--labels dlg changes nothing: model 'linreg' is a regression"),
    (dict(sketch_memory=2.0), "--sketch-memory changes nothing: sketch 'srht' holds no b x d matrix"),
    (dict(utility_steps=5), "--utility-steps 5 changes nothing without --utility"),
    (dict(attacker_knows_clip=True, defense="gaussian:sigma=0.01"), "--attacker-knows-clip changes nothing: the"),
    (dict(attacker_knows_prune=True, defense="clip:C=1"), "--attacker-knows-prune changes nothing: the defense has no"),
    (dict(defense="prune:p=0.5,prune:p=0.9"), "together send what 'prune:p=0.9@before_sketch' alone sends"),
    (dict(defense="clip:C=2,clip:C=1"), "together send what 'clip:C=1.0@before_sketch' alone sends"),
    (dict(sketch_dim=100, sketch_ratio=0.9), "--sketch-dim 100 and --sketch-ratio 0.9 are both given: the dimension"),
    (dict(model="linreg", given=frozenset({"label_mode"})), "--labels idlg changes nothing: model 'linreg' is a"),
    (dict(model="resnet20", priors=["tv"]), "--prior tv changes nothing: TV is already on at weight 0.02"),
])
def test_settings_the_run_does_not_read_are_warned_of(settings, said):
    import warnings

    from leakattack.errors import SettingWarning
    from leakattack.experiment import prepare

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prepare(RunConfig(**{"model": "lenet", "device": "cpu", "iterations": 1, **settings}))
    assert [str(w.message) for w in caught if issubclass(w.category, SettingWarning) and said in str(w.message)]
    with warnings.catch_warnings():  # the same settings where they are read: no warning
        warnings.simplefilter("error", SettingWarning)
        warnings.filterwarnings("ignore", "BatchNorm in train mode", SettingWarning)  # said of the mode, not of these
        prepare(RunConfig(model="resnet20", device="cpu", iterations=1, bn="train", bn_stats="client", priors=["bn"]))
        prepare(RunConfig(model="lenet", device="cpu", iterations=1, priors=["tv"]))  # no TV before: it adds TV


def test_a_ratio_given_to_the_identity_sketch_or_a_prior_given_twice_warns():
    import warnings

    from leakattack.errors import SettingWarning
    from leakattack.experiment import prepare

    for given in ({"sketch_ratio": 0.3}, {"sketch_dim": 100}):
        with pytest.warns(SettingWarning, match="--sketch none sends the whole gradient"):
            prepare(RunConfig(model="lenet", dataset="digits", sketch="none", device="cpu", **given))
    with pytest.warns(SettingWarning, match="--prior tv is given more than once: tv:0.2 is used"):
        prepare(RunConfig(model="lenet", dataset="digits", priors=["tv", "tv:0.2"], device="cpu"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", SettingWarning)
        prepare(RunConfig(model="lenet", dataset="digits", sketch="none", device="cpu"))
        prepare(RunConfig(model="lenet", dataset="digits", sketch="srht", sketch_ratio=0.3, device="cpu"))


def test_the_bn_prior_on_one_image_warns_that_it_has_lowered_the_psnr_where_measured(tmp_path):
    import warnings

    from leakattack.errors import SettingWarning
    from leakattack.experiment import prepare

    # running statistics gathered over data (moved off their initial 0 and 1), as a trained model's are
    model = targets.get_model("resnet20", num_classes=10, seed=0).model
    state = {k: v + 0.1 if ".running_" in k else v for k, v in model.state_dict().items()}
    torch.save(state, tmp_path / "w.pt")
    w = str(tmp_path / "w.pt")
    with pytest.warns(SettingWarning, match="--prior bn pulls one image's BatchNorm statistics"):
        prepare(RunConfig(model="resnet20", priors=["bn"], device="cpu", iterations=1, weights=w))
    # without weights the statistics are their initial values, gathered over no data: that is what is said, in every
    # setting where the prior reads them
    for initial in (RunConfig(model="resnet20", priors=["bn"], device="cpu", iterations=1),
                    RunConfig(model="resnet20", priors=["bn"], batch_size=2, device="cpu", iterations=1)):
        with pytest.warns(SettingWarning) as said:
            prepare(initial)
        texts = [str(w.message) for w in said]
        assert any("these are still their initial values (mean 0, variance 1), gathered over no data" in t
                   for t in texts) and not any("pulls one image's" in t for t in texts)
    for quiet in (RunConfig(model="resnet20", priors=["bn"], batch_size=2, device="cpu", iterations=1, weights=w),
                  RunConfig(model="resnet20", priors=["bn"], bn_stats="client", device="cpu", iterations=1),
                  RunConfig(model="resnet20", priors=["bn"], bn="train", device="cpu", iterations=1, weights=w)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", SettingWarning)
            warnings.filterwarnings("ignore", "BatchNorm in train mode", SettingWarning)  # of the mode, not the prior
            prepare(quiet)
    with pytest.warns(SettingWarning) as said:  # a weight of 0: only that it changes nothing
        prepare(RunConfig(model="resnet20", priors=["bn:0"], device="cpu", iterations=1))
    assert [str(w.message).split(":")[0] for w in said] == ["--prior bn"]
    assert "changes nothing" in str(said[0].message)
    # a closed form does not read --prior (the command line says so): no advice on a prior it does not use (it told a
    # lenet run, which has no BatchNorm at all, about one image's BatchNorm statistics)
    for model, weights in (("lenet", None), ("resnet20", w)):
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            prepare(RunConfig(model=model, attack="imprint", priors=["bn"], device="cpu", weights=weights))
        assert not any("--prior bn" in str(x.message) for x in said), [str(x.message) for x in said]


def test_steps_that_follow_each_other_are_warned_of_only_where_one_of_them_sends_what_both_do():
    import warnings

    from leakattack.experiment import prepare

    for spec in ("clip:C=1,prune:p=0.5,clip:C=1", "prune:p=0.5,prune:p=0.5@after_sketch", "per_example:C=1,clip:C=1",
                 "clip:C=1,gaussian:sigma=0.1,clip:C=1"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            prepare(RunConfig(model="lenet", device="cpu", iterations=1, defense=spec))
        assert not [w for w in caught if "follow each other" in str(w.message)], spec
