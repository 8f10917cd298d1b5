"""breaching 0.1.2's Inverting Gradients on photos of leakattack's embedded set (docs/ig_recipe.md,
docs/trained-victims.md#batches).

Runs in a separate environment with breaching (it pins its own dependencies) and leakattack (its metrics and
models):

    python3 -m venv /tmp/breaching-venv
    /tmp/breaching-venv/bin/pip install --no-deps breaching==0.1.2
    /tmp/breaching-venv/bin/pip install torch==2.14.1 torchvision==0.29.1 hydra-core -e .   # -e .: leakattack
    python -c "import torch; from leakattack.data import load_photos as l; d = l(); \
torch.save({'images': d.images, 'labels': d.labels}, '/tmp/photos.pt')"        # in leakattack's venv
    /tmp/breaching-venv/bin/python scripts/breaching_ig.py /tmp/photos.pt --steps 1000 --image-index 0

Case ``1_single_image_small`` with ``case.model=resnet18``, attack ``invertinggradients`` with
``max_iterations`` set to --steps (its step-size decays at 3/8, 5/8 and 7/8 of them); the photo (in [0, 1])
is normalised with breaching's CIFAR-10 mean and std and handed to the user as its data.  ``--bn eval``
(breaching's default: the server sends its BatchNorm buffers) or ``--bn train`` (no public buffers: batch
statistics, as leakattack's default).

``--victim NAME`` attacks one of leakattack's models instead (``--weights``: its state_dict, e.g. from
scripts/train_photo_victim.py, or a ``leakattack train`` checkpoint; ``--model-param act=tanh`` for the units that
training used); it reads breaching's normalised data through the inverse normalisation, so it
sees the photo in [0, 1] and sends the gradient leakattack's message holds.  ``--batch-size B`` sends photos
I .. I+B-1 as one gradient, their labels provided to the attack as the case's user provides them.
``--attack seethroughgradients`` runs breaching's GradInversion config instead (Yin et al. 2021: Euclidean
objective, Adam with a cosine step size and Langevin noise, TV, a norm term and DeepInversion's BatchNorm prior
against the model's buffers, its first layer's term weighted 10x; ``--deep-inversion`` sets that prior's scale, 0
turns it off).  ``--seed`` changes its random start; ``--tv-edges none`` drops the border terms of its TV (the
differences against its zero padding) to compare with leakattack's TV.  ``--label-strategies`` prints instead
what each of breaching's label strategies reads from that gradient.

Prints one JSON line: PSNR (per image and mean) and SSIM of the clamped [0, 1] reconstructions, each scored
against the photo it is matched to as leakattack matches a batch (``leakattack.metrics.match``), how flat they
are beside the photos (``pixel_std``) and the attack's wall time.
"""

import argparse
import json
import logging
import time

import torch

from leakattack.metrics import label_overlap, match
from leakattack.metrics.image import psnr, ssim

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("photos")
parser.add_argument("--steps", type=int, default=1000)
parser.add_argument("--image-index", type=int, default=0)
parser.add_argument("--bn", choices=("eval", "train"), default="eval")
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--save", default=None, help="write the reconstruction (B, 3, 32, 32) in [0, 1] here")
parser.add_argument("--victim", default=None, help="a leakattack model name (default: breaching's resnet18)")
parser.add_argument("--weights", default=None, help="the leakattack victim's state_dict")
parser.add_argument("--model-param", action="append", default=[], metavar="KEY=VALUE",
                    help="a parameter of the leakattack victim, as `leakattack run --model-param` takes it (act=tanh: "
                         "the units a `leakattack train` checkpoint was trained with)")
parser.add_argument("--batch-size", type=int, default=1)
parser.add_argument("--seed", type=int, default=0, help="torch's seed before the attack (its random start)")
parser.add_argument("--tv-edges", choices=("padded", "none"), default="padded",
                    help="breaching's TV pads the image with zeros (the data mean, on normalised images) and so "
                         "also pulls the right and bottom rows towards it (padded, its own); none: differences "
                         "inside the image only, as leakattack's TV")
parser.add_argument("--attack", choices=("invertinggradients", "seethroughgradients"), default="invertinggradients",
                    help="breaching's attack config: Inverting Gradients (default) or its GradInversion "
                         "(see-through-gradients: Euclidean objective, Adam, TV and its DeepInversion BatchNorm prior)")
parser.add_argument("--deep-inversion", type=float, default=None, metavar="SCALE",
                    help="seethroughgradients: the scale of its DeepInversion prior (its own 0.1; 0 turns it off)")
parser.add_argument("--label-strategies", action="store_true",
                    help="print the labels each of breaching's label strategies reads from the gradient, and stop")
args = parser.parse_args()
if any("=" not in kv for kv in args.model_param):
    parser.error("--model-param takes KEY=VALUE")
if args.deep_inversion is not None and args.attack != "seethroughgradients":
    parser.error("--deep-inversion sets the prior of --attack seethroughgradients")
if args.model_param and not args.victim:
    parser.error("--model-param sets a parameter of a leakattack victim: give --victim too")
try:
    import breaching
except ImportError:
    parser.exit(2, "breaching_ig.py needs breaching 0.1.2 in its own environment (the module docstring says how to "
                   "make it): breaching is not installed here\n")
torch.set_num_threads(args.threads)
torch.manual_seed(args.seed)
logging.basicConfig(level=logging.INFO, format="%(message)s")

