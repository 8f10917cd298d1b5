"""Why APRIL refuses b < d: the two blocks it needs, read from an SRHT message with the rest of g taken as noise.

For vit_small (float64, its random weights, one photo) this prints the share of ||g|| the position-embedding,
class-token and patch-embedding blocks hold, the spread of G's singular values, the unknowns of the smallest
linear model of the rest of g (every nn.Linear's [dW | db] of rank at most its input rows, the position embedding
and the patches, every other coordinate free), and for each b/d the relative
error of the blocks estimated from y = R g (the back-projection R^T y, and least squares over the blocks alone by
CGLS) and the PSNR of the photo APRIL's closed form then gives.  docs/attacks/april.md quotes its output.

    python scripts/april_sketched_blocks.py [--image-index I] [--ratios 0.5,0.9,0.99]

With ``--run DIR`` (a run folder of gradient matching on vit_small through a sketch) it asks instead whether the
closed form can finish that reconstruction x^: how far g(x^) is from g (whole and blocks), the blocks corrected by
least squares on the message's residual y - R g(x^), and the PSNR of the closed form from those blocks and from the
exact blocks when the patches are held near x^'s (Tikhonov: min ||G^T P - dF/dW||^2 + lam ||P - P^||^2).

    python scripts/april_sketched_blocks.py --run DIR
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import targets
from leakattack import metrics
from leakattack.attacks.analytic import _input_ranks, cgls
from leakattack.attacks.april import _find_embedding, fold_patches, solve_patches
from leakattack.config import RunConfig
from leakattack.data import get_dataset
from leakattack.experiment import prepare
from leakattack.results import read_json
from leakattack.script import fractions, index, parser, script_main, seed
from leakattack.sketch import make_sketch

#: Tikhonov weights tried by ``--run`` (G's squared singular values span about 3e-10 to 2e-2 on vit_small)
LAMBDAS = (0.0, 1e-12, 1e-10, 1e-8, 1e-6, 1e-4)


def structured_unknowns(victim, emb, cls) -> int:
    """Unknowns of g modelled as: each nn.Linear's [dW | db] a matrix of rank r <= its input rows (r (out + cols - r)
    numbers), the position embedding's gradient (the class token's is its first row) and the patches, every other
    coordinate free."""
    rows = _input_ranks(victim)
    covered, count = set(), 0
    for mod in victim.model.modules():
        if isinstance(mod, torch.nn.Linear) and mod.weight.requires_grad:
            cols = mod.in_features + (mod.bias is not None)
            r = min(rows.get(id(mod), 1), mod.out_features, cols)
            count += r * (mod.out_features + cols - r)
            covered |= {id(p) for p in mod.parameters()}
    n = emb.grid[0] * emb.grid[1]
    count += (emb.pos.stop - emb.pos.start) + n * emb.conv.weight[0].numel()
    covered |= {id(p) for p in emb.conv.parameters()}
    special = {s.start for s in [emb.pos, *cls]}
    slices = targets.param_slices(victim)
    for name, p in victim.model.named_parameters():
        if p.requires_grad and id(p) not in covered and slices[name].start not in special:
            count += p.numel()
    return count


def held_near(G: torch.Tensor, dW: torch.Tensor, P0: torch.Tensor, lam: float) -> torch.Tensor:
    """argmin_P ||G^T P - dW||^2 + lam ||P - P0||^2 through G's SVD (G: n x D of rank n), lam = 0: the closed form."""
    if lam == 0:
        return solve_patches(G, dW)[0]
    U, S, Vh = torch.linalg.svd(G, full_matrices=False)
    return U @ ((S[:, None] * (Vh @ dW) + lam * (U.T @ P0)) / (S[:, None] ** 2 + lam)) + P0 - U @ (U.T @ P0)


