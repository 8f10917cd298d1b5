"""What a researcher's own sketch or defense must do, checked where it is used: a sketch's outputs have the shapes
the contract names and its adjoint is its transpose; a defense keeps the vector's shape and takes str and bool
parameters from a spec; a registered name that clashes or reads as a flag is refused in one sentence."""

import math

import pytest
import torch

import defenses
from defenses.base import Transform
from defenses.registry import register_defense
from leakattack.channel import Channel
from leakattack.errors import UserError
from leakattack.sketch import Sketch, get_sketch, register_sketch, sketch_class


def subsample(kind: str, scale_adjoint: float = 1.0, extra_out: int = 0, short_adjoint: int = 0):
    class Sub(Sketch):
        def __init__(self, d, b, seed=0):
            super().__init__(d=d, b=b, seed=seed)
            self.idx = torch.randperm(d, generator=torch.Generator().manual_seed(seed))[:b]

        def _apply(self, v):
            out = v.index_select(-1, self.idx) * math.sqrt(self.d / self.b)
            return torch.cat([out, out[..., :extra_out]], -1) if extra_out else out

        def _adjoint(self, u):
            out = u.new_zeros(*u.shape[:-1], self.d - short_adjoint)
            return out.index_add(-1, self.idx, u * math.sqrt(self.d / self.b) * scale_adjoint)

    Sub.kind = kind
    return Sub


def test_a_sketch_from_outside_is_held_to_its_shapes_and_its_adjoint(fresh_registries):
    register_sketch(subsample("good-sub"))
    R = get_sketch("good-sub", 50, 20, seed=1)
    assert R.apply(torch.ones(3, 50, dtype=torch.float64)).shape == (3, 20)
    register_sketch(subsample("twice-adjoint", scale_adjoint=2.0))
    with pytest.raises(UserError, match="its _adjoint is not the transpose of its _apply"):
        get_sketch("twice-adjoint", 50, 20, seed=1)
    register_sketch(subsample("nan-apply", scale_adjoint=1.0))  # then made to send NaN
    nan_class = sketch_class("nan-apply")
    monkey = nan_class._apply
    nan_class._apply = lambda self, v: monkey(self, v) * float("nan")
    with pytest.raises(UserError, match=r"^sketch 'nan-apply': its _apply returned 20 NaN or infinite value\(s\) of "
                                        r"20 for a random finite vector$"):
        get_sketch("nan-apply", 50, 20, seed=1)  # it blamed _adjoint, as not the transpose
    register_sketch(subsample("long-apply", extra_out=1))
    with pytest.raises(UserError, match=r"long-apply sketch _apply returned shape \(21,\) for an input of shape "
                                        r"\(50,\); it must return shape \(20,\)"):
        get_sketch("long-apply", 50, 20, seed=1)
    register_sketch(subsample("short-adjoint", short_adjoint=1))
    with pytest.raises(UserError, match=r"short-adjoint sketch _adjoint returned shape \(49,\)"):
        get_sketch("short-adjoint", 50, 20, seed=1)


def test_a_sketch_that_returns_another_dtype_or_takes_an_undeclared_parameter_is_one_sentence(fresh_registries):
    """An _apply that returned float32 for float64 input crashed in the adjoint check with torch's 'dot: expected
    both vectors to have same dtype'; a constructor's own keyword, undeclared, was refused without saying where
    a family declares its parameters."""
    Sub = subsample("single-sub")

    class Single(Sub):
        def _apply(self, v):
            return super()._apply(v).float()

    class Scaled(Sub):
        kind = "scaled-sub"

        def __init__(self, d, b, seed=0, scale=1.0):
            super().__init__(d, b, seed)

    register_sketch(Single)
    with pytest.raises(UserError, match=r"^single-sub sketch _apply returned a float32 tensor on cpu for a float64 "
                                        r"input on cpu; it must return its input's dtype and device$"):
        get_sketch("single-sub", 50, 20, seed=1)
    register_sketch(Scaled)
    with pytest.raises(UserError, match=r"^sketch 'scaled-sub' has no parameter 'scale'; allowed: none \(its "
                                        r"constructor takes scale=, and a family's parameters are declared in its "
                                        r"param_rules"):
        get_sketch("scaled-sub", 50, 20, seed=1, scale=2.0)


