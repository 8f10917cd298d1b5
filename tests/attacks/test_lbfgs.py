"""Our L-BFGS against torch.optim.LBFGS: the same iterates, fewer evaluations, the same direction."""

import math

import pytest
import torch

from leakattack.attacks.lbfgs import LBFGS, History, cubic_minimizer, two_loop_direction


def _objective(n=64, seed=0):
    """A smooth non-convex problem: |A tanh(B z) - c|^2 + 0.01 |z|^4."""
    gen = torch.Generator().manual_seed(seed)
    A = torch.randn(40, n, generator=gen, dtype=torch.float64)
    B = torch.randn(n, n, generator=gen, dtype=torch.float64) / 8
    c = torch.randn(40, generator=gen, dtype=torch.float64)

    def loss(z):
        return (A @ torch.tanh(B @ z) - c).pow(2).sum() + 0.01 * z.pow(4).sum()

    return loss, torch.randn(n, generator=gen, dtype=torch.float64)


class _Counted:
    """evaluate(rows, Z) for our L-BFGS, row by row, counting evaluations."""

    def __init__(self, loss):
        self.loss, self.count = loss, 0

    def __call__(self, rows, Z):
        F, G = [], []
        for z in Z:
            z = z.detach().requires_grad_(True)
            value = self.loss(z)
            F.append(float(value.detach()))
            G.append(torch.autograd.grad(value, z)[0])
            self.count += 1
        return F, torch.stack(G), [f"{rows}" for _ in F]


def _torch_lbfgs(loss, z0, steps):
    """torch.optim.LBFGS as the attack used it: max_iter=1 per step, the evaluation at x_k cached.

    Returns the objective at x_0..x_steps and the number of evaluations.
    """
    x = z0.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([x], lr=1, max_iter=1, max_eval=25, history_size=100, tolerance_grad=0,
                            tolerance_change=0, line_search_fn="strong_wolfe")
    count = [0]

    def evaluate():
        count[0] += 1
        opt.zero_grad()
        value = loss(x)
        value.backward()
        return value.detach()

    values = []
    for _ in range(steps):
        value = evaluate()
        values.append(float(value))
        cached = [value]
        opt.step(lambda: cached.pop() if cached else evaluate())
    values.append(float(evaluate()))
    return values, count[0]


def _ours(loss, z0, steps, **options):
    opt, evaluate = LBFGS(1.0, **options), _Counted(loss)
    X = z0.unsqueeze(0)
    F, G, aux = evaluate([0], X)
    values = [F[0]]
    for _ in range(steps):
        X, F, G, aux = opt.step([0], X, F, G, aux, evaluate)
        values.append(F[0])
    return values, evaluate.count, opt, X[0]


def test_two_loop_variant_reproduces_torch_lbfgs_bit_for_bit_over_sixty_steps():
    # the line search, the curvature test and the step lengths are torch's, in double precision
    loss, z0 = _objective()
    theirs, _ = _torch_lbfgs(loss, z0, 60)
    ours, _, _, _ = _ours(loss, z0, 60, direction="two-loop")
    assert ours == theirs
    assert ours[-1] < 0.05 * ours[0]


def test_compact_direction_follows_torch_lbfgs_to_round_off_over_fifty_steps():
    loss, z0 = _objective()
    theirs, _ = _torch_lbfgs(loss, z0, 50)
    ours, _, _, _ = _ours(loss, z0, 50)
    assert ours == pytest.approx(theirs, rel=1e-9)


def test_one_evaluation_per_accepted_point_where_torch_needs_two():
    # torch evaluates x_{k+1} again although its line search just did; we reuse that evaluation
    loss, z0 = _objective()
    steps = 60
    _, torch_count = _torch_lbfgs(loss, z0, steps)
    _, our_count, opt, _ = _ours(loss, z0, steps)
    assert our_count == 1 + opt.evaluations  # the start, then the line searches only
    assert our_count == torch_count - steps
    assert opt.evaluations / steps < 1.5


def test_the_returned_point_carries_its_own_evaluation():
    loss, z0 = _objective()
    _, _, _, x = _ours(loss, z0, 20)
    opt, evaluate = LBFGS(1.0), _Counted(loss)
    X = z0.unsqueeze(0)
    F, G, aux = evaluate([0], X)
    for _ in range(20):
        X, F, G, aux = opt.step([0], X, F, G, aux, evaluate)
    fresh_F, fresh_G, _ = evaluate([0], X)
    assert F == fresh_F and torch.equal(G, fresh_G)
    assert aux == ["[0]"]  # what evaluate attached to the accepted point comes back with it


