"""A user's model that fails names, in its one sentence, the place in the user's file where it failed: the last
traceback frame there (a SyntaxError: its own line), the exception's type and the first line of its message."""

import re
import textwrap

import pytest
import torch
from torch import nn

import targets
from leakattack import cli
from leakattack.errors import UserError

HEAD = """
import torch
from torch import nn

"""

CASES = {
    "import": (HEAD + "raise RuntimeError('cannot load config')  # HERE\n",
               r"model file '{path}' could not be imported \(RuntimeError: cannot load config\) at {path}:{line}$"),
    "syntax": (HEAD + "class Net(nn.Module)  # HERE\n    pass\n",
               r"model file '{path}' could not be imported \(SyntaxError: [^()]+\) at {path}:{line}$"),
    "init": (HEAD + """
class Net(nn.Module):
    def __init__(self, width=3):
        super().__init__()
        if width % 2:
            raise ValueError("width must be even\\nsecond line")  # HERE
""", r"model '{path}:Net' could not be built with no parameters \(ValueError: width must be even\) in __init__ "
     r"at {path}:{line}$"),
    "init arguments": (HEAD + """
class Net(nn.Module):
    def __init__(self, depth, hidden):  # HERE
        super().__init__()
""", r"model '{path}:Net' could not be built with no parameters \(TypeError: Net.__init__\(\) missing 2 required "
     r"positional arguments: 'depth' and 'hidden'\) calling Net.__init__ defined at {path}:{line}$"),
    "helper in init": (HEAD + """
def layers(n):
    return [nn.Linear(n, -1)]  # HERE


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(*layers(48))
""", r"model '{path}:Net' could not be built with no parameters \(RuntimeError: .*\) in layers at {path}:{line}$"),
    "forward": (HEAD + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(48, 10)

    def forward(self, x):
        self.fc(x.flatten(1))
        raise RuntimeError("forward broke")  # HERE
""", r"model '{path}:Net' fails on a batch of shape \(2, 3, 4, 4\) \(RuntimeError: forward broke\) in forward "
     r"at {path}:{line}$"),
    "torch in forward": (HEAD + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(100, 10)

    def forward(self, x):
        return self.fc(x.flatten(1))  # HERE
""", r"model '{path}:Net' fails on a batch of shape \(2, 3, 4, 4\) \(RuntimeError: mat1 and mat2 shapes cannot be "
     r"multiplied \(2x48 and 100x10\)\) in forward at {path}:{line}$"),
    "forward on a random batch": (HEAD + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(48, 10)

    def forward(self, x):
        if x.abs().sum() > 0:
            raise RuntimeError("only zeros please")  # HERE
        return self.fc(x.flatten(1))
""", r"model '{path}:Net' fails on a random batch of shape \(2, 3, 4, 4\), forward and backward \(RuntimeError: "
     r"only zeros please\) in forward at {path}:{line}$"),
    "backward after an in-place change": (HEAD + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(48, 10)

    def forward(self, x):
        h = torch.sigmoid(x.flatten(1))  # HERE
        h.mul_(0.5)
        return self.fc(h)
""", r"model '{path}:Net' fails on a random batch of shape \(2, 3, 4, 4\), forward and backward \(RuntimeError: "
     r"one of the variables needed for gradient computation has been modified by an inplace operation: .*expected "
     r"version 0 instead\.\): the backward of the operation in forward at {path}:{line} fails$"),
    "a complex weight": (HEAD + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.z = nn.Parameter(torch.ones(10, dtype=torch.complex64))
        self.fc = nn.Linear(48, 10)

    def forward(self, x):
        return self.fc(x.flatten(1)) * self.z.real
""", r"model '{path}:Net' holds a complex trainable weight \('z'\), and the message an attack reads is the "
     r"gradient of real weights: give it as two real parameters .*$"),
    "head of the wrong width": (HEAD + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(48, 7)

    def forward(self, x):  # HERE
        return self.fc(x.flatten(1))
""", r"the nn.Linear that computes the module's output has 7 outputs, and num_classes is 10: .* "
     r"\(forward of Net at {path}:{line}\)$"),
    "output of the wrong shape": (HEAD + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(48, 10)

    def forward(self, x):  # HERE
        return self.fc(x.flatten(1)).sum(1)
""", r"model '{path}:Net' returns \(2,\) for a batch of 2, not the \(2, 10\) class scores \(forward of Net at "
     r"{path}:{line}\)$"),
    "head naming no layer": (HEAD + """
class Net(nn.Module):  # HERE
    leakattack_head = "classifier"

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(48, 10)

    def forward(self, x):
        return self.fc(x.flatten(1))
""", r"leakattack_head of '{path}:Net' \(class Net at {path}:{line}\) names no submodule 'classifier'; its "
     r"nn.Linear layers: fc$"),
    "no such class": (HEAD + """
class Other(nn.Module):
    pass
""", r"model file '{path}' has no attribute 'Net' \(its nn.Module classes: Other\)$"),
}


def _write(tmp_path, source):
    path = tmp_path / "net.py"
    path.write_text(textwrap.dedent(source))
    marked = [i for i, line in enumerate(source.splitlines(), 1) if "# HERE" in line]
    return path, marked[0] if marked else None


@pytest.mark.parametrize("case", list(CASES))
def test_a_failing_model_file_names_its_place_in_one_sentence(tmp_path, case):
    source, pattern = CASES[case]
    path, line = _write(tmp_path, source)
    with pytest.raises(UserError) as err:
        targets.get_model(f"{path}:Net", num_classes=10, in_shape=(3, 4, 4))
    text = str(err.value)
    assert "\n" not in text and ". " not in text, text
    assert re.search(pattern.format(path=re.escape(str(path)), line=line), text), text


def test_the_command_line_says_the_same_sentence_and_exits_2(tmp_path, monkeypatch, capsys):
    path, line = _write(tmp_path, CASES["init"][0])
    monkeypatch.chdir(tmp_path)
    code = cli.main(["run", "--model", "net.py:Net", "--iterations", "2", "--no-lpips", "--quiet",
                     "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err == (f"leakattack: error: model 'net.py:Net' could not be built with no parameters (ValueError: width "
                   f"must be even) in __init__ at {path}:{line}"), err


class Breaks(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        raise ValueError("my forward")


def test_victim_from_module_names_the_line_of_the_forward_that_raised():
    line = Breaks.forward.__code__.co_firstlineno + 1
    with pytest.raises(UserError) as err:
        targets.Victim.from_module(Breaks(), input_shape=(4,), num_classes=3, name="breaks")
    assert str(err.value) == (f"model 'breaks' fails on a batch of shape (2, 4) (ValueError: my forward) in forward "
                              f"at {__file__}:{line}")


def test_torch_s_own_modules_name_no_place():
    with pytest.raises(UserError) as err:
        targets.Victim.from_module(nn.Sequential(nn.Linear(5, 3)), input_shape=(4,), num_classes=3, name="seq")
    assert str(err.value).endswith("(RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x4 and 5x3))")


def test_an_interrupt_is_not_turned_into_a_sentence(tmp_path):
    path, _ = _write(tmp_path, HEAD + "class Net(nn.Module):\n    def __init__(self):\n"
                     "        raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        targets.get_model(f"{path}:Net", num_classes=10, in_shape=(3, 4, 4))


def test_a_file_that_exits_on_import_is_one_sentence(tmp_path):
    path, _ = _write(tmp_path, HEAD + "raise SystemExit(3)\n")
    with pytest.raises(UserError, match=r"^model file .* could not be imported \(SystemExit: its top level called "
                                        r"sys\.exit\(3\)[^\n]*$"):
        targets.get_model(f"{path}:Net", num_classes=10, in_shape=(3, 4, 4))


def test_a_model_built_fine_is_unchanged(tmp_path):
    path, _ = _write(tmp_path, HEAD + "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                     "        self.fc = nn.Linear(48, 10)\n\n    def forward(self, x):\n"
                     "        return self.fc(x.flatten(1))\n")
    victim = targets.get_model(f"{path}:Net", num_classes=10, in_shape=(3, 4, 4))
    assert victim.model(torch.zeros(1, 3, 4, 4)).shape == (1, 10)


@pytest.mark.parametrize("error", [MemoryError(), RuntimeError("DefaultCPUAllocator: can't allocate memory: you "
                                                               "tried to allocate 99999999999 bytes")])
def test_an_allocation_that_does_not_fit_in_the_checks_is_not_blamed_on_the_module(error):
    class Big(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(12, 3)

        def forward(self, x):
            if x.abs().sum() > 0:  # the random probe, not the zeros of the first check
                raise error
            return self.fc(x.flatten(1))

    with pytest.raises(type(error)):
        targets.Victim.from_module(Big(), input_shape=(3, 2, 2), num_classes=3)