overrides = ["case=1_single_image_small", "case.model=resnet18", f"case.user.num_data_points={args.batch_size}",
             f"attack={args.attack}", f"attack.optim.max_iterations={args.steps}", "attack.optim.callback=100",
             f"case.server.provide_public_buffers={args.bn == 'eval'}"]
if args.deep_inversion is not None:
    overrides.append(f"attack.regularization.deep_inversion.scale={args.deep_inversion}")
cfg = breaching.get_config(overrides=overrides)
setup = {"device": torch.device("cpu"), "dtype": torch.float}
model, loss_fn = breaching.cases.construct_model(cfg.case.model, cfg.case.data, pretrained=cfg.case.server.pretrained)
dm = torch.tensor(cfg.case.data.mean)[None, :, None, None]
ds = torch.tensor(cfg.case.data.std)[None, :, None, None]
if args.victim:
    import targets

    class Unnormalised(torch.nn.Module):
        """leakattack's victim behind breaching's normalisation: it sees inputs * std + mean, the photo in [0, 1]."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, inputs, **kwargs):
            return self.inner(inputs * ds + dm)

    def own_victim(bn_mode: str = "train"):
        """The leakattack victim at its seed-0 weights, or at --weights."""
        params = dict(kv.split("=", 1) for kv in args.model_param)
        victim = targets.get_model(args.victim, num_classes=10, in_shape=(3, 32, 32), seed=0, bn_mode=bn_mode,
                                   **params)
        return targets.load_weights(victim, args.weights) if args.weights else victim

    model = Unnormalised(own_victim().model.float())
server = breaching.cases.construct_server(model, loss_fn, cfg.case, setup)
model = server.vet_model(model)
user = breaching.cases.users.UserSingleStep(model, loss_fn, None, setup, idx=0, cfg_user=cfg.case.user)
user.data_key = "inputs"  # set by _load_data, which custom data skips

photos = torch.load(args.photos)
i, B = args.image_index, args.batch_size
x, label = photos["images"][i:i + B].float(), photos["labels"][i:i + B]
payload = server.distribute_payload()
shared, _ = user.compute_local_updates(payload, custom_data={"inputs": (x - dm) / ds, "labels": label})
difference = None
if args.victim:  # the gradient breaching's user sends against leakattack's unsketched message of the same batch
    sent = torch.cat([g.flatten() for g in shared["gradients"]])
    message = targets.flat_gradient(own_victim(args.bn), x, label)
    difference = float((sent - message).norm() / message.norm())
attacker = breaching.attacks.prepare_attack(server.model, server.loss, cfg.attack, setup)
if args.tv_edges == "none":
    from breaching.attacks.auxiliaries.regularizers import TotalVariation

    def inner_tv(self, tensor, *_, **__):
        """breaching's anisotropic TV (inner_exp = outer_exp = 1) over differences inside the image only."""
        return ((tensor[..., :, 1:] - tensor[..., :, :-1]).abs().mean()
                + (tensor[..., 1:, :] - tensor[..., :-1, :]).abs().mean()) * self.scale

    TotalVariation.forward = inner_tv
if args.label_strategies:  # what the attack reads when the user does not provide its labels
    unlabelled = dict(shared, metadata=dict(shared["metadata"], labels=None))
    truth = sorted(label.tolist())
    readings = {}
    for strategy in ("iDLG", "analytic", "yin", "wainakh-simple", "bias-corrected"):  # its default is the last
        attacker.cfg.label_strategy = strategy
        torch.manual_seed(0)  # breaching pads a reading of fewer than B labels with random ones
        models = attacker._construct_models_from_payload_and_buffers([payload], [unlabelled])
        got = sorted(attacker._recover_label_information([unlabelled], [payload], models).tolist())
        readings[strategy] = {"labels": got, "right": round(label_overlap(torch.tensor(got), label) * B)}
    print(json.dumps({"image_index": i, "batch_size": B, "victim": args.victim or "resnet18", "truth": truth,
                      "readings": readings}))
    raise SystemExit
t0 = time.perf_counter()
rec, _ = attacker.reconstruct([payload], [shared], {}, dryrun=False)
wall = time.perf_counter() - t0
out = (rec["data"] * ds + dm).clamp(0, 1)
out = out[match(out, x)]  # each reconstruction against the photo it is matched to, as leakattack scores a batch
psnrs = psnr(out, x).tolist()
if args.save:
    torch.save(out, args.save)
deep_inversion = cfg.attack.regularization.get("deep_inversion")
print(json.dumps({"attack": args.attack, "deep_inversion": deep_inversion.scale if deep_inversion else None,
                  "steps": args.steps, "image_index": i, "batch_size": B, "victim": args.victim or "resnet18",
                  "bn": args.bn, "seed": args.seed, "tv_edges": args.tv_edges,
                  "psnr": sum(psnrs) / B, "psnr_per_image": [round(p, 2) for p in psnrs],
                  "ssim": float(ssim(out, x).mean()),
                  # how flat the images are: per-channel standard deviation over the pixels, mean over channels
                  "pixel_std": float(out.std(dim=(2, 3)).mean()), "photos_pixel_std": float(x.std(dim=(2, 3)).mean()),
                  "message_difference": difference, "attack_wall_s": round(wall, 1), "threads": args.threads}))
