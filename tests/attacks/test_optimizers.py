"""Our Adam and SGD against torch.optim's, step for step, and the optimiser registry."""

import re

import pytest
import torch

from leakattack.attacks import get_optimizer, list_optimizers
from leakattack.attacks.optimizers import SGD, Adam


def _objective(n=48, rows=3, seed=0):
    """A smooth non-convex least-squares problem per row: sum (A tanh(B z) - c)^2 + 0.01 |z|^4."""
    gen = torch.Generator().manual_seed(seed)
    A = torch.randn(30, n, generator=gen, dtype=torch.float64)
    B = torch.randn(n, n, generator=gen, dtype=torch.float64) / 7
    c = torch.randn(30, generator=gen, dtype=torch.float64)

    def loss(z):  # z (..., n) -> (...)
        return (torch.tanh(z @ B.T) @ A.T - c).pow(2).sum(-1) + 0.01 * z.pow(4).sum(-1)

    z0 = torch.randn(rows, n, generator=gen, dtype=torch.float64)
    return loss, z0


def _gradients(loss, Z):
    """Row by row, with the same operations as the torch.optim runs (a matrix product would round differently)."""
    rows = []
    for z in Z:
        z = z.detach().requires_grad_(True)
        rows.append(torch.autograd.grad(loss(z), z)[0])
    return torch.stack(rows)


def _torch_trajectory(make, loss, z0, steps):
    """torch.optim on each row alone; the iterates after every step."""
    out = []
    for row in z0:
        p = row.clone().requires_grad_(True)
        opt = make([p])
        traj = []
        for _ in range(steps):
            opt.zero_grad()
            loss(p).backward()
            opt.step()
            traj.append(p.detach().clone())
        out.append(torch.stack(traj))
    return torch.stack(out, 1)  # (steps, rows, n)


def _our_trajectory(opt, loss, z0, steps):
    Z, traj = z0.clone(), []
    for _ in range(steps):
        Z = opt.step(list(range(len(z0))), Z, _gradients(loss, Z))
        traj.append(Z.clone())
    return torch.stack(traj)


def test_adam_gives_torch_adams_iterates_over_three_hundred_steps():
    loss, z0 = _objective()
    ours = _our_trajectory(Adam(0.05), loss, z0, 300)
    theirs = _torch_trajectory(lambda p: torch.optim.Adam(p, lr=0.05), loss, z0, 300)
    assert torch.allclose(ours, theirs, rtol=1e-12, atol=1e-13)
    assert (loss(ours[-1]) < 0.5 * loss(z0)).all()  # and it did optimise


def test_sgd_gives_torch_sgds_iterates_over_three_hundred_steps():
    loss, z0 = _objective()
    ours = _our_trajectory(SGD(0.002), loss, z0, 300)
    theirs = _torch_trajectory(lambda p: torch.optim.SGD(p, lr=0.002), loss, z0, 300)
    assert torch.allclose(ours, theirs, rtol=1e-12, atol=1e-13)
    assert (loss(ours[-1]) < loss(z0)).all()


def test_adam_rows_that_stop_leave_the_others_on_their_own_trajectory():
    # rows 0 and 2 keep stepping after row 1 stops; they must follow the all-rows trajectory
    loss, z0 = _objective()
    full = _our_trajectory(Adam(0.05), loss, z0, 40)
    opt, Z = Adam(0.05), z0.clone()
    for step in range(40):
        rows = [0, 1, 2] if step < 10 else [0, 2]
        if step == 10:
            Z = Z[[0, 2]]
        Z = opt.step(rows, Z, _gradients(loss, Z))
    assert torch.equal(Z, full[-1][[0, 2]])


def test_the_learning_rate_can_change_between_steps_as_in_torch():
    loss, z0 = _objective(rows=1)
    opt, Z = Adam(0.1), z0.clone()
    p = z0[0].clone().requires_grad_(True)
    ref = torch.optim.Adam([p], lr=0.1)
    for step in range(30):
        lr = 0.1 if step < 15 else 0.01
        opt.lr = lr
        for group in ref.param_groups:
            group["lr"] = lr
        Z = opt.step([0], Z, _gradients(loss, Z))
        ref.zero_grad()
        loss(p).backward()
        ref.step()
    assert torch.allclose(Z[0], p.detach(), rtol=1e-12, atol=1e-13)


def test_a_run_imports_neither_dynamo_nor_torchvision_scipy_or_sklearn(tmp_path):
    # start-up: building a torch.optim optimiser imports torch._dynamo (a second), torchvision imports it too,
    # and scipy.linalg / sklearn take another second; a one-iteration digits run needs none of them
    import subprocess
    import sys
    code = ("import sys; from leakattack.cli import main; "
            f"rc = main(['run', '--dataset', 'digits', '--iterations', '1', '--quiet', '--no-lpips', '--out', "
            f"{str(tmp_path / 'run')!r}]); "
            "print(rc, *[m for m in ('torch._dynamo', 'torchvision', 'scipy.linalg', 'sklearn') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-1] == "0", out.stdout + out.stderr
    assert (tmp_path / "run" / "metrics.json").exists()


def test_registry_builds_each_optimizer_with_its_default_step():
    assert list_optimizers() == ["lbfgs", "adam", "gd"]
    assert [get_optimizer(n).lr for n in list_optimizers()] == [1.0, 0.1, 0.01]
    assert get_optimizer("adam", 0.3).lr == 0.3
    with pytest.raises(ValueError, match="unknown optimizer"):
        get_optimizer("rmsprop")


def test_the_constructor_refuses_an_unknown_name_or_a_negative_prior_weight_in_one_sentence():
    from leakattack.attacks import GradientMatching
    from leakattack.errors import UserError

    for kw, said in ((dict(objective="mse"), "unknown objective 'mse'; choose one of: l2, cosine"),
                     (dict(optimizer="lbgfs"), "unknown optimizer 'lbgfs'"),
                     (dict(labels="guess"), "unknown labels 'guess'"),
                     (dict(dummy_init="zeros"), "unknown dummy_init 'zeros'"),
                     (dict(priors={"tv": -1}), "the weight of prior 'tv' must be a number of at least 0")):
        with pytest.raises(UserError, match=re.escape(said)):
            GradientMatching(**kw)
    assert GradientMatching(priors={"tv": 0, "bn": 1e-3}).priors == {"bn": 1e-3}  # 0 turns a prior off
