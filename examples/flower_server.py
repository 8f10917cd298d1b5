"""A Flower server that records what its clients send, for `leakattack run --message`.

FedAvg (or, with --sketch, Song et al.'s Algorithm 1: SketchedFedAvg) wrapped in
RecordingStrategy: every round's weights and every client's update land in --out.

  python examples/flower_server.py --port 8080 --clients 2 --sketch srht --ratio 0.5 --out flower-messages
  python examples/flower_client.py --server 127.0.0.1:8080 --client-id 0 &
  python examples/flower_client.py --server 127.0.0.1:8080 --client-id 1
  leakattack run --model examples/client_model.py:ClientNet --weights flower-messages/round001-weights.pt \\
      --message flower-messages/round001-client0.pt
"""

import argparse
import sys

import torch
from client_model import ClientNet  # examples/ is on sys.path when this file is run

import leakattack.integrations  # noqa: F401  (first: it turns Flower's usage telemetry off before flwr loads)

# isort: split
from flwr.common import ndarrays_to_parameters
from flwr.server import ServerConfig, start_server
from flwr.server.strategy import FedAvg

from leakattack.errors import UserError
from leakattack.integrations.flower import RecordingStrategy, SketchedFedAvg, model_arrays
from leakattack.results.io import writable_out
from leakattack.script import count, fraction, one_of, port, positive, script_main, seed
from leakattack.sketch import list_sketches


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=port, default=8080, help="the port the server listens on (default 8080)")
    p.add_argument("--clients", type=count, default=2, help="clients per round (the server waits for them; default 2)")
    p.add_argument("--rounds", type=count, default=1, help="rounds of training (default 1)")
    p.add_argument("--lr", type=positive, default=0.1, help="the clients' local learning rate (default 0.1)")
    p.add_argument("--local-steps", type=count, default=1, help="each client's local SGD steps per round (default 1)")
    p.add_argument("--batch-size", type=count, default=1,
                   help="images per client batch, as the clients' --batch-size gives it (default 1)")
    p.add_argument("--sketch", type=one_of(list_sketches, "sketch"), default=None,
                   help="run Algorithm 1 with this sketch kind (default: plain FedAvg)")
    p.add_argument("--ratio", type=fraction, default=None, help="b/d of the sketch (default 0.5)")
    p.add_argument("--sketch-seed", type=seed, default=1, help="the seed shared by server and clients (default 1)")
    p.add_argument("--image-size", type=count, default=32, help="side of the clients' images (default 32)")
    p.add_argument("--channels", type=count, default=3, help="channels of the clients' images (3: photos; default 3)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the initial weights (default 0)")
    p.add_argument("--out", default="flower-messages",
                   help="folder the clients' messages and records.json are written to (default flower-messages)")
    a = p.parse_args()
    if a.ratio is not None and not a.sketch:
        p.error("--ratio is the b/d of --sketch: give --sketch KIND with it (without one the clients send FedAvg's "
                "whole update)")
    try:  # an --out it cannot write into (a file): one sentence before any client connects
        writable_out(a.out)
    except UserError as err:
        p.error(str(err))
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    shape = (a.channels, a.image_size, a.image_size)
    model = ClientNet(in_shape=shape, num_classes=10)
    options = dict(min_fit_clients=a.clients, min_available_clients=a.clients, fraction_evaluate=0.0,
                   min_evaluate_clients=a.clients,  # none evaluates (fraction 0); Flower warns of a minimum above
                   initial_parameters=ndarrays_to_parameters(model_arrays(model)),
                   on_fit_config_fn=lambda t: {"lr": a.lr, "local_steps": a.local_steps, "batch_size": a.batch_size})
    strategy = SketchedFedAvg(sketch=a.sketch, ratio=a.ratio or 0.5, seed=a.sketch_seed, **options) if a.sketch \
        else FedAvg(**options)
    recorder = RecordingStrategy(strategy, a.out, input_shape=shape, num_classes=10)
    start_server(server_address=f"127.0.0.1:{a.port}", config=ServerConfig(num_rounds=a.rounds), strategy=recorder)
    recorder.save_records()  # records.json: the files' names relative to --out
    if not recorder.records:  # every client failed or none sent an update: nothing to attack
        print(f"flower_server: error: no client's update was recorded in {a.out} (each client's own output says why),"
              " so there is no message to attack", file=sys.stderr)
        raise SystemExit(1)
    print(f"{len(recorder.records)} messages recorded in {a.out}")


if __name__ == "__main__":
    script_main(main)  # bad input ends in one sentence and exit status 2
