"""Two clients of one round that report the same client id (two processes started with one --client-id) keep a
message file each: the second is not written over the first, its file name adds its Flower node id, and the server's
log says so."""

import os

import numpy as np
import pytest

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # before flwr is imported: no network from tests
pytest.importorskip("flwr", reason="flwr is not installed (pip install 'leakattack[flower]')")

from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays  # noqa: E402
from flwr.server import SimpleClientManager  # noqa: E402
from flwr.server.client_proxy import ClientProxy  # noqa: E402
from flwr.server.strategy import FedAvg  # noqa: E402

from leakattack.integrations.flower import RecordingStrategy  # noqa: E402
from leakattack.results.message import read_message  # noqa: E402


class _Proxy(ClientProxy):
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


def test_clients_reporting_one_id_keep_a_message_file_each(tmp_path, caplog):
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
