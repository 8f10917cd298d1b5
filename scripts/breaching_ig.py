"""breaching 0.1.2's Inverting Gradients on one photo of leakattack's embedded set (docs/ig_recipe.md).

Runs in a separate environment with breaching (it pins its own dependencies):

    python3 -m venv /tmp/breaching-venv
    /tmp/breaching-venv/bin/pip install --no-deps breaching==0.1.2
    /tmp/breaching-venv/bin/pip install torch==2.14.1 torchvision==0.29.1 hydra-core scipy
    python -c "import torch; from leakattack.data import load_photos as l; d = l(); \
torch.save({'images': d.images, 'labels': d.labels}, '/tmp/photos.pt')"        # in leakattack's venv
    /tmp/breaching-venv/bin/python scripts/breaching_ig.py /tmp/photos.pt --steps 1000 --image-index 0

Case ``1_single_image_small`` with ``case.model=resnet18``, attack ``invertinggradients`` with
``max_iterations`` set to --steps; the photo (in [0, 1]) is normalised with breaching's CIFAR-10 mean
and std and handed to the user as its data.  ``--bn eval`` (breaching's default: the server sends its
BatchNorm buffers) or ``--bn train`` (no public buffers: batch statistics, as leakattack's default).
Prints one JSON line: PSNR of the clamped [0, 1] reconstruction against the photo, attack wall time.
"""

import argparse
import json
import logging
import time

import breaching
import numpy as np
import torch

parser = argparse.ArgumentParser()
parser.add_argument("photos")
parser.add_argument("--steps", type=int, default=1000)
parser.add_argument("--image-index", type=int, default=0)
parser.add_argument("--bn", choices=("eval", "train"), default="eval")
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--save", default=None, help="write the reconstruction (1, 3, 32, 32) in [0, 1] here")
args = parser.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)
logging.basicConfig(level=logging.INFO, format="%(message)s")

cfg = breaching.get_config(overrides=["case=1_single_image_small", "case.model=resnet18",
                                      "attack=invertinggradients", f"attack.optim.max_iterations={args.steps}",
                                      "attack.optim.callback=100",
                                      f"case.server.provide_public_buffers={args.bn == 'eval'}"])
setup = {"device": torch.device("cpu"), "dtype": torch.float}
model, loss_fn = breaching.cases.construct_model(cfg.case.model, cfg.case.data, pretrained=cfg.case.server.pretrained)
server = breaching.cases.construct_server(model, loss_fn, cfg.case, setup)
model = server.vet_model(model)
user = breaching.cases.users.UserSingleStep(model, loss_fn, None, setup, idx=0, cfg_user=cfg.case.user)
user.data_key = "inputs"  # set by _load_data, which custom data skips

photos = torch.load(args.photos)
i = args.image_index
x, label = photos["images"][i:i + 1].float(), photos["labels"][i:i + 1]
dm = torch.tensor(cfg.case.data.mean)[None, :, None, None]
ds = torch.tensor(cfg.case.data.std)[None, :, None, None]
payload = server.distribute_payload()
shared, _ = user.compute_local_updates(payload, custom_data={"inputs": (x - dm) / ds, "labels": label})
attacker = breaching.attacks.prepare_attack(server.model, server.loss, cfg.attack, setup)
t0 = time.perf_counter()
rec, _ = attacker.reconstruct([payload], [shared], {}, dryrun=False)
wall = time.perf_counter() - t0
out = (rec["data"] * ds + dm).clamp(0, 1)
mse = (out - x).pow(2).mean().item()
if args.save:
    torch.save(out, args.save)
print(json.dumps({"steps": args.steps, "image_index": i, "bn": args.bn, "psnr": 10 * np.log10(1 / mse),
                  "attack_wall_s": round(wall, 1), "threads": args.threads}))
