"""The Python API refuses inputs that do not fit in one sentence, and takes the ones that do as they are meant."""

import re
import warnings

import pytest
import torch
from torch import nn

import targets
from leakattack.errors import UserError


def regression(loss=None):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, 1)).double()  # one output column: (B, 1)
    return targets.Victim.from_module(net, input_shape=(3, 2, 2), num_classes=1, task="regression", loss=loss)


def test_a_regression_output_of_one_column_meets_each_examples_own_target():
    x = torch.rand(3, 3, 2, 2, dtype=torch.float64)
    t = torch.tensor([0.3, -1.0, 2.0], dtype=torch.float64)
    for loss, per_row in ((None, lambda out: 0.5 * (out.squeeze(1) - t).pow(2).mean()),
                          (nn.MSELoss(), lambda out: (out.squeeze(1) - t).pow(2).mean()),
                          (nn.L1Loss(), lambda out: (out.squeeze(1) - t).abs().mean())):
        v = regression(loss)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # torch warns where a loss broadcasts targets of another shape
            got = targets.loss_at(v, x, v.target(t))
            g = targets.flat_gradient(v, x, v.target(t))
            rows = targets.per_example_gradients(v, x, v.target(t))
        assert float(got.detach()) == pytest.approx(float(per_row(v.model(x).detach())), rel=1e-12)
        assert torch.allclose(rows.mean(0), g)
    v = regression()
    with pytest.raises(UserError, match=re.escape("the regression targets have shape (3, 2) and the model's outputs "
                                                  "(3, 1): give one target per output")):
        targets.loss_at(v, x, torch.zeros(3, 2, dtype=torch.float64))
