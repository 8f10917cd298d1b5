"""A Flower client: ClientNet (examples/client_model.py) trained for K local SGD steps on one batch of embedded photos.

Client c holds photos c*B .. c*B+B-1 of leakattack's embedded set, or the batch
in --data (a file {"images": (B, C, H, W) in [0, 1], "labels": (B,)}, saved with
torch.save).  It follows the server's fit configuration (lr, local_steps) and,
through SketchingClient, sends R_t Δ when the server runs SketchedFedAvg, its new
weights otherwise.

  python examples/flower_client.py --server 127.0.0.1:8080 --client-id 0
"""

import argparse
import logging
import os
import sys

import grpc
import torch
import torch.nn.functional as F
from client_model import ClientNet  # examples/ is on sys.path when this file is run

import leakattack.integrations  # noqa: F401  (first: it turns Flower's usage telemetry off before flwr loads)

# isort: split
from flwr.client import NumPyClient, start_client

from leakattack.data import get_batch, get_dataset
from leakattack.errors import UserError
from leakattack.integrations.flower import CLIENT_ID_KEY, SketchingClient, load_arrays, model_arrays
from leakattack.results.message import read_truth
from leakattack.script import count, index, script_main


class PhotoClient(NumPyClient):
    """K steps of SGD with the server's learning rate, all on the client's one batch (FedAvg's local training)."""

    def __init__(self, client_id: str, model: torch.nn.Module, x: torch.Tensor, labels: torch.Tensor):
        self.client_id, self.model, self.x, self.labels = client_id, model, x, labels

    def get_parameters(self, config):
        return model_arrays(self.model)

    def fit(self, parameters, config):
        load_arrays(self.model, parameters)
        opt = torch.optim.SGD(self.model.parameters(), lr=float(config["lr"]))
        for _ in range(int(config.get("local_steps", 1))):
            opt.zero_grad()
            F.cross_entropy(self.model(self.x), self.labels).backward()
            opt.step()
        return model_arrays(self.model), int(self.x.shape[0]), {CLIENT_ID_KEY: self.client_id}

    def evaluate(self, parameters, config):
        load_arrays(self.model, parameters)
        with torch.no_grad():
            loss = float(F.cross_entropy(self.model(self.x), self.labels))
        return loss, int(self.x.shape[0]), {CLIENT_ID_KEY: self.client_id}


class _SaidOnce(logging.Filter):
    """Drops Flower's traceback of a UserError: main says that error in one sentence."""

    def filter(self, record):
        return not (record.exc_info and isinstance(record.exc_info[1], UserError))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--server", default="127.0.0.1:8080", type=address,
                   help="the server's address HOST:PORT (default 127.0.0.1:8080)")
    p.add_argument("--client-id", type=index, default=0,
                   help="this client's number: its photos start at client-id × batch-size (default 0)")
    p.add_argument("--batch-size", type=count, default=1,
                   help="images in this client's batch, the server's --batch-size (default 1)")
    p.add_argument("--image-size", type=count, default=32,
                   help="side of the photo crops (the server's model takes it; default 32)")
    p.add_argument("--data", default=None, help="the client's batch as a file {images, labels} instead of photos")
    a = p.parse_args()
    torch.set_num_threads(1)
    if a.data:
        x, labels = read_truth(a.data, "--data file")
        if labels is None:
            p.error(f"--data {a.data} holds no 'labels'")
    else:
        photos = get_dataset("photos", image_size=a.image_size)
        x, labels = get_batch(photos, a.client_id * a.batch_size, a.batch_size)
    model = ClientNet(in_shape=tuple(x.shape[1:]), num_classes=10)  # its weights come from the server
    client = SketchingClient(PhotoClient(str(a.client_id), model, x, labels))
    logging.getLogger("flwr").addFilter(_SaidOnce())
    try:
        start_client(server_address=a.server, client=client.to_client(), insecure=True)
    except UserError as err:  # the server's model is another than this client's: one sentence, not a traceback
        print(f"flower_client: error: the server's model does not fit this client's ({err}): start both with the "
              f"same --image-size (this client: {a.image_size} px, {tuple(x.shape[1:])} inputs)", file=sys.stderr)
        _exit(2)
    except grpc.RpcError as err:  # no server there, or it went away: one sentence, not gRPC's traceback
        code = err.code() if callable(getattr(err, "code", None)) else None
        if code != grpc.StatusCode.UNAVAILABLE:
            raise
        said = (err.details() if callable(getattr(err, "details", None)) else None) or "unavailable"
        print(f"flower_client: error: no Flower server answers at {a.server} ({' '.join(str(said).split())[:200]}): "
              "start examples/flower_server.py first, or give its address with --server", file=sys.stderr)
        _exit(2)


def _exit(status: int) -> None:
    """End the process now, its sentence said: a thread Flower's client left running (its connection) would
    otherwise print its own traceback while the interpreter shuts down."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def address(text: str) -> str:
    """``--server``: HOST:PORT with a port from 1 to 65535 (Flower's own check ends the process with status 1)."""
    host, colon, port = text.rpartition(":")
    if not colon or not host.strip("[]") or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT with a port from 1 to 65535")
    return text


if __name__ == "__main__":
    script_main(main)  # bad input ends in one sentence and exit status 2
