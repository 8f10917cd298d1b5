"""A model moved to the run's dtype or device that then fails (a tensor held outside its parameters and buffers, a
dtype set in its forward) is refused in one sentence and given back where it was, not met by a traceback in the
first gradient."""

import pytest
import torch
from torch import nn

import targets
from leakattack import cli
from leakattack.errors import UserError

MODELS = """
import torch
from torch import nn


class Plain(nn.Module):
    def __init__(self, num_classes, in_shape):
        super().__init__()
        self.proj = torch.randn(in_shape[0] * in_shape[1] * in_shape[2], 8)  # not a buffer: .to() leaves it
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x):
        return self.fc(torch.sigmoid(x.flatten(1) @ self.proj))


class Half(nn.Module):
    def __init__(self, num_classes, in_shape):
        super().__init__()
        self.first = nn.Linear(in_shape[0] * in_shape[1] * in_shape[2], 8).half().requires_grad_(False)
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x):
        return self.fc(torch.sigmoid(self.first(x.flatten(1).half()).float()))


class Buffer(nn.Module):
    def __init__(self, num_classes, in_shape):
        super().__init__()
        self.register_buffer("proj", torch.randn(in_shape[0] * in_shape[1] * in_shape[2], 8))
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x):
        return self.fc(torch.sigmoid(x.flatten(1) @ self.proj))


class Filter(nn.Module):
    def __init__(self, num_classes, in_shape):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.register_buffer("filt", torch.complex(torch.randn(in_shape[1:], generator=g),
                                                   torch.randn(in_shape[1:], generator=g)))
        self.fc = nn.Linear(in_shape[0] * in_shape[1] * in_shape[2], num_classes)

    def forward(self, x):
        return self.fc(torch.tanh(torch.fft.ifft2(torch.fft.fft2(x) * self.filt).real).flatten(1))
"""


@pytest.fixture
def models(tmp_path):
    path = tmp_path / "moved.py"
    path.write_text(MODELS)
    return path


@pytest.mark.parametrize("name", ["Plain", "Half"])
def test_a_model_that_fails_once_moved_is_refused_and_moved_back(models, name):
    victim = targets.get_model(f"{models}:{name}", num_classes=3, in_shape=(1, 4, 4))
    assert victim.dtype == torch.float32
    with pytest.raises(UserError, match=r"fails once moved to float64 on cpu \(RuntimeError: .*\) in forward at "
                                        r".*moved\.py:\d+: a tensor it holds outside its parameters and buffers .*"
                                        r"keep it where it was \(--dtype float32, --device cpu\)$"):
        victim.to(torch.float64)
    assert victim.dtype == torch.float32
    assert all(p.dtype == q for p, q in zip(victim.model.parameters(),
                                            [torch.float16, torch.float16, torch.float32, torch.float32]
                                            if name == "Half" else [torch.float32] * 2))


def test_a_registered_buffer_follows_the_model(models):
    victim = targets.get_model(f"{models}:Buffer", num_classes=3, in_shape=(1, 4, 4)).to(torch.float64)
    assert victim.model.proj.dtype == torch.float64
    assert victim(torch.zeros(1, 1, 4, 4, dtype=torch.float64)).shape == (1, 3)


def test_the_command_line_refuses_it_in_one_sentence_and_runs_it_in_its_own_dtype(models, tmp_path, capsys):
    run = ["run", "--model", f"{models}:Plain", "--dataset", "digits", "--iterations", "2", "--no-lpips", "--quiet",
           "--threads", "1"]
    assert cli.main([*run, "--dtype", "float64", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1 and "fails once moved to float64" in err
    assert not (tmp_path / "a").exists()
    assert cli.main([*run, "--dtype", "float32", "--out", str(tmp_path / "b")]) == 0
    assert (tmp_path / "b" / "metrics.json").is_file()


def test_a_move_that_changes_nothing_runs_no_forward_pass():
    calls = []
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
    model.register_forward_hook(lambda *args: calls.append(1))
    victim = targets.Victim.from_module(model, input_shape=(4,), num_classes=2)
    calls.clear()
    victim.to(torch.float32)
    assert not calls
    victim.to(torch.float64)
    assert len(calls) == 1


@pytest.mark.parametrize("dtype,complex_dtype", [(torch.float64, torch.complex128), (torch.float32, torch.complex64)])
def test_a_complex_buffer_stays_complex(models, dtype, complex_dtype):
    """nn.Module.to casts a complex buffer to the real dtype and drops its imaginary part: a different network from
    the user's would send the message and be attacked."""
    victim = targets.get_model(f"{models}:Filter", num_classes=3, in_shape=(1, 4, 4))
    before = victim.model.filt.clone()
    assert before.dtype == torch.complex64
    victim.to(dtype)
    assert victim.model.filt.dtype == complex_dtype and victim.model.fc.weight.dtype == dtype
    assert torch.equal(victim.model.filt.to(torch.complex128), before.to(torch.complex128))
    with pytest.raises(TypeError, match="only accepts floating point or complex dtypes"):
        victim.to(torch.int64)
