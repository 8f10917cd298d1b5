"""Train a BatchNorm victim (ResNet-20 by default) on random 32 px crops of the embedded photographs.

The embedded ``photos`` set holds only 50 fixed crops (ten photographs, five crops
each), too few to train a ResNet on.  This recipe draws fresh crops every step
from the ten scikit-image photographs the set is cut from, shrunk to a
shorter side of 160 px (square boxes of 15-100 % of the photograph's shorter side at random
positions, random horizontal flips, resized to the set's size), labelled by
photograph as the ``photos`` set is.  The crops cover the attacked ones too:
the attacked client's images belong to the training distribution, as in
federated learning.  SGD with momentum 0.9, weight decay 5e-4, a cosine step
size from 0.05, batch 32; BatchNorm in train mode with its default momentum, so
the saved running statistics are those of the photo crops, the statistics a
server holds after training.  Centralised training, a stand-in for the model a
federation would reach (``leakattack train`` checkpoints carry the running
statistics too, but federated rounds see only the 40 fixed crops of the set's
training split).

Writes a state_dict (weights and BatchNorm running statistics) that
``leakattack run --model MODEL --weights OUT`` loads, and prints the accuracy on
the 50 embedded crops (not held out: they are regions of the training
photographs).

    python scripts/train_photo_victim.py --out resnet20_photos.pt [--model resnet20] [--steps 200]
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch
import torch.nn.functional as F

import targets
from leakattack.data import get_dataset
from leakattack.data.embedded import PHOTO_NAMES
from leakattack.script import count, one_of, out_file, parser, positive, script_main, seed, thread_count

#: defaults of the recipe (a few minutes on a 2-core CPU for resnet20)
STEPS, BATCH, LR, SIZE = 200, 32, 0.05, 32
#: shorter side (px) the photographs are shrunk to before cropping
SHORT_SIDE = 160


def photographs() -> list[torch.Tensor]:
    """The ten photographs of the photos set as (3, H, W) float tensors in [0, 1], in class order."""
    import skimage.data

    out = []
    for name in PHOTO_NAMES:
        img = np.asarray(getattr(skimage.data, name)(), dtype=np.float32) / 255.0
        if img.ndim == 2:
            img = np.repeat(img[:, :, None], 3, axis=2)
        t = torch.from_numpy(np.ascontiguousarray(img[:, :, :3])).permute(2, 0, 1).unsqueeze(0)
        scale = SHORT_SIDE / min(t.shape[2:])  # shrunk once: cropping the full photographs is the slow part
        t = F.interpolate(t, scale_factor=scale, mode="bilinear", antialias=True, align_corners=False)
        out.append(t[0].clamp(0, 1).contiguous())
    return out


def random_crops(photos: list[torch.Tensor], n: int, size: int, g: torch.Generator):
    """n random square crops (box 15-100 % of the shorter side, random flip) resized to size; and their labels."""
    labels = torch.randint(len(photos), (n,), generator=g)
    images = []
    for c in labels.tolist():
        img = photos[c]
        h, w = img.shape[1:]
        side = int(min(h, w) * (0.15 + 0.85 * torch.rand((), generator=g).item()))
        top = int(torch.randint(h - side + 1, (), generator=g))
        left = int(torch.randint(w - side + 1, (), generator=g))
        patch = img[:, top:top + side, left:left + side].unsqueeze(0)
        patch = F.interpolate(patch, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        if torch.rand((), generator=g).item() < 0.5:
            patch = patch.flip(-1)
        images.append(patch.clamp(0, 1))
    return torch.cat(images), labels


def train_photo_victim(model: str = "resnet20", steps: int = STEPS, batch: int = BATCH, lr: float = LR,
                       seed: int = 0, size: int = SIZE, log=None) -> tuple[torch.nn.Module, dict]:
    """Train ``model`` (built with ``seed``, as ``leakattack run --seed`` builds it) on random photo crops;
    returns the module (eval mode) and {accuracy on the embedded crops, last loss, seconds}."""
    ds = get_dataset("photos", image_size=size)
    victim = targets.get_model(model, num_classes=ds.num_classes, in_shape=ds.in_shape, seed=seed)
    net = victim.model
    for m in targets.victim.batchnorm_layers(net):  # the victim's train mode freezes them; training updates them
        m.track_running_stats = True
    g = torch.Generator().manual_seed(seed)
    photos = photographs()
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4, nesterov=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    net.train()
    t0, loss = time.perf_counter(), float("nan")
    for step in range(steps):
        x, y = random_crops(photos, batch, size, g)
        out = F.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        out.backward()
        opt.step()
        sched.step()
        loss = float(out.detach())
        if log is not None and (step % 50 == 0 or step == steps - 1):
            log(f"step {step}: loss {loss:.3f} ({time.perf_counter() - t0:.0f} s)")
    net.eval()
    with torch.no_grad():
        acc = (net(ds.images).argmax(1) == ds.labels).float().mean().item()
    return net, {"embedded_acc": acc, "loss": loss, "seconds": time.perf_counter() - t0, "steps": steps}


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--out", type=out_file, required=True, help="state_dict file to write (its folder must exist)")
    ap.add_argument("--model", type=one_of(targets.list_models, "model", files=True), default="resnet20")
    ap.add_argument("--steps", type=count, default=STEPS)
    ap.add_argument("--batch", type=count, default=BATCH)
    ap.add_argument("--lr", type=positive, default=LR)
    ap.add_argument("--seed", type=seed, default=0, help="model and crop seed (leakattack run's --seed)")
    ap.add_argument("--threads", type=thread_count, default=None, help="torch threads, or all (default: torch's)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    net, info = train_photo_victim(a.model, a.steps, a.batch, a.lr, a.seed, log=print)
    torch.save(net.state_dict(), a.out)
    print(f"{a.model}: {info['steps']} steps in {info['seconds']:.0f} s, last loss {info['loss']:.3f}, "
          f"accuracy on the 50 embedded crops {info['embedded_acc']:.3f} -> {a.out}")
    return 0


if __name__ == "__main__":
    script_main(main)