def from_run(folder: str) -> None:
    """The closed form started from a gradient-matching run's reconstruction (see the module's docstring)."""
    p = prepare(RunConfig.from_dict(read_json(f"{folder}/config.json")["run"]))
    victim, y, R, x, labels = p.obs.victim, p.obs.y.flatten(), p.obs.linear_map, p.x, p.case.labels
    assert x is not None and labels is not None and victim.name == "vit_small"
    xh = torch.load(f"{folder}/reconstruction.pt")["images"].to(x)
    emb, _ = _find_embedding(victim)
    assert emb is not None
    n, dim = emb.grid[0] * emb.grid[1], emb.conv.out_channels
    idx = torch.cat([torch.arange(s.start, s.stop) for s in (emb.pos, emb.weight)])
    g, gh = (targets.flat_gradient(victim, v, labels) for v in (x, xh))

    def error(v, part=slice(None)):
        return float((v[part] - g[part]).norm() / g[part].norm())

    def A(z):
        u = torch.zeros(victim.d, dtype=z.dtype)
        u[idx] = z
        return R.apply(u)

    residual = y - R.apply(gh)
    fixed = gh.clone()
    fixed[idx] += cgls(A, lambda u: R.adjoint(u)[idx], residual, torch.zeros(idx.numel(), dtype=x.dtype), 50)
    P0 = F.unfold(xh, emb.conv.kernel_size, stride=emb.conv.kernel_size)[0].T

    def psnr(v, lam):
        G = v[emb.pos].reshape(emb.tokens, dim)[emb.offset:emb.offset + n]
        P = held_near(G, v[emb.weight].reshape(dim, -1), P0, lam)
        return float(metrics.psnr(fold_patches(P, emb.conv.kernel_size, victim.input_shape[1:]).clamp(0, 1), x))

    print(f"{folder}: reconstruction {float(metrics.psnr(xh.clamp(0, 1), x)):.2f} dB; ||y - R g(x^)|| / ||y|| = "
          f"{float(residual.norm() / y.norm()):.3g}; g(x^) against g: {error(gh):.3g} whole, {error(gh, idx):.3g} "
          f"blocks; blocks corrected by least squares on the residual: {error(fixed, idx):.3g}")
    for name, v in (("corrected blocks", fixed), ("exact blocks", g)):
        print(f"closed form from the {name}, patches held near x^'s: "
              + ", ".join(f"lam {lam:g} {psnr(v, lam):.2f} dB" for lam in LAMBDAS))


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--image-index", type=index, default=0, help="the attacked photo")
    ap.add_argument("--ratios", type=fractions, default="0.5,0.9,0.99", help="the sketches' b/d, each in (0, 1]")
    ap.add_argument("--seed", type=seed, default=1, help="sketch seed")
    ap.add_argument("--run", help="a gradient-matching run folder of vit_small: start the closed form from it")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.run:
        return from_run(args.run)
    victim = targets.get_model("vit_small", seed=0).to(dtype=torch.float64)
    data = get_dataset("photos")
    i = args.image_index
    x, labels = data.images[i:i + 1].double(), data.labels[i:i + 1]
    g = targets.flat_gradient(victim, x, labels)
    emb, _ = _find_embedding(victim)
    n, dim = emb.grid[0] * emb.grid[1], emb.conv.out_channels
    names = {id(p): name for name, p in victim.model.named_parameters()}
    slices = targets.param_slices(victim)
    cls = [slices[names[id(p)]] for p in victim.model.parameters() if p.shape == (1, 1, dim)]  # a class token
    blocks = [emb.pos, emb.weight] + ([emb.bias] if emb.bias is not None else []) + cls
    idx = torch.cat([torch.arange(s.start, s.stop) for s in blocks])

    def psnr(gh):
        G = gh[emb.pos].reshape(emb.tokens, dim)[emb.offset:emb.offset + n]
        P, _ = solve_patches(G, gh[emb.weight].reshape(dim, -1))
        xh = fold_patches(P, emb.conv.kernel_size, victim.input_shape[1:])
        return float(metrics.psnr(xh.clamp(0, 1), x).mean())

    G = g[emb.pos].reshape(emb.tokens, dim)[emb.offset:emb.offset + n]
    S = torch.linalg.svdvals(G)
    print(f"vit_small, photo {i}: d = {victim.d}, blocks {idx.numel()} numbers holding "
          f"{float(g[idx].norm() / g.norm()):.3f} of ||g||; G's singular values {float(S[0]):.3g} to "
          f"{float(S[-1]):.3g}; unsketched PSNR {psnr(g):.1f} dB")
    print(f"structured unknowns: {structured_unknowns(victim, emb, cls)} (b = d/2 is {victim.d // 2})")
    for ratio in args.ratios:
        R = make_sketch("srht", victim.d, int(ratio * victim.d), seed=args.seed)
        y = R.apply(g)
        back = R.adjoint(y)

        def A(z):
            u = torch.zeros(victim.d, dtype=z.dtype)
            u[idx] = z
            return R.apply(u)

        fit = torch.zeros_like(g)
        fit[idx] = cgls(A, lambda u: R.adjoint(u)[idx], y, back[idx], 50)
        err = [float((v[idx] - g[idx]).norm() / g[idx].norm()) for v in (back, fit)]
        print(f"srht b/d = {ratio}: back-projection block error {err[0]:.3g}, PSNR {psnr(back):.1f} dB; "
              f"least squares over the blocks, error {err[1]:.3g}, PSNR {psnr(fit):.1f} dB")


if __name__ == "__main__":
    script_main(main)
