"""Flower: a real server and real clients on loopback record messages that `leakattack run --message` attacks."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # before flwr is imported: no network from tests
pytest.importorskip("flwr", reason="flwr is not installed (pip install 'leakattack[flower]')")

from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays  # noqa: E402
from flwr.server import SimpleClientManager  # noqa: E402
from flwr.server.client_proxy import ClientProxy  # noqa: E402
from flwr.server.strategy import FedAvg  # noqa: E402

from leakattack import cli  # noqa: E402
from leakattack.data import get_batch, get_dataset  # noqa: E402
from leakattack.errors import UserError  # noqa: E402
from leakattack.integrations.flower import (  # noqa: E402
    RECORDS_FILE,
    SKETCH_KEY,
    RecordingStrategy,
    SketchedFedAvg,
    SketchingClient,
    flatten,
    sketch_of_config,
)
from leakattack.results.message import read_message  # noqa: E402
from leakattack.sketch import sketch_from_description  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CLIENT_MODEL = f"{EXAMPLES / 'client_model.py'}:ClientNet"
SHAPE = (1, 28, 28)  # the embedded digits: they load in a fraction of a second


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, server: subprocess.Popen, log: Path, timeout: float = 90) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if server.poll() is not None:
            pytest.fail(f"the server exited with {server.returncode}: {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    pytest.fail("the server did not listen within 90 s")


def _client_net():
    sys.path.insert(0, str(EXAMPLES))
    try:
        from client_model import ClientNet
    finally:
        sys.path.remove(str(EXAMPLES))
    return ClientNet(in_shape=SHAPE, num_classes=10)


def test_a_sketched_flower_deployment_trains_and_its_recorded_messages_leak_the_clients_images(tmp_path, capsys):
    digits = get_dataset("digits")
    batches = []
    for c in range(2):
        x, labels = get_batch(digits, c, 1)
        torch.save({"images": x, "labels": labels}, tmp_path / f"client{c}.pt")
        batches.append((x, labels))
    out, port = tmp_path / "messages", _free_port()
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0"}
    logs = [tmp_path / f"{name}.log" for name in ("server", "client0", "client1")]
    server = subprocess.Popen([sys.executable, str(EXAMPLES / "flower_server.py"), "--port", str(port),
                               "--clients", "2", "--rounds", "1", "--sketch", "srht", "--ratio", "0.5",
                               "--channels", "1", "--image-size", "28", "--out", str(out)],
                              stdout=logs[0].open("w"), stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    procs = [server]
    try:
        _wait_for_port(port, server, logs[0])
        for c in range(2):
            procs.append(subprocess.Popen([sys.executable, str(EXAMPLES / "flower_client.py"), "--server",
                                           f"127.0.0.1:{port}", "--client-id", str(c), "--data",
                                           str(tmp_path / f"client{c}.pt")],
                                          stdout=logs[c + 1].open("w"), stderr=subprocess.STDOUT, env=env,
                                          cwd=tmp_path))
        for p, log in zip(procs, logs):
            assert p.wait(timeout=180) == 0, log.read_text()[-2000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    names = {"round001-weights.pt", "round002-weights.pt", "round001-client0.pt", "round001-client1.pt",
             "records.json"}
    assert names <= {p.name for p in out.iterdir()}
    records = json.loads((out / "records.json").read_text())
    assert sorted(r["message"] for r in records) == ["round001-client0.pt", "round001-client1.pt"]
    messages = [read_message(out / f"round001-client{c}.pt") for c in range(2)]
    w1, w2 = (torch.load(out / f"round00{t}-weights.pt", weights_only=True) for t in (1, 2))
    R = sketch_from_description(messages[0].sketch)
    assert messages[1].sketch == messages[0].sketch and R.b == R.d // 2 == messages[0].y.numel()
    assert messages[0].kind == "update" and messages[0].lr == 0.1 and messages[0].ids["client"] == "0"
    # Algorithm 1's server step: w^2 = w^1 + R^T mean(R (u_c - w^1)) = w^1 - R^T mean(y_c)
    step = -R.adjoint(torch.stack([m.y.double() for m in messages]).mean(0))
    assert torch.allclose(w2 - w1, step, rtol=1e-5, atol=1e-7)
    # ... which trains: the clients' loss drops
    net = _client_net()
    losses = []
    for w in (w1, w2):
        torch.nn.utils.vector_to_parameters(w.float(), net.parameters())
        with torch.no_grad():
            losses.append(sum(float(F.cross_entropy(net(x), y)) for x, y in batches))
    assert losses[1] < losses[0], losses

    run = tmp_path / "attack"
    rc = cli.main(["run", "--model", CLIENT_MODEL, "--weights", str(out / "round001-weights.pt"),
                   "--message", str(out / "round001-client0.pt"), "--truth", str(tmp_path / "client0.pt"),
                   "--iterations", "1000", "--out", str(run), "--quiet", "--no-lpips"])
    assert rc == 0, capsys.readouterr().err
    m = json.loads((run / "metrics.json").read_text())
    assert m["psnr"] >= 40 and m["label_acc"] == 1.0, m["psnr"]


class _Proxy(ClientProxy):
    """A client known to the server only by its id (the recorder reads nothing else from it)."""

    def get_properties(self, ins, timeout, group_id):
        raise NotImplementedError

    def get_parameters(self, ins, timeout, group_id):
        raise NotImplementedError

    def fit(self, ins, timeout, group_id):
        raise NotImplementedError

    def evaluate(self, ins, timeout, group_id):
        raise NotImplementedError

    def reconnect(self, ins, timeout, group_id):
        raise NotImplementedError


def _round(strategy, arrays, updates):
    """One round through ``strategy`` with clients 'a', 'b' returning ``updates[c](weights)``; returns aggregated."""
    manager = SimpleClientManager()
    proxies = {c: _Proxy(f"node-{c}") for c in updates}
    for proxy in proxies.values():
        manager.register(proxy)
    pairs = strategy.configure_fit(1, ndarrays_to_parameters(arrays), manager)
    results = []
    for proxy, ins in pairs:
        c = proxy.cid.removeprefix("node-")
        sent = updates[c](parameters_to_ndarrays(ins.parameters), ins.config)
        results.append((proxy, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(sent), 3, {"client_id": c})))
    return strategy.aggregate_fit(1, results, [])[0]


def test_a_client_whose_model_differs_from_the_servers_says_so_in_one_sentence(tmp_path):
    """The server's model takes 16 px images, the client's data is 28 px: the client exits with code 2 and one
    sentence naming --image-size, not Flower's traceback."""
    digits = get_dataset("digits")
    x, labels = get_batch(digits, 0, 1)
    torch.save({"images": x, "labels": labels}, tmp_path / "client.pt")
    port, env = _free_port(), {**os.environ, "FLWR_TELEMETRY_ENABLED": "0"}
    logs = [tmp_path / "server.log", tmp_path / "client.log"]
    server = subprocess.Popen([sys.executable, str(EXAMPLES / "flower_server.py"), "--port", str(port),
                               "--clients", "1", "--rounds", "1", "--channels", "1", "--image-size", "16", "--out",
                               str(tmp_path / "messages")],
                              stdout=logs[0].open("w"), stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        _wait_for_port(port, server, logs[0])
        client = subprocess.run([sys.executable, str(EXAMPLES / "flower_client.py"), "--server", f"127.0.0.1:{port}",
                                 "--data", str(tmp_path / "client.pt")], capture_output=True, text=True, env=env,
                                cwd=tmp_path, timeout=180)
        server.wait(timeout=180)  # its one round ends with the client's failure
    finally:
        server.kill()
        server.wait()
    assert client.returncode == 2, client.stderr[-2000:]
    assert "Traceback" not in client.stderr + client.stdout
    assert "flower_client: error: the server's model does not fit this client's" in client.stderr
    assert "start both with the same --image-size" in client.stderr
    # the server says that it recorded nothing, with a failing status (it said "0 messages recorded" and exited 0)
    said = logs[0].read_text()
    assert server.returncode == 1 and "flower_server: error: no client's update was recorded" in said, said[-2000:]


def test_the_recorder_writes_the_update_of_the_chosen_clients_around_plain_fedavg(tmp_path):
    gen = np.random.default_rng(0)
    arrays = [gen.standard_normal((4, 3)).astype(np.float32), gen.standard_normal(4).astype(np.float32)]
    shift = {"a": 0.01, "b": -0.02}
    fedavg = FedAvg(min_fit_clients=2, min_available_clients=2,
                    on_fit_config_fn=lambda t: {"lr": 0.1, "local_steps": 2, "batch_size": 3})
    recorder = RecordingStrategy(fedavg, tmp_path, clients=["b"], input_shape=(1, 2, 2), num_classes=4)
    updates = {c: (lambda w, config, s=s: [a + s for a in w]) for c, s in shift.items()}
    aggregated = _round(recorder, arrays, updates)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["round001-clientb.pt", "round001-weights.pt",
                                                          "round002-weights.pt"]
    m = read_message(tmp_path / "round001-clientb.pt")
    assert m.kind == "update" and m.sketch is None and (m.lr, m.local_steps, m.batch_size) == (0.1, 2, 3)
    assert m.ids == {"round": 1, "client": "b", "node": "node-b", "weights": "round001-weights.pt"}
    assert m.input_shape == (1, 2, 2) and m.num_classes == 4
    assert torch.allclose(m.y, torch.full((16,), 0.02, dtype=torch.float64), atol=1e-6)  # w_before - w_after
    w1 = torch.load(tmp_path / "round001-weights.pt", weights_only=True)
    w2 = torch.load(tmp_path / "round002-weights.pt", weights_only=True)
    assert torch.equal(w1, flatten(arrays)) and torch.allclose(w2, flatten(parameters_to_ndarrays(aggregated)))
    assert torch.allclose(w2 - w1, torch.full((16,), -0.005, dtype=torch.float64), atol=1e-6)  # FedAvg's mean


def test_the_recorder_warns_where_a_client_reports_another_count_than_the_configured_batch(tmp_path, caplog):
    """The example server asks for --batch-size; a client that trains on another batch reports its own count, and the
    message file, which keeps the configuration's batch size, is named in a warning."""
    arrays = [np.zeros((4, 3), dtype=np.float32)]
    updates = {"a": lambda w, config: [a + 0.01 for a in w]}  # _round's clients report 3 examples
    for batch, warned in ((2, True), (3, False)):
        caplog.clear()
        fedavg = FedAvg(min_fit_clients=1, min_available_clients=1,
                        on_fit_config_fn=lambda t, b=batch: {"lr": 0.1, "batch_size": b})
        _round(RecordingStrategy(fedavg, tmp_path / str(batch)), arrays, updates)
        assert read_message(tmp_path / str(batch) / "round001-clienta.pt").batch_size == batch
        said = [r.getMessage() for r in caplog.records if "num_examples" in r.getMessage()]
        assert said == (["round 1, client a reports num_examples = 3, and the batch_size of the fit configuration "
                         "is 2: its message file says the update came from 2 images"] if warned else []), said


def test_sketching_clients_and_the_sketched_server_compute_algorithm_1(tmp_path):
    arrays = [np.linspace(-1, 1, 40, dtype=np.float64).reshape(8, 5)]
    delta = {"a": np.full((8, 5), 0.1), "b": np.arange(40.0).reshape(8, 5) / 100}

    class Plain:  # a NumPyClient's fit: its new weights
        def __init__(self, c):
            self.c = c

        def fit(self, parameters, config):
            return [parameters[0] + delta[self.c]], 3, {}

    strategy = SketchedFedAvg(sketch="countsketch", ratio=0.5, seed=4, global_lr=2.0, min_fit_clients=2,
                              min_available_clients=2)
    recorder = RecordingStrategy(strategy, tmp_path, lr=0.5)
    aggregated = _round(recorder, arrays, {c: (lambda w, config, c=c: SketchingClient(Plain(c)).fit(w, config)[0])
                                           for c in delta})
    R = strategy.round_sketch(1, 40)
    mean = torch.as_tensor((delta["a"] + delta["b"]).reshape(-1) / 2)
    want = flatten(arrays) + 2.0 * R.adjoint(R.apply(mean))
    assert torch.allclose(flatten(parameters_to_ndarrays(aggregated)), want)
    m = read_message(tmp_path / "round001-clienta.pt")  # recorded as R (w_before - w_after)
    assert m.sketch == R.describe() and torch.allclose(m.y, -R.apply(torch.as_tensor(delta["a"].reshape(-1))))
    # without a sketch in the configuration the client sends its weights
    assert SketchingClient(Plain("a")).fit(arrays, {})[0][0].shape == (8, 5)
    assert sketch_of_config({SKETCH_KEY: '{"kind": "srht", "d": 8, "b": 4, "seed": 0}'}).b == 4
    with pytest.raises(UserError, match="unknown sketch 'fft'"):
        SketchedFedAvg(sketch="fft")
    # a sketch's parameters are checked when the strategy is made, before any client connects
    with pytest.raises(UserError, match=r"^sketch 'srht' has no parameter 's'; allowed: none$"):
        SketchedFedAvg(sketch="srht", sketch_params={"s": 2})
    with pytest.raises(UserError, match=r"^sketch 'sparse': s must be an integer in \[1, min\(b, "):
        SketchedFedAvg(sketch="sparse", sketch_params={"s": 0})
    with pytest.raises(UserError, match=r"^SketchedFedAvg: 'sketch_params' must be a dict"):
        SketchedFedAvg(sketch="sparse", sketch_params=[("s", 2)])
    assert SketchedFedAvg(sketch="sparse", sketch_params={"s": 2}).round_sketch(1, 40).describe()["s"] == 2
    assert SketchedFedAvg(sketch="gaussian", sketch_params={"memory_gb": 1}).round_sketch(1, 40).b == 4  # get_sketch's
    for bad in (-1, "x", float("nan")):  # refused here too, as get_sketch refuses it
        with pytest.raises(UserError, match=r"^memory_gb must be a non-negative number of GB or None"):
            SketchedFedAvg(sketch="gaussian", sketch_params={"memory_gb": bad})


def test_an_out_that_is_a_file_is_refused_before_any_client_connects(tmp_path):
    """flower_server.py --out FILE waited for its clients and ended in a FileExistsError traceback at the first
    round's files, leaving its client waiting."""
    (tmp_path / "afile").write_text("")
    with pytest.raises(UserError, match=r"^RecordingStrategy: out '.*afile' is a file, not a folder$"):
        RecordingStrategy(FedAvg(), tmp_path / "afile")
    done = subprocess.run([sys.executable, str(EXAMPLES / "flower_server.py"), "--port", "9", "--out", "afile"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == \
        "flower_server.py: error: --out 'afile' is a file, not a folder", done.stderr
    assert "min_available_clients" not in done.stderr  # nor Flower's warning of a minimum no round asks for


def test_the_recorder_refuses_a_defense_a_run_would_refuse_when_it_is_made(tmp_path):
    with pytest.raises(UserError, match=r"^RecordingStrategy: unknown defense 'bogus'"):
        RecordingStrategy(FedAvg(), tmp_path, defense="bogus:x=1")
    assert not any(tmp_path.iterdir())
    RecordingStrategy(FedAvg(), tmp_path, defense="clip:C=1")  # a spec a run builds is taken


def test_clients_reporting_one_id_keep_a_message_file_each(tmp_path, caplog):
    """Two clients of one round that report the same client id (two processes started with one --client-id) keep a
    message file each: the second is not written over the first, its file name adds its Flower node id, and the
    server's log says so."""
    arrays = [np.zeros((4, 3), dtype=np.float32)]
    shift = {"node-a": 0.01, "node-b": -0.02}
    recorder = RecordingStrategy(FedAvg(min_fit_clients=2, min_available_clients=2,
                                        on_fit_config_fn=lambda t: {"lr": 0.1, "batch_size": 3}), tmp_path)
    manager = SimpleClientManager()
    for node in shift:
        manager.register(_Proxy(node))
    results = []
    for proxy, ins in recorder.configure_fit(1, ndarrays_to_parameters(arrays), manager):
        sent = [a + shift[proxy.cid] for a in parameters_to_ndarrays(ins.parameters)]
        results.append((proxy, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(sent), 3, {"client_id": "0"})))
    recorder.aggregate_fit(1, results, [])
    files = sorted(p.name for p in tmp_path.glob("round001-client*.pt"))
    assert len(files) == 2 and "round001-client0.pt" in files, files
    updates = {read_message(tmp_path / f).ids["node"]: read_message(tmp_path / f).y for f in files}
    assert set(updates) == set(shift)
    for node, s in shift.items():  # each file holds its own client's update, w_before - w_after
        assert np.allclose(updates[node].numpy(), -s, atol=1e-6)
    assert sorted(r["message"] for r in recorder.records) == sorted(str(tmp_path / f) for f in files)
    said = [r.getMessage() for r in caplog.records if "client id" in r.getMessage()]
    assert len(said) == 1 and "'0'" in said[0], said


def test_the_saved_records_name_their_files_relative_to_the_folder_they_lie_in(tmp_path, monkeypatch):
    """records.json names each round's files relative to its own folder, so it reads right from any working
    directory and after the folder is moved (a folder given relative to the server's working directory had left
    paths that only resolved from there)."""
    arrays = [np.zeros((4, 3), dtype=np.float32)]
    monkeypatch.chdir(tmp_path)
    recorder = RecordingStrategy(FedAvg(min_fit_clients=1, min_available_clients=1,
                                        on_fit_config_fn=lambda t: {"lr": 0.1, "batch_size": 3}), "server/messages")
    manager = SimpleClientManager()
    manager.register(_Proxy("node-a"))
    results = [(proxy, FitRes(Status(Code.OK, ""), ndarrays_to_parameters([a + 0.01 for a in arrays]), 3,
                              {"client_id": "7"}))
               for proxy, _ in recorder.configure_fit(1, ndarrays_to_parameters(arrays), manager)]
    recorder.aggregate_fit(1, results, [])
    path = recorder.save_records()
    assert path == Path("server/messages") / RECORDS_FILE
    (tmp_path / "server" / "messages").rename(tmp_path / "moved")
    monkeypatch.chdir(tmp_path / "moved")
    rows = json.loads(Path(RECORDS_FILE).read_text())
    assert [(r["round"], r["client"], r["message"], r["weights"]) for r in rows] == \
        [(1, "7", "round001-client7.pt", "round001-weights.pt")]
    assert read_message(tmp_path / "moved" / rows[0]["message"]).ids["client"] == "7"


@pytest.mark.parametrize("script, args, said", [
    ("flower_server.py", ["--sketch", "bogus"], "argument --sketch: unknown sketch 'bogus'; choose among"),
    ("flower_server.py", ["--sketch", "srht", "--ratio", "0"], "argument --ratio: 0 is not a positive finite number"),
    ("flower_server.py", ["--local-steps", "0"], "argument --local-steps: 0 is below 1"),
    ("flower_server.py", ["--ratio", "0.3"], "--ratio is the b/d of --sketch: give --sketch KIND with it"),
    ("flower_client.py", ["--data", "no-such-file.pt"], "--data file 'no-such-file.pt' does not exist"),
    ("flower_client.py", ["--server", "nonsense"], "argument --server: 'nonsense' is not HOST:PORT with a port"),
    ("flower_client.py", ["--batch-size", "100"], "a batch of 100 images does not fit in dataset photos of 50 images"),
])
def test_the_flower_examples_refuse_bad_input_in_one_sentence(tmp_path, script, args, said):
    """Each was a traceback (exit status 1), or --ratio without --sketch ran FedAvg without a word."""
    where = ["--out", str(tmp_path / "out")] if script == "flower_server.py" else ["--server", "127.0.0.1:9"]
    done = subprocess.run([sys.executable, str(EXAMPLES / script), *where, *args], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"{script}: error: ")
    assert said in done.stderr and not (tmp_path / "out").exists()


def test_a_client_whose_server_does_not_answer_says_so_in_one_sentence(tmp_path):
    """It ended in gRPC's traceback, exit status 1."""
    with socket.socket() as s:  # a port nothing listens on: bound here, never listened to
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        done = subprocess.run([sys.executable, str(EXAMPLES / "flower_client.py"), "--server", f"127.0.0.1:{port}"],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"flower_client: error: no Flower server answers at 127.0.0.1:{port} (") and \
        last.endswith("): start examples/flower_server.py first, or give its address with --server"), last
    assert "connect" in last.lower()  # gRPC's own words of why, not a guess
