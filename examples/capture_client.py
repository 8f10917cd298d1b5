"""A plain PyTorch client that captures the message it sends, for `leakattack run --message`.

It trains nothing: it computes the gradient (or the local update) its model would
send for one batch of an embedded photo, sketches it with leakattack.sketch, and
saves three files into --out:

  message.pt  the message file (leakattack.results.message.write_message)
  weights.pt  the model's state_dict at the weights the message was computed at
  truth.pt    {"images", "labels"}: the batch, to score the attack

Then attack it:

  python examples/capture_client.py --out captured
  leakattack run --model examples/client_model.py:ClientNet --weights captured/weights.pt \\
      --message captured/message.pt --truth captured/truth.pt
"""

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F
from client_model import ClientNet  # examples/ is on sys.path when this file is run

from leakattack.data import get_batch, get_dataset
from leakattack.errors import UserError
from leakattack.results.message import write_message
from leakattack.script import count, fraction, index, one_of, positive, script_main, seed
from leakattack.sketch import list_sketches, make_sketch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="captured", help="folder for message.pt, weights.pt, truth.pt")
    p.add_argument("--image-size", type=count, default=32, help="side of the embedded photo crop (default 32)")
    p.add_argument("--index", type=index, default=0, help="first photo of the batch (default 0)")
    p.add_argument("--batch-size", type=count, default=1)
    p.add_argument("--sketch", type=one_of(list_sketches, "sketch"), default="srht",
                   help="sketch kind, or none (default srht)")
    p.add_argument("--ratio", type=fraction, default=0.5, help="b/d (default 0.5)")
    p.add_argument("--sketch-seed", type=seed, default=1, help="seed of R, shared with the server")
    p.add_argument("--kind", choices=("gradient", "update"), default="gradient")
    p.add_argument("--lr", type=positive, default=0.1, help="local learning rate (update)")
    p.add_argument("--local-steps", type=count, default=1, help="local SGD steps (update)")
    p.add_argument("--send-labels", action="store_true", help="record the labels in the message (the attacker "
                   "knows them); by default it recovers them")
    p.add_argument("--seed", type=seed, default=0, help="seed of the model's weights")
    a = p.parse_args()

    out = Path(a.out)
    if out.exists() and not out.is_dir():  # refused before any work, as a run's --out is
        raise UserError(f"--out '{out}' is a file, not a folder for message.pt, weights.pt and truth.pt")

    photos = get_dataset("photos", image_size=a.image_size)
    x, labels = get_batch(photos, a.index, a.batch_size)
    torch.manual_seed(a.seed)
    net = ClientNet(in_shape=photos.in_shape, num_classes=photos.num_classes)
    params = list(net.parameters())

    # what the client computes: the mean cross-entropy gradient, or w_before - w_after of local SGD
    if a.kind == "gradient":
        grads = torch.autograd.grad(F.cross_entropy(net(x), labels), params)
        flat = torch.cat([g.reshape(-1) for g in grads])  # model.parameters() order
    else:
        before = torch.nn.utils.parameters_to_vector(params).detach().clone()
        opt = torch.optim.SGD(params, lr=a.lr)
        for _ in range(a.local_steps):
            opt.zero_grad()
            F.cross_entropy(net(x), labels).backward()
            opt.step()
        flat = before - torch.nn.utils.parameters_to_vector(params).detach()
        torch.nn.utils.vector_to_parameters(before, params)  # the weights the server sent, which it knows

    d = flat.numel()
    b = d if a.sketch == "none" else max(1, round(a.ratio * d))  # the identity keeps every coordinate
    sketch = make_sketch(a.sketch, d, b, seed=a.sketch_seed)
    y = sketch.apply(flat.detach())

    out.mkdir(parents=True, exist_ok=True)
    write_message(out / "message.pt", y, sketch=sketch, kind=a.kind, batch_size=a.batch_size,
                  labels=labels if a.send_labels else None, lr=a.lr if a.kind == "update" else None,
                  local_steps=a.local_steps, input_shape=photos.in_shape, num_classes=photos.num_classes)
    torch.save(net.state_dict(), out / "weights.pt")
    torch.save({"images": x, "labels": labels}, out / "truth.pt")
    print(f"d = {d}, b = {y.numel()} ({a.sketch}), {a.kind} of {a.batch_size} image(s): "
          f"{out / 'message.pt'}, {out / 'weights.pt'}, {out / 'truth.pt'}")


if __name__ == "__main__":
    script_main(main)  # bad input ends in one sentence and exit status 2