def test_registered_names_that_clash_or_read_as_flags_are_refused(fresh_registries):
    with pytest.raises(ValueError, match=r"sketch 'srht' is registered twice \(the name is taken by "
                                         r"leakattack\.sketch\.srht\.SRHTSketch\): choose another name"):
        register_sketch(subsample("srht"))
    with pytest.raises(ValueError, match="a name starting with '-' reads as a flag"):
        register_sketch(subsample("-x"))


class Mode(Transform):
    name = "test-mode"
    schema = {"mode": (str, "up or down", lambda v: v in ("up", "down")),
              "flip": (bool, "true or false", lambda v: isinstance(v, bool))}

    def __call__(self, v, gen):
        out = v * (2.0 if self.params["mode"] == "up" else 0.5)
        return -out if self.params.get("flip") else out


class Shrink(Transform):
    name = "test-shrink"

    def __call__(self, v, gen):
        return v[..., 1:]


def test_a_defense_takes_str_and_bool_parameters_and_keeps_the_vector_shape(fresh_registries):
    register_defense(Mode)
    step = defenses.build("test-mode:mode=up:flip=true").steps[0]
    assert step.params == {"mode": "up", "flip": True}
    assert defenses.build(step.spec()).steps[0].params == step.params  # its spec reads back
    with pytest.raises(UserError, match="test-mode': mode must be up or down, got 'sideways'"):
        defenses.build("test-mode:mode=sideways:flip=no")
    with pytest.raises(UserError, match="test-mode': flip must be true or false, got 'maybe'"):
        defenses.build("test-mode:mode=up:flip=maybe")
    register_defense(Shrink)
    channel = Channel(get_sketch("none", 10, 10), "test-shrink@after_sketch")
    with pytest.raises(UserError, match=r"defense step 'test-shrink@after_sketch' returned shape \(9,\) for a vector "
                                        r"of shape \(10,\); a defense keeps the vector's shape, \(10,\)"):
        channel.send(torch.ones(10))


class Half(Transform):
    name = "test-half"

    def __call__(self, v, gen):
        return v.to(torch.float16)


def test_a_defense_that_changes_the_vectors_dtype_is_refused_in_one_sentence(fresh_registries):
    """Its float16 vector ended in a traceback inside torch's conv2d (or linalg.svd) with nothing naming the step."""
    register_defense(Half)
    channel = Channel(get_sketch("none", 10, 10), "test-half")
    with pytest.raises(UserError, match=r"^defense step 'test-half@before_sketch' returned a float16 tensor on cpu "
                                        r"for a float64 vector on cpu; a defense keeps the vector's dtype and device$"):
        channel.send(torch.ones(10, dtype=torch.float64))


def test_a_defense_schema_of_another_type_is_refused_at_registration(fresh_registries):
    class Listy(Transform):
        name = "test-listy"
        schema = {"ks": (list, "a list", lambda v: True)}

    with pytest.raises(ValueError, match="schema entry 'ks' has type <class 'list'>, not one of float, int, str, bool"):
        register_defense(Listy)


class FiveScores(torch.nn.Module):
    def __init__(self, in_shape, num_classes):
        super().__init__()
        self.fc = torch.nn.Linear(int(torch.tensor(in_shape).prod()), 5)

    def forward(self, x):
        return self.fc(x.flatten(1))


