"""The user's own model: a class from a .py file or an importable module, its conventions, its one-sentence errors."""

import textwrap

import pytest
import torch
from torch import nn

import targets
from leakattack.errors import UserError

NET = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes, hidden=8):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(16, hidden), nn.Tanh())
        self.out = nn.Linear(hidden, num_classes)

    def forward(self, x):
        return self.out(self.body(x))


class Shaped(nn.Module):
    def __init__(self, in_shape, num_classes):
        super().__init__()
        self.conv = nn.Conv2d(in_shape[0], 2, 3, padding=1)
        self.bn = nn.BatchNorm2d(2)
        self.fc = nn.Linear(2 * in_shape[1] * in_shape[2], num_classes)

    def forward(self, x):
        return self.fc(self.bn(self.conv(x)).flatten(1))


class Regressor(nn.Module):
    leakattack_task = "regression"
    leakattack_loss = staticmethod(lambda output, target: (output - target).abs().mean())

    def __init__(self):
        super().__init__()
        self.w = nn.Linear(16, 1)

    def forward(self, x):
        return self.w(x.flatten(1)).squeeze(-1)


class Headed(Net):
    leakattack_head = "body.1"


class AuxAfterHead(Net):
    def __init__(self, num_classes, hidden=8):
        super().__init__(num_classes, hidden)
        self.proj = nn.Linear(hidden, num_classes)  # registered after the head, run, not returned

    def forward(self, x):
        h = self.body(x)
        self.proj(h)
        return self.out(h)


class SummedLoss(Net):
    def leakattack_loss(self, output, target):
        return nn.functional.cross_entropy(output, target, reduction="sum")


class ModuleLoss(Net):
    leakattack_loss = nn.CrossEntropyLoss(label_smoothing=0.1)


def summed(output, target):
    return nn.functional.cross_entropy(output, target, reduction="sum")


class FunctionLoss(Net):  # a function set as the attribute: F(output, target), not a method of the model
    leakattack_loss = summed


class LambdaLoss(Net):
    leakattack_loss = lambda output, target: nn.functional.cross_entropy(output, target, reduction="sum")  # noqa: E731


class TorchFunctionLoss(Net):
    leakattack_loss = nn.functional.cross_entropy


class FunctionRegressor(Regressor):
    leakattack_loss = nn.functional.mse_loss


class NllRegressor(Regressor):
    leakattack_loss = nn.NLLLoss()


class UnreducedRegressor(Regressor):
    leakattack_loss = nn.MSELoss(reduction="none")


class BadHead(Net):
    leakattack_head = "body.2"


class NoHead(Net):
    leakattack_head = None


class BadLoss(Net):
    leakattack_loss = staticmethod(lambda output: output.sum())


class BadTask(Net):
    leakattack_task = "ranking"


class WrongOutput(Net):
    def forward(self, x):
        return super().forward(x)[:, :1]


class RoundedOutput(Net):
    def forward(self, x):
        return super().forward(x).argmax(1, keepdim=True).expand(-1, 3)


class ComplexOutput(Net):
    def forward(self, x):
        return torch.complex(super().forward(x), super().forward(x))


class TupleOutput(Net):
    def forward(self, x):
        return (super().forward(x),)


class SummedRegressor(Regressor):
    def forward(self, x):
        return super().forward(x).sum()


class NoWeights(nn.Module):
    def forward(self, x):
        return x.flatten(1)[:, :3]


class FrozenHead(Net):
    def __init__(self, num_classes):
        super().__init__(num_classes)
        self.out.weight.requires_grad_(False)


class FrozenBody(Net):
    def __init__(self, num_classes):
        super().__init__(num_classes)
        self.body.requires_grad_(False)


class Refuses(Net):
    def __init__(self, num_classes):
        raise RuntimeError("no GPU here")


class Exits(Net):
    def __init__(self, num_classes):
        raise SystemExit("no GPU here")


class NoSuper(nn.Module):
    def __init__(self, num_classes):
        self.k = num_classes

    def forward(self, x):
        return x


def helper():
    return 1


