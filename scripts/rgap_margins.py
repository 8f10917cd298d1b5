"""Where R-GAP puts a ReLU unit's threshold: its own standard errors against the layer-wide noise margin.

For LeNet with ReLUs (photos 0..N-1, unsketched, the message in float32 and in float64), R-GAP runs as
``leakattack run --model lenet --model-param act=relu --attack rgap --sketch none --dtype D`` would, and at every
ReLU layer whose threshold the layer above's standard errors set it records the solved outputs a and their standard
errors se.  Against the victim's own activations on the photo (the truth, which the attack never sees) it prints per
layer: the largest |a| / se of the inactive units and the smallest a / se of the active ones (``SE_MARGIN`` must
fall between them), the largest round-off of an inactive unit and the smallest active output (as fractions of the
layer's largest output: the layer-wide rule ``NOISE_MARGIN`` needs the first well below the second), the units each
rule puts on the wrong side, and the run's PSNR and stop reason.

    python scripts/rgap_margins.py [--images 3]
"""

from __future__ import annotations

from unittest import mock

import torch

from leakattack.attacks import rgap
from leakattack.config import RunConfig
from leakattack.experiment import prepare
from leakattack.metrics.image import psnr
from leakattack.script import count, parser, script_main


def margins(index: int, dtype: str) -> list[list]:
    """One row per ReLU layer R-GAP thresholded by standard errors (see the module's docstring)."""
    p = prepare(RunConfig(model="lenet", model_params={"act": "relu"}, attack="rgap", sketch="none", dtype=dtype,
                          image_index=index, threads=1))
    victim, x = p.obs.victim, p.x
    assert x is not None
    truth: list[torch.Tensor] = []
    hooks = [m.register_forward_hook(lambda m, i, o: truth.append(o.detach().double().reshape(-1)))
             for m in victim.model.modules() if isinstance(m, torch.nn.ReLU)]
    with torch.no_grad():
        victim.model(x)
    for h in hooks:
        h.remove()
    seen: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []
    calls = iter(range(len(truth) - 1, -1, -1))  # R-GAP thresholds the layers from the head down
    inverse = rgap._inverse

    def record(act, a, eps, se=None):
        layer = next(calls)
        if se is not None:  # R-GAP's own rule with the standard errors, and without them (the layer-wide margin)
            by_se, by_layer = inverse(act, a, eps, se)[1], inverse(act, a, eps)[1]
            seen.append((layer, a.detach().reshape(-1).clone(), se.detach().reshape(-1).clone(),
                         by_se.reshape(-1) > 0, by_layer.reshape(-1) > 0))
        return inverse(act, a, eps, se)

    with mock.patch.object(rgap, "_inverse", side_effect=record):
        result = p.attack.reconstruct(p.obs)
    quality = f"{float(psnr(result.x.clamp(0, 1), x)):.2f} dB, {result.stop_reason}"
    rows = []
    for layer, a, se, by_se, by_layer in seen:
        on = truth[layer] > 0
        top = float(a.abs().max())
        rows.append([index, dtype, f"ReLU {layer + 1}", f"{int(on.sum())} of {on.numel()}",
                     f"{float((a[~on] / se[~on]).abs().max()):.2f}", f"{float((a[on] / se[on]).min()):.3g}",
                     f"{float(a[~on].abs().max()) / top:.1e}", f"{float(a[on].min()) / top:.1e}",
                     int((by_se != on).sum()), int((by_layer != on).sum()), quality])
    return rows


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--images", type=count, default=3, help="photos 0..N-1")
    a = ap.parse_args()
    print(f"| photo | dtype | layer | active | inactive: max abs(a) / se | active: min a / se | inactive: max abs(a) "
          f"| active: min a | wrong by {rgap.SE_MARGIN:g} se | wrong by {rgap.NOISE_MARGIN:g} x max(-a) | run |")
    print("|" + "---|" * 11)
    for index in range(a.images):
        for dtype in ("float32", "float64"):
            for row in margins(index, dtype):
                print("| " + " | ".join(str(c) for c in row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    script_main(main)