class NoShape(torch.nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.fc = torch.nn.Linear(4, num_classes)


def test_a_model_registered_from_outside_is_checked_as_a_model_file_is(fresh_registries):
    import targets

    targets.register_model("test-five", FiveScores)
    with pytest.raises(UserError, match=r"model 'test-five' .* has 5 outputs for num_classes = 10"):
        targets.get_model("test-five", num_classes=10, in_shape=(1, 4, 4))
    targets.register_model("test-noshape", NoShape)
    with pytest.raises(UserError, match="model 'test-noshape' could not be built with no parameters \\(TypeError: "):
        targets.get_model("test-noshape", num_classes=10, in_shape=(1, 4, 4))


def _flat_attack(name: str, value: float, label: int):
    from leakattack.attacks import Attack, AttackResult

    class Flat(Attack):
        closed_form = True

        def reconstruct(self, obs, *, monitor=None, monitor_every=10, progress=False):
            x = torch.full((obs.batch_size, *obs.victim.input_shape), value, dtype=obs.y.dtype)
            return AttackResult(x=x, labels=torch.full((obs.batch_size,), label), x0=x.clone(), losses=[0.0])

    Flat.name = name
    return Flat


def test_an_attack_s_labels_outside_the_classes_are_refused_and_a_nan_image_is_said(fresh_registries, tmp_path,
                                                                                   capsys):
    from leakattack import cli
    from leakattack.attacks import register_attack

    register_attack("test-label99", _flat_attack("test-label99", 0.5, 99))
    run = ["run", "--dataset", "digits", "--no-lpips", "--quiet"]
    assert cli.main([*run, "--attack", "test-label99", "--out", str(tmp_path / "a")]) == 2
    assert "attack 'test-label99' returned label 99, outside the classes 0..9" in capsys.readouterr().err
    register_attack("test-nan", _flat_attack("test-nan", float("nan"), 0))
    assert cli.main([*run, "--attack", "test-nan", "--out", str(tmp_path / "b")]) == 0
    out = capsys.readouterr()
    assert "returned a reconstruction with 784 value(s) that are NaN or infinite" in out.err
    assert out.out.startswith("not rebuilt")


def test_an_attack_of_one_s_own_that_raises_is_one_sentence_at_its_line(fresh_registries, tmp_path, capsys):
    """An exception inside an attack of one's own is one sentence naming the attack, the exception and the line of
    the user's file it arose at (exit 2, no folder), from Python a UserError whose cause is the user's exception."""
    import inspect

    from leakattack import cli
    from leakattack.attacks import Attack, register_attack

    class Breaks(Attack):
        name = "test-breaks"
        closed_form = True

        def reconstruct(self, obs, *, monitor=None, monitor_every=10, progress=False):
            raise ValueError("my attack broke")

    line = inspect.getsourcelines(Breaks.reconstruct)[1] + 1
    register_attack("test-breaks", Breaks)
    out = tmp_path / "a"
    assert cli.main(["run", "--dataset", "digits", "--no-lpips", "--quiet", "--attack", "test-breaks", "--out",
                     str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"leakattack: error: attack 'test-breaks' failed (ValueError: my attack broke) in reconstruct at "
                   f"{__file__}:{line}"], err
    assert not out.exists()


def test_an_attack_of_one_s_own_past_its_budget_or_outside_the_box_is_warned_of(fresh_registries, tmp_path, capsys):
    """An attack of one's own that takes more steps than the iterations the run passed it, or returns pixels outside
    [0, 1] (which the run clamps before scoring), gets a one-line warning each; one inside both gets neither."""
    from leakattack import cli
    from leakattack.attacks import Attack, AttackResult, register_attack

    def attack(name: str, value: float, steps: int):
        class Own(Attack):
            def __init__(self, **settings):
                pass

            def reconstruct(self, obs, *, monitor=None, monitor_every=10, progress=False):
                x = torch.full((obs.batch_size, *obs.victim.input_shape), value, dtype=obs.y.dtype)
                x[..., 0, 0] = 0.5
                return AttackResult(x=x, labels=None, x0=x.clone(), losses=[1.0 / (t + 1) for t in range(steps + 1)])

        Own.name = name
        register_attack(name, Own)

    run = ["run", "--dataset", "digits", "--no-lpips", "--quiet", "--iterations", "5"]
    for name, value, steps, said in [("test-long", 0.25, 40, ["took 40 steps, past the 5 iterations"]),
                                     ("test-wide", -2.0, 5, ["values outside [0, 1] (from -2 to 0.5)"]),
                                     ("test-both", 255.0, 6, ["took 6 steps", "(from 0.5 to 255)"]),
                                     ("test-fits", 0.75, 5, [])]:
        attack(name, value, steps)
        assert cli.main([*run, "--attack", name, "--out", str(tmp_path / name)]) == 0
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("leakattack: warning:")]
        assert len(err) == len(said) and all(any(s in e for e in err) for s in said), (name, err)
        assert all(f"attack '{name}'" in e for e in err)
    import json

    from leakattack.data import get_batch, get_dataset
    from leakattack.metrics import psnr

    wide = json.loads((tmp_path / "test-wide" / "metrics.json").read_text())["psnr"]  # scored as its clamp
    x = torch.load(tmp_path / "test-wide" / "reconstruction.pt")["images"]
    truth = get_batch(get_dataset("digits"), 0, 1)[0]
    clamp = torch.full_like(truth, 0.0)
    clamp[..., 0, 0] = 0.5
    assert torch.equal(x.to(clamp.dtype), clamp)
    assert wide == pytest.approx(float(psnr(clamp, truth).mean()), abs=1e-4)


def test_a_subclass_of_a_built_in_attack_is_read_as_the_built_in(fresh_registries, tmp_path, capsys, monkeypatch):
    """A subclass of gradient matching that runs its reconstruct gets no warning of the steps or pixels that attack
    returns (its Gauss-Newton steps past the budget, an unboxed iterate's overshoot), and an error raised inside
    leakattack's own code under it stays that error, not a sentence blaming the subclass."""
    from leakattack import cli
    from leakattack.attacks import register_attack
    from leakattack.attacks.gradient_matching import GradientMatching
    from leakattack.errors import duration_text

    class Mine(GradientMatching):
        name = "test-mine"

    class Wraps(GradientMatching):
        name = "test-wraps"

        def reconstruct(self, obs, **kwargs):
            return super().reconstruct(obs, **kwargs)

    register_attack("test-mine", Mine)
    register_attack("test-wraps", Wraps)
    run = ["run", "--dataset", "digits", "--sketch", "none", "--no-lpips", "--quiet", "--iterations", "20",
           "--lr", "1.0", "--optimizer", "adam"]
    assert cli.main([*run, "--attack", "test-mine", "--out", str(tmp_path / "a")]) == 0
    assert "attack 'test-mine'" not in capsys.readouterr().err
    monkeypatch.setattr(GradientMatching, "_search", lambda *a, **k: duration_text("x"))  # fails inside leakattack
    with pytest.raises(TypeError):
        cli.main([*run, "--attack", "test-wraps", "--out", str(tmp_path / "b")])


def test_an_attack_s_options_are_checked_against_its_own_constraint_and_constructor(fresh_registries):
    from leakattack.attacks import Attack, register_attack
    from leakattack.constraints import Number, Param

    class Loud(Attack):
        name = "test-loud"
        closed_form = True
        options = (Param("loudness", 5.0, Number(0, 1), "loudness", "how loud"),)

        def __init__(self, *, loudness=5.0):
            self.loudness = loudness

        def reconstruct(self, obs, **kwargs):
            raise NotImplementedError

    with pytest.raises(ValueError, match="option 'loudness' with the default 5.0, which its own constraint refuses"):
        register_attack("test-loud", Loud)

    class Deaf(Loud):
        name = "test-deaf"
        options = (Param("quietness", 0.5, Number(0, 1), "quietness", "how quiet"),)

    with pytest.raises(ValueError, match="option 'quietness', which its __init__ does not take"):
        register_attack("test-deaf", Deaf)