NOT_A_CLASS = 3
"""


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "my_models.py"
    path.write_text(textwrap.dedent(NET))
    return path


@pytest.fixture
def model_package(tmp_path, monkeypatch):
    pkg = tmp_path / "site" / "zoo_of_mine"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "nets.py").write_text(textwrap.dedent(NET))
    (pkg / "broken.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return "zoo_of_mine.nets"


def one_sentence(err):
    text = str(err.value)
    assert "\n" not in text and text.count(". ") == 0, text
    return text


def test_a_class_from_a_file_becomes_a_cross_entropy_victim_with_its_last_linear_head(model_file):
    v = targets.get_model(f"{model_file}:Net", num_classes=3, in_shape=(1, 4, 4), seed=0, hidden=5)
    assert v.task == "classification" and v.head is v.model.out and v.loss is targets.cross_entropy
    assert v.model.body[1].out_features == 5 and v.d == 16 * 5 + 5 + 5 * 3 + 3
    assert v.name == f"{model_file}:Net" and v.meta["hidden"] == 5 and v.meta["seed"] == 0
    x, y = torch.rand(2, 1, 4, 4), torch.tensor([0, 2])
    v.model.zero_grad()
    nn.functional.cross_entropy(v.model(x), y).backward()
    assert torch.allclose(targets.flat_gradient(v, x, y), torch.cat([p.grad.flatten() for p in v.model.parameters()]))
    assert targets.model_params(f"{model_file}:Net") == ["hidden"]
    assert targets.task_of(f"{model_file}:Net") == "classification"
    assert targets.default_init(f"{model_file}:Net") is None


def test_a_class_from_a_file_takes_the_linear_layer_that_computes_its_output_as_head(model_file):
    v = targets.get_model(f"{model_file}:AuxAfterHead", num_classes=3, in_shape=(1, 4, 4), seed=0)
    assert v.head is v.model.out and v.model.proj is list(v.model.modules())[-1]


def test_a_class_from_a_module_path_is_built_the_same_way(model_package, model_file):
    a = targets.get_model(f"{model_package}:Net", num_classes=3, in_shape=(1, 4, 4), seed=4)
    b = targets.get_model(f"{model_file}:Net", num_classes=3, in_shape=(1, 4, 4), seed=4)
    assert torch.equal(targets.flat_params(a), targets.flat_params(b))


def test_user_models_are_seeded_and_take_in_shape_where_they_ask_for_it(model_file):
    spec = f"{model_file}:Shaped"
    a, b, c = (targets.get_model(spec, num_classes=4, in_shape=(2, 5, 5), seed=s) for s in (1, 1, 2))
    assert a.model.conv.in_channels == 2 and a.model.fc.out_features == 4
    assert torch.equal(targets.flat_params(a), targets.flat_params(b))
    assert not torch.equal(targets.flat_params(a), targets.flat_params(c))
    assert a.has_batchnorm and a.batch_statistics
    e = targets.get_model(spec, num_classes=4, in_shape=(2, 5, 5), bn_mode="eval")
    assert not e.batch_statistics
    u = targets.get_model(spec, num_classes=4, in_shape=(2, 5, 5), init="uniform")
    assert u.model.fc.weight.abs().max() <= 0.5 and u.meta["init"] == "uniform"


def test_class_attributes_set_the_loss_task_and_head(model_file):
    r = targets.get_model(f"{model_file}:Regressor", in_shape=(1, 4, 4))
    assert r.task == "regression" and r.head is None and targets.task_of(f"{model_file}:Regressor") == "regression"
    x, y = torch.rand(3, 1, 4, 4), torch.tensor([1.0, 2.0, 3.0])
    r.model.zero_grad()
    (r.model(x) - y).abs().mean().backward()
    assert torch.allclose(targets.flat_gradient(r, x, y), torch.cat([p.grad.flatten() for p in r.model.parameters()]))

    h = targets.get_model(f"{model_file}:Headed", num_classes=3, in_shape=(1, 4, 4), hidden=3)
    assert h.head is h.model.body[1]
    assert targets.get_model(f"{model_file}:NoHead", num_classes=3, in_shape=(1, 4, 4)).head is None

    s = targets.get_model(f"{model_file}:SummedLoss", num_classes=3, in_shape=(1, 4, 4))
    x, y = torch.rand(2, 1, 4, 4), torch.tensor([0, 1])
    assert torch.allclose(s.loss(s.model(x), y), nn.functional.cross_entropy(s.model(x), y, reduction="sum"))
    m = targets.get_model(f"{model_file}:ModuleLoss", num_classes=3, in_shape=(1, 4, 4))
    assert torch.allclose(m.loss(m.model(x), y), nn.functional.cross_entropy(m.model(x), y, label_smoothing=0.1))
    # a function set as the attribute is called as F(output, target): it was bound as a method and given the model
    # as its output (a traceback from F.mse_loss, a refusal of a function that takes (output, target))
    for name, reduction in (("FunctionLoss", "sum"), ("LambdaLoss", "sum"), ("TorchFunctionLoss", "mean")):
        f = targets.get_model(f"{model_file}:{name}", num_classes=3, in_shape=(1, 4, 4))
        assert torch.allclose(f.loss(f.model(x), y), nn.functional.cross_entropy(f.model(x), y, reduction=reduction))
    f = targets.get_model(f"{model_file}:FunctionRegressor", in_shape=(1, 4, 4))
    t = torch.tensor([1.0, 2.0])
    assert torch.allclose(f.loss(f.model(x), t), nn.functional.mse_loss(f.model(x), t))


@pytest.mark.parametrize("make_spec,message", [
    (lambda f, p: "missing_dir/none.py:Net", "model file 'missing_dir/none.py' does not exist"),
    (lambda f, p: f"{f}:Nope", "has no attribute 'Nope'"),
    (lambda f, p: f"{f}:helper", "is not an nn.Module subclass \\(its type is function\\)"),
    (lambda f, p: f"{f}:NOT_A_CLASS", "is not an nn.Module subclass \\(its type is int\\)"),
    (lambda f, p: f"{p}:Nope", "module 'zoo_of_mine.nets' has no attribute 'Nope'"),
    (lambda f, p: "zoo_of_mine.missing:Net", "no module named 'zoo_of_mine.missing'"),
    (lambda f, p: "zoo_of_mine.broken:Net", "module 'zoo_of_mine.broken' could not be imported "
                                            "\\(ModuleNotFoundError: No module named 'no_such_dependency_xyz'\\)"),
    (lambda f, p: "torch.nn:Linear", "could not be built with no parameters \\(TypeError: "),
    (lambda f, p: f"{f}:Refuses", "could not be built with no parameters \\(RuntimeError: no GPU here\\)"),
    (lambda f, p: f"{f}:Exits", "could not be built with no parameters \\(SystemExit: no GPU here\\) in __init__ at "),
    (lambda f, p: f"{f}:NoSuper", "model NoSuper is an nn.Module whose __init__ at .*my_models.py:\\d+ does not call "
                                  "super\\(\\).__init__\\(\\) first"),
    (lambda f, p: f"{f}:BadHead", "leakattack_head of .* names a Tanh, not an nn.Linear"),
    (lambda f, p: f"{f}:Headed", "the classifier head of model .* scores the classes, and Linear\\(in_features=16, "
                                 "out_features=8, bias=True\\) has 8 outputs for num_classes = 3"),
    (lambda f, p: f"{f}:BadLoss", "leakattack_loss of .* must take \\(output, target\\)"),
    (lambda f, p: f"{f}:BadTask", "leakattack_task is 'ranking'; choose one of: classification, regression"),
    # a regression's loss is tried on two outputs and real targets, as a classifier's is (a traceback in the run)
    (lambda f, p: f"{f}:NllRegressor", "the loss of model .* fails on its outputs and real targets of their shape "
                                       "\\(RuntimeError: .*\\): give F\\(output, target\\) returning one number"),
    (lambda f, p: f"{f}:UnreducedRegressor", "the loss of model .* returns a tensor of shape \\(2,\\) for a batch "
                                             "of 2, not one real number: reduce it over the batch"),
    (lambda f, p: f"{f}:WrongOutput", "returns \\(2, 1\\) for a batch of 2, not the \\(2, 3\\) class scores"),
    (lambda f, p: f"{f}:RoundedOutput", "returns int64 outputs for a batch of 2; the loss and its gradient need real "
                                        "floating-point outputs"),
    (lambda f, p: f"{f}:ComplexOutput", "returns complex64 outputs for a batch of 2; the loss and its gradient need"),
    (lambda f, p: f"{f}:TupleOutput", "returns a tuple for a batch of 2, not a tensor of \\(2, 3\\) class scores"),
    (lambda f, p: f"{f}:SummedRegressor", "returns \\(\\) for a batch of 2, not one output per example"),
    (lambda f, p: "some/dir/model.txt:Net", "model file 'some/dir/model.txt' is not a .py file"),
    (lambda f, p: f"{f}:NoWeights", "has no trainable parameters: its clients send no gradient to attack"),
])
def test_every_way_a_user_model_fails_is_one_sentence(model_file, model_package, make_spec, message):
    with pytest.raises(UserError, match=message) as err:
        targets.get_model(make_spec(model_file, model_package), num_classes=3, in_shape=(1, 4, 4))
    one_sentence(err)


def test_an_unknown_parameter_names_the_constructors_complaint(model_file):
    with pytest.raises(UserError, match="could not be built with depth=3 \\(TypeError: .*depth") as err:
        targets.get_model(f"{model_file}:Net", num_classes=3, in_shape=(1, 4, 4), depth=3)
    one_sentence(err)


@pytest.mark.parametrize("source,exception", [
    ("def broken(:\n", "SyntaxError"),
    ("import no_such_dependency_xyz\n", "ModuleNotFoundError"),
    ("raise ImportError('needs timm')\n", "ImportError: needs timm"),
])
def test_a_file_that_does_not_import_names_the_exception(tmp_path, source, exception):
    path = tmp_path / "bad.py"
    path.write_text(source)
    with pytest.raises(UserError, match=f"model file '.*bad.py' could not be imported \\({exception}") as err:
        targets.get_model(f"{path}:Net")
    one_sentence(err)


def test_registered_names_and_unknown_names_are_not_taken_for_files():
    with pytest.raises(UserError, match="unknown model 'resnet'; choose one of: "):
        targets.get_model("resnet")


def test_frozen_layers_leave_the_message_and_a_frozen_head_reads_no_labels(model_file):
    """Only trained weights are in the message; a head whose weight is frozen carries no label rule."""
    from leakattack import Channel, ThreatModel, get_attack, get_sketch, observe
    body = targets.get_model(f"{model_file}:FrozenBody", num_classes=3, in_shape=(1, 4, 4))
    assert body.d == 8 * 3 + 3 and body.head is body.model.out
    head = targets.get_model(f"{model_file}:FrozenHead", num_classes=3, in_shape=(1, 4, 4))
    assert head.head is None and head.d == 16 * 8 + 8 + 3
    x, y = torch.rand(1, 1, 4, 4), torch.tensor([2])
    obs = observe(head, x, y, Channel(get_sketch("none", head.d, head.d, seed=0)), ThreatModel())
    reason = get_attack("gradient-matching", iterations=2).supports(obs)
    assert reason is not None and "no trainable classifier head" in reason and "--labels given" in reason
    granted = observe(head, x, y, Channel(get_sketch("none", head.d, head.d, seed=0)), ThreatModel(knows_labels=True))
    assert get_attack("gradient-matching", iterations=2, labels="given").supports(granted) is None
    assert get_attack("gradient-matching", iterations=2, labels="dlg").supports(obs) is None


def test_a_model_file_runs_once_per_process_while_it_is_unchanged(tmp_path, capsys, fresh_registries):
    """A run asks for the class many times; each import ran the file's top level again, 46 times in one run, and a
    register_model there found its own name taken."""
    import os

    from leakattack import cli

    name = f"tiny_once_{os.getpid()}"
    path = tmp_path / "once.py"
    path.write_text(textwrap.dedent(f"""
        import pathlib
        from torch import nn
        from targets import register_model

        pathlib.Path(__file__).with_suffix(".log").open("a").write("x")


        class Tiny(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(3 * 32 * 32, 10)

            def forward(self, x):
                return self.fc(x.flatten(1))


        register_model("{name}", Tiny)
    """))
    assert cli.main(["run", "--model", f"{path}:Tiny", "--iterations", "3", "--no-lpips", "--quiet", "--threads", "1",
                     "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "once.log").read_text() == "x"
    assert "registered twice" not in capsys.readouterr().err
    source = path.read_text().replace('register_model("', 'register_model("edited_')
    path.write_text(source + "\n# edited\n")  # another size: imported again
    from targets.models.user import user_class

    user_class(f"{path}:Tiny")
    assert (tmp_path / "once.log").read_text() == "xx"
