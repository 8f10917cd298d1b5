"""The sketch operator interface shared by every sketch family.

A sketch is a random linear map R: R^d -> R^b known to the attacker through its
seed.  Operators are matrix-free: ``apply`` computes R v and ``adjoint`` R^T u,
both batched over leading dimensions and differentiable with autograd.
"""

from __future__ import annotations

import inspect
from typing import Callable

import numpy as np
import torch

from ..errors import UserError

DENSE_LIMIT = 2 ** 24
"""Above this many entries (b*d) no operator may hold a dense b x d matrix."""
#: Lanczos stops when the top Ritz value changes by less than this (relative), or after LANCZOS_MAX_ITER steps.
LANCZOS_TOL, LANCZOS_MAX_ITER = 1e-9, 500
#: a Ritz value approaches the top eigenvalue from below, so ||R|| by Lanczos is raised by this (relative) to stay an
#: upper bound, as a sensitivity must (Lanczos stops when its estimate moves by less than LANCZOS_TOL;
#: tests/sketch/test_operator_norm.py checks the raised value against the dense spectral norm)
LANCZOS_MARGIN = 1e-6


def lanczos_top_eigenvalue(matvec: Callable[[torch.Tensor], torch.Tensor], n: int, *, seed: int = 0,
                           tol: float = LANCZOS_TOL, max_iter: int = LANCZOS_MAX_ITER,
                           device=None) -> float:
    """Largest eigenvalue of a symmetric PSD n x n operator by Lanczos with full reorthogonalisation, in float64
    (Golub & Van Loan, Matrix Computations, 4th ed., Alg. 10.1.1)."""
    from scipy.linalg import eigvalsh_tridiagonal  # slow to import: only when an operator norm is asked for

    gen = torch.Generator().manual_seed(int(seed))
    q = torch.randn(n, generator=gen, dtype=torch.float64).to(device)
    q /= q.norm()
    basis = torch.empty(min(n, max_iter), n, dtype=torch.float64, device=device)
    alphas: list[float] = []
    betas: list[float] = []
    theta = prev = 0.0
    for k in range(basis.shape[0]):
        basis[k] = q
        w = matvec(q)
        alphas.append(float(q @ w))
        Q = basis[: k + 1]
        for _ in range(2):  # Gram-Schmidt twice against the whole basis ("twice is enough", Parlett)
            w = w - Q.T @ (Q @ w)
        theta = float(eigvalsh_tridiagonal(np.array(alphas), np.array(betas), select="i",
                                           select_range=(k, k))[0])
        if k and abs(theta - prev) <= tol * abs(theta):
            break
        beta = float(w.norm())
        if beta <= 1e-12 * abs(theta):  # the Krylov space is invariant: theta is exact
            break
        betas.append(beta)
        q, prev = w / beta, theta
    return theta


class LinearMap(torch.autograd.Function):
    """y = A v for a linear map computed outside autograd; its backward is A^T.

    ``LinearMap.apply(v, A, AT)`` with callables A and AT (each the other's
    transpose).  Autograd then stores no intermediate tensors, only the two
    callables, which keeps regenerated or transformed operators O(d) in memory.
    """

    @staticmethod
    def forward(v, A, AT):
        return A(v)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.maps = inputs[1:]

    @staticmethod
    def backward(ctx, g):
        A, AT = ctx.maps
        return LinearMap.apply(g, AT, A), None, None

    @staticmethod
    def vmap(info, in_dims, v, A, AT):
        """Under ``torch.vmap`` (batched gradients): A maps every row of a stack of vectors at once."""
        if in_dims[0] is None:
            return A(v), None
        return A(v.movedim(in_dims[0], 0)), 0