def test_compact_and_two_loop_directions_agree_on_a_wrapped_history():
    gen = torch.Generator().manual_seed(3)
    n = 50
    history = History(7, n, torch.float64, "cpu")
    for _ in range(19):  # more pairs than slots: the ring wraps around twice
        s = torch.randn(n, generator=gen, dtype=torch.float64)
        y = s + 0.3 * torch.randn(n, generator=gen, dtype=torch.float64)
        history.push(s, y, float(y.dot(s)), float(y.dot(y)))
    S, Y = history.pairs()
    assert len(S) == 7
    g = torch.randn(n, generator=gen, dtype=torch.float64)
    compact = history.direction(g)
    reference = two_loop_direction(g, S, Y, history.gamma)
    assert torch.allclose(compact, reference, rtol=1e-12, atol=1e-14 * float(reference.norm()))
    assert float(compact.dot(g)) < 0  # a descent direction


def test_problems_stepped_together_follow_their_own_trajectories():
    # three problems in one step call: each row's line search is its own
    losses = [_objective(seed=s) for s in range(3)]

    def evaluate(rows, Z):
        F, G = [], []
        for r, z in zip(rows, Z):
            z = z.detach().requires_grad_(True)
            value = losses[r][0](z)
            F.append(float(value.detach()))
            G.append(torch.autograd.grad(value, z)[0])
        return F, torch.stack(G), [None] * len(F)

    opt = LBFGS(1.0)
    X = torch.stack([z for _, z in losses])
    F, G, aux = evaluate([0, 1, 2], X)
    for _ in range(25):
        X, F, G, aux = opt.step([0, 1, 2], X, F, G, aux, evaluate)
    for r in range(3):
        alone = _ours(losses[r][0], losses[r][1], 25)[3]
        assert torch.equal(X[r], alone)


def test_a_zero_gradient_stalls_the_problem_without_moving_it():
    loss = lambda z: (z - 1).pow(2).sum()  # noqa: E731
    opt, evaluate = LBFGS(1.0), _Counted(loss)
    X = torch.ones(1, 4, dtype=torch.float64)
    F, G, aux = evaluate([0], X)
    X2, F2, _, _ = opt.step([0], X, F, G, aux, evaluate)
    assert opt.stalled == {0} and torch.equal(X2, X) and F2 == F and opt.evaluations == 0


def test_cubic_minimizer_finds_the_minimum_of_a_cubic():
    # f(t) = (t - 1)^3 - 3 (t - 1) has its local minimum at t = 2
    f = lambda t: (t - 1) ** 3 - 3 * (t - 1)  # noqa: E731
    df = lambda t: 3 * (t - 1) ** 2 - 3  # noqa: E731
    assert cubic_minimizer(1.5, f(1.5), df(1.5), 3.0, f(3.0), df(3.0)) == pytest.approx(2.0)
    assert cubic_minimizer(1.5, f(1.5), df(1.5), 3.0, f(3.0), df(3.0), bounds=(2.5, 3.0)) == 2.5


def test_a_line_search_that_keeps_its_start_twice_at_one_step_size_marks_the_problem_stuck():
    """In float32 least squares the search ends at t = 0 once round-off hides every decrease; it stores no
    curvature pair, so the next step repeats it exactly: the problem is marked stuck, not stepped in place."""
    torch.manual_seed(0)
    A, c = torch.randn(80, 50), torch.randn(80)
    loss = lambda z: ((A @ z - c) ** 2).sum()  # noqa: E731
    opt, evaluate = LBFGS(1.0), _Counted(loss)
    X = torch.randn(1, 50)
    F, G, aux = evaluate([0], X)
    for _ in range(300):
        if 0 in opt.stuck:
            break
        X2, F2, G, aux = opt.step([0], X, F, G, aux, evaluate)
        moved, X, F = not torch.equal(X2, X), X2, F2
    assert opt.stuck == {0} and not moved and opt.problems[0].t == 0.0
    assert not opt.stalled  # a descent direction, only no decrease along it


def test_a_trial_that_is_not_finite_is_backtracked_from_never_returned():
    """log(3 - |z|^2) is NaN beyond |z|^2 = 3: where torch's search extrapolates there and returns the NaN point,
    ours bisects back towards the last finite one."""
    loss = lambda z: (z - 0.5).pow(2).sum() + torch.log(3.0 - z.pow(2).sum())  # noqa: E731
    opt, evaluate = LBFGS(1.0), _Counted(loss)
    X = torch.zeros(1, 3, dtype=torch.float64)
    F, G, aux = evaluate([0], X)
    seen = [F[0]]
    for _ in range(5):
        X, F, G, aux = opt.step([0], X, F, G, aux, evaluate)
        seen.append(F[0])
    assert all(math.isfinite(v) for v in seen) and all(b <= a for a, b in zip(seen, seen[1:]))
    assert float(X.pow(2).sum()) < 3.0