class Sketch:
    """Base class: holds ``kind, d, b, seed``; subclasses implement ``_apply``/``_adjoint``.

    Subclasses draw all randomness in ``__init__`` (or lazily, from ``seed``) on the
    CPU with a ``torch.Generator``/``numpy`` generator, so the same seed gives the
    same R on every device (torch's normal sampler, which ``gaussian`` uses, rounds
    differently on CPUs with and without AVX2: docs/sketches.md); ``to(device)``
    moves cached tensors.
    """

    kind: str = "base"
    identity: bool = False  #: R = I (b = d): nothing is compressed
    #: a run has worded what this sketch's products cost (a regenerated dense R's note), which observe then does not
    #: repeat
    cost_told: bool = False

    #: parameter name -> (description of the valid values, check(value, b) -> bool); none by default
    param_rules: dict = {}

    @classmethod
    def check_params(cls, params: dict, b: int | None = None) -> None:
        """Refuse unknown names and bad values of the family's parameters in one sentence (b: skip checks needing
        it)."""
        for name, value in params.items():
            if name not in cls.param_rules:
                allowed = ", ".join(cls.param_rules) or "none"
                hint = ""
                if name in inspect.signature(cls.__init__).parameters:  # taken by the constructor, not declared
                    hint = (f" (its constructor takes {name}=, and a family's parameters are declared in its "
                            f"param_rules: {{'{name}': (description, check(value, b) -> bool)}})")
                raise UserError(f"sketch '{cls.kind}' has no parameter '{name}'; allowed: {allowed}{hint}")
            what, ok = cls.param_rules[name]
            if not ok(value, b):
                raise UserError(f"sketch '{cls.kind}': {name} must be {what}, got {value!r}")

    #: whether :meth:`adjoint_columns` computes from the family's random draws without building R
    draws_columns: bool = False

    @classmethod
    def column_work_length(cls, d: int) -> int | None:
        """The length of the row :meth:`adjoint_columns` holds per seed while it reads columns (None: no such row)."""
        return None

    @classmethod
    def adjoint_columns(cls, seed_list, y: torch.Tensor, cols: np.ndarray, *, d: int, b: int,
                        **params) -> torch.Tensor:
        """(R_s^T y)[cols] for each seed s of ``seed_list``: a (K, len(cols)) float64 tensor.

        What a seed search scores: a few coordinates of R^T y for many candidate
        seeds.  This default builds each R; a family whose draws give those
        coordinates directly overrides it (``draws_columns = True``) with the same
        draws its constructor makes, so the two cannot drift apart.
        """
        idx = torch.as_tensor(np.asarray(cols, dtype=np.int64))
        out = torch.empty(len(seed_list), len(idx), dtype=torch.float64)
        for i, s in enumerate(seed_list):
            out[i] = cls(d=d, b=b, seed=int(s), **params).adjoint(y).detach()[idx]
        return out

    def __init__(self, d: int, b: int, seed: int):
        self.d = int(d)
        self.b = int(b)
        self.seed = int(seed)
        self.device = torch.device("cpu")

    # -- public API -------------------------------------------------------
    def apply(self, v: torch.Tensor) -> torch.Tensor:
        """R v for v of shape (..., d); returns (..., b).  Cached tensors follow v's device.  A v that is not a
        floating-point tensor whose last dimension is d is one UserError sentence."""
        self._check(v, "apply", "v", self.d, "d")
        if v.device != self.device:
            self.to(v.device)
        return self._returned(self._apply(v), v, "_apply", self.b, "b")

    def adjoint(self, u: torch.Tensor) -> torch.Tensor:
        """R^T u for u of shape (..., b); returns (..., d).  A u that is not a floating-point tensor whose last
        dimension is b is one UserError sentence."""
        self._check(u, "adjoint", "u", self.b, "b")
        if u.device != self.device:
            self.to(u.device)
        return self._returned(self._adjoint(u), u, "_adjoint", self.d, "d")

    def _returned(self, out, t: torch.Tensor, method: str, n: int, dim: str) -> torch.Tensor:
        """``out`` if it is a tensor of ``t``'s shape with its last dimension ``n``, dtype and device, else one
        UserError sentence naming the family's method (a shape, dtype and device comparison: no device sync)."""
        want = (*t.shape[:-1], n)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
            got = f"shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
            raise UserError(f"{self.kind} sketch {method} returned {got} for an input of shape {tuple(t.shape)}; it "
                            f"must return shape {want} (last dimension {dim} = {n})")
        if out.dtype != t.dtype or out.device != t.device:
            raise UserError(f"{self.kind} sketch {method} returned a {str(out.dtype).removeprefix('torch.')} tensor "
                            f"on {out.device} for a {str(t.dtype).removeprefix('torch.')} input on {t.device}; it "
                            "must return its input's dtype and device")
        return out

    def _check(self, t, method: str, arg: str, n: int, dim: str) -> None:
        """Refuse what ``method`` cannot map in one sentence (a type, shape and dtype comparison: no device sync)."""
        if not isinstance(t, torch.Tensor):
            raise UserError(f"{self.kind} sketch {method}({arg}) takes a torch tensor of shape (..., {n}), got "
                            f"{type(t).__name__}")
        if t.ndim == 0 or t.shape[-1] != n:
            raise UserError(f"{self.kind} sketch {method}({arg}) takes a tensor whose last dimension is {dim} = {n}, "
                            f"got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise UserError(f"{self.kind} sketch {method}({arg}) takes a floating-point tensor, got {t.dtype} "
                            f"(convert it with {arg}.float() or {arg}.double())")

    __call__ = apply

    def readout_variance(self) -> float:
        """The variance of <m, R^T R g> - <m, g> per ||m||^2 ||g||^2 over the draw of R, for fixed m and g that are
        spread over many coordinates and nearly orthogonal (label recovery's noise model, Lemma D.11's O(1/b)): 1/b
        for a sketch that mixes coordinates (gaussian, ams, countsketch, sparse, and by default a family registered
        from outside); a family that samples the rows of an orthogonal transform without replacement has the
        finite-population 1/b - 1/n, and R = I none.  It is a model, not a bound: for a Gaussian R the variance is
        (1 + cos^2(m, g)) / b, up to 2/b where m and g are parallel, and coordinate sampling of vectors held by
        few coordinates varies up to about d/b times more."""
        return 0.0 if self.identity else 1.0 / self.b

    def nonzero_rows(self) -> int:
        """The rows of R that are not all zero, a bound on its rank and so on the independent numbers the message
        holds: b unless the family knows better (a count sketch leaves a bucket no column hashes to as a zero row)."""
        return self.b

    def operator_norm(self) -> float:
        """||R||_2, the largest singular value of R (computed once, then cached on the object)."""
        if "_operator_norm_cache" not in self.__dict__:
            self._operator_norm_cache = float(self._operator_norm())
        return self._operator_norm_cache

    def _operator_norm(self) -> float:
        """Default for families without a closed form: Lanczos on the smaller of R R^T and R^T R, matrix-free, raised
        by :data:`LANCZOS_MARGIN` (relative) so that it does not fall below ||R||."""
        with torch.no_grad():
            if self.b <= self.d:
                top = lanczos_top_eigenvalue(lambda u: self.apply(self.adjoint(u)), self.b, device=self.device)
            else:
                top = lanczos_top_eigenvalue(lambda v: self.adjoint(self.apply(v)), self.d, device=self.device)
        return max(top, 0.0) ** 0.5 * (1 + LANCZOS_MARGIN)

    def to_dense(self) -> torch.Tensor:
        """The b x d matrix (only for small sketches: b*d <= 2**24)."""
        if self.b * self.d > DENSE_LIMIT:
            raise ValueError(f"to_dense() refused: b*d = {self.b * self.d} > 2**24")
        eye = torch.eye(self.d, dtype=torch.float64, device=self.device)
        return self.apply(eye).T.contiguous()

    def to(self, device) -> "Sketch":
        """Move cached index/sign tensors to ``device`` (in place); returns self."""
        self.device = torch.device(device)
        for name, val in list(vars(self).items()):
            if isinstance(val, torch.Tensor):
                setattr(self, name, val.to(self.device))
        return self

    def describe(self) -> dict:
        """kind, d, b, seed and every family parameter that changes R: ``sketch_from_description`` rebuilds the same
        operator from it (config.json, message files)."""
        return {"kind": self.kind, "d": self.d, "b": self.b, "seed": self.seed}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(d={self.d}, b={self.b}, seed={self.seed})"

    # -- to implement -----------------------------------------------------
    def _apply(self, v: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def _adjoint(self, u: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError


def readout_variance(linear_map) -> float:
    """:meth:`Sketch.readout_variance` of a sketch or of a map that has one (a protocol's message map); for another
    linear map of b outputs and d inputs, the finite-population 1/b - 1/d."""
    own = getattr(linear_map, "readout_variance", None)
    if callable(own):
        return float(own())
    return max(0.0, 1.0 / linear_map.b - 1.0 / linear_map.d)
