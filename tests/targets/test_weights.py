"""Loading weights: state_dicts of every zoo model (BatchNorm buffers included), flat vectors, refusals."""

import warnings

import pytest
import torch

import targets
from leakattack.errors import UserError


def round_trip(name, tmp_path):
    source = targets.get_model(name, seed=1)
    for key, buf in source.model.named_buffers():  # trained statistics, not the initial 0 and 1
        if "running" in key:
            buf.copy_(torch.rand_like(buf) + 0.5)
        elif "num_batches" in key:
            buf.fill_(123)
    path = tmp_path / "w.pt"
    torch.save(source.model.state_dict(), path)
    target = targets.get_model(name, seed=2)
    assert targets.load_weights(target, path) is target
    want, got = source.model.state_dict(), target.model.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    assert target.batch_statistics == source.batch_statistics  # loading keeps the client's BatchNorm mode


@pytest.mark.parametrize("name", sorted(targets.list_models()))
def test_a_state_dict_round_trips_into_every_zoo_model(name, tmp_path):
    round_trip(name, tmp_path)


def test_loaded_running_statistics_survive_train_mode_forwards_and_normalise_in_eval_mode(tmp_path):
    source = targets.get_model("resnet20", seed=0, bn_mode="eval")
    for key, buf in source.model.named_buffers():
        if "running_mean" in key:
            buf.fill_(0.25)
    torch.save(source.model.state_dict(), tmp_path / "w.pt")
    train = targets.load_weights(targets.get_model("resnet20", seed=5), tmp_path / "w.pt")
    x = torch.rand(2, 3, 32, 32)
    targets.flat_gradient(train, x, torch.tensor([0, 1]))
    assert torch.equal(train.model.bn1.running_mean, torch.full((16,), 0.25))
    train.set_mode("eval")
    with torch.no_grad():
        assert torch.equal(train(x), source(x))


def test_a_flat_weight_vector_loads_into_the_trainable_parameters(tmp_path):
    other = targets.get_model("resnet20", seed=3)
    torch.save(targets.flat_params(other), tmp_path / "flat.pt")
    v = targets.load_weights(targets.get_model("resnet20", seed=0), tmp_path / "flat.pt")
    assert torch.equal(targets.flat_params(v), targets.flat_params(other))
    torch.save(torch.zeros(10), tmp_path / "short.pt")
    with pytest.raises(UserError, match="holds a tensor of shape \\(10,\\), not the 269722 weights of this model"):
        targets.load_weights(v, tmp_path / "short.pt")


def test_a_file_of_the_wrong_shape_is_refused_naming_the_first_mismatch(tmp_path):
    torch.save(targets.get_model("resnet20", width=8).model.state_dict(), tmp_path / "narrow.pt")
    with pytest.raises(UserError, match="does not fit this model: 'conv1.weight' has shape \\(8, 3, 3, 3\\), "
                                        "the model needs \\(16, 3, 3, 3\\)"):
        targets.load_weights(targets.get_model("resnet20"), tmp_path / "narrow.pt")
    torch.save(targets.get_model("resnet32").model.state_dict(), tmp_path / "deeper.pt")
    with pytest.raises(UserError, match="does not fit this model: unexpected 'layer1.3"):
        targets.load_weights(targets.get_model("resnet20"), tmp_path / "deeper.pt")
    state = targets.get_model("resnet20").model.state_dict()
    state.pop("bn1.running_var")
    torch.save(state, tmp_path / "nobuffers.pt")
    with pytest.raises(UserError, match="missing 'bn1.running_var'"):
        targets.load_weights(targets.get_model("resnet20"), tmp_path / "nobuffers.pt")


def test_a_file_with_a_pickled_object_is_refused_without_running_it(tmp_path, code_in_file):
    state = targets.get_model("resnet20").model.state_dict()
    state["extra"] = code_in_file()
    torch.save(state, tmp_path / "evil.pt")
    with pytest.raises(UserError, match="holds objects other than tensors .*; it was not loaded"):
        targets.load_weights(targets.get_model("resnet20"), tmp_path / "evil.pt")
    assert code_in_file.loaded == []


def test_a_missing_or_unreadable_file_is_one_sentence(tmp_path):
    v = targets.get_model("lenet")
    with pytest.raises(UserError, match="does not exist"):
        targets.load_weights(v, tmp_path / "none.pt")
    with pytest.raises(UserError, match="is a folder, not a file"):
        targets.load_weights(v, tmp_path)
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(UserError, match="weights file '.*junk.pt' ") as err:
        targets.load_weights(v, tmp_path / "junk.pt")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("poison,needle", [
    (lambda t: t.__setitem__((1, 2), float("nan")), "'fc.weight' holds a non-finite number (nan) at index (1, 2); "
                                                      "weights must be finite"),
    (lambda t: t.__setitem__((0, 0), float("-inf")), "'fc.weight' holds a non-finite number (-inf) at index (0, 0)"),
])
def test_non_finite_weights_in_a_state_dict_are_refused_naming_the_tensor(tmp_path, poison, needle):
    v = targets.get_model("logreg", in_shape=(1, 4, 4), num_classes=3)
    state = v.model.state_dict()
    poison(state["fc.weight"])
    torch.save(state, tmp_path / "w.pt")
    with pytest.raises(UserError) as err:
        targets.load_weights(targets.get_model("logreg", in_shape=(1, 4, 4), num_classes=3), tmp_path / "w.pt")
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_complex_or_out_of_range_weights_are_refused(tmp_path):
    v = targets.get_model("logreg", in_shape=(1, 4, 4), num_classes=3)
    state = {k: t.to(torch.complex64) if k == "fc.bias" else t for k, t in v.model.state_dict().items()}
    torch.save(state, tmp_path / "c.pt")
    with pytest.raises(UserError, match="'fc.bias' holds complex numbers \\(complex64\\); weights must be real"):
        targets.load_weights(v, tmp_path / "c.pt")
    big = {k: t.double() for k, t in v.model.state_dict().items()}
    big["fc.bias"][1] = 1e300  # finite in float64, infinite in the model's float32
    torch.save(big, tmp_path / "big.pt")
    with pytest.raises(UserError, match="'fc.bias' holds 1e\\+300 at index 1, beyond the range of the model's float32"):
        targets.load_weights(v, tmp_path / "big.pt")


@pytest.mark.parametrize("dtype,value,needle", [
    (torch.float32, float("nan"), "the weight vector holds a non-finite number (nan) at index 7"),
    (torch.float64, float("inf"), "the weight vector holds a non-finite number (inf) at index 7"),
    (torch.complex64, 1j, "the weight vector holds complex numbers (complex64); weights must be real"),
])
def test_a_flat_weight_vector_that_is_not_real_and_finite_names_the_first_bad_index(tmp_path, dtype, value, needle):
    v = targets.get_model("logreg", in_shape=(1, 4, 4), num_classes=3)
    flat = targets.flat_params(v).detach().to(dtype)
    flat[7] = value
    torch.save(flat, tmp_path / "flat.pt")
    before = targets.flat_params(v).clone()
    with pytest.raises(UserError) as err:
        targets.load_weights(v, tmp_path / "flat.pt")
    assert needle in str(err.value), str(err.value)
    assert torch.equal(targets.flat_params(v), before)  # nothing loaded


def test_a_state_dict_without_batch_counters_loads_as_pytorch_loads_it(tmp_path):
    source = targets.get_model("resnet20", seed=1)
    state = {k: v for k, v in source.model.state_dict().items() if not k.endswith("num_batches_tracked")}
    torch.save(state, tmp_path / "old.pt")
    target = targets.load_weights(targets.get_model("resnet20", seed=2), tmp_path / "old.pt")
    assert torch.equal(targets.flat_params(target), targets.flat_params(source))
    # without the running statistics as well, the refusal names a statistic, not a counter that would be filled in
    torch.save({k: v for k, v in state.items() if ".running_" not in k}, tmp_path / "nobuffers.pt")
    with pytest.raises(UserError, match=r"does not fit this model: missing 'bn1\.running_mean' \(57 missing"):
        targets.load_weights(targets.get_model("resnet20", seed=2), tmp_path / "nobuffers.pt")


def test_common_checkpoint_layouts_are_refused_with_the_fix(tmp_path):
    model = targets.get_model("lenet", seed=1)
    state = model.model.state_dict()
    torch.save({"state_dict": state, "epoch": 3}, tmp_path / "ckpt.pt")
    with pytest.raises(UserError, match="a training checkpoint with a state_dict under 'state_dict': save that alone"):
        targets.load_weights(targets.get_model("lenet"), tmp_path / "ckpt.pt")
    torch.save({f"module.{k}": v for k, v in state.items()}, tmp_path / "dp.pt")
    with pytest.raises(UserError, match="keys start with 'module.' \\(a wrapped model's\\)"):
        targets.load_weights(targets.get_model("lenet"), tmp_path / "dp.pt")
    torch.save(model.model, tmp_path / "whole.pt")
    with pytest.raises(UserError, match="a whole pickled model .*save model.state_dict\\(\\) instead"):
        targets.load_weights(targets.get_model("lenet"), tmp_path / "whole.pt")


def test_a_flat_vector_on_a_batchnorm_model_warns_of_its_initial_statistics(tmp_path):
    torch.save(targets.flat_params(targets.get_model("resnet20", seed=3)), tmp_path / "flat.pt")
    with pytest.warns(UserWarning, match="running statistics stay as initialised"):
        targets.load_weights(targets.get_model("resnet20", seed=0), tmp_path / "flat.pt")
    torch.save(targets.flat_params(targets.get_model("lenet", seed=3)), tmp_path / "lenet.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        targets.load_weights(targets.get_model("lenet", seed=0), tmp_path / "lenet.pt")


def test_a_flat_vector_on_a_model_with_frozen_parameters_warns_that_they_keep_the_runs_init(tmp_path):
    def frozen(seed):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
        model[1].requires_grad_(False)
        return targets.Victim.from_module(model, input_shape=(1, 4, 4), num_classes=3)

    source, victim = frozen(3), frozen(0)
    torch.save(targets.flat_params(source), tmp_path / "flat.pt")
    with pytest.warns(UserWarning, match=r"a vector of the trainable weights: the model's frozen parameters "
                                         r"\(1\.weight, 1\.bias\) stay as this run initialises them "
                                         r"\(--model-seed 5\); a state_dict"):
        targets.load_weights(victim, tmp_path / "flat.pt", drawn_by="--model-seed 5")
    assert torch.equal(victim.model[3].weight, source.model[3].weight)
    assert not torch.equal(victim.model[1].weight, source.model[1].weight)


def test_seed_and_init_settings_are_warned_of_where_the_file_sets_every_weight(tmp_path):
    torch.save(targets.get_model("resnet20", seed=3).model.state_dict(), tmp_path / "w.pt")
    with pytest.warns(UserWarning, match="--model-seed 5 changes nothing: weights file .* sets every weight"):
        targets.load_weights(targets.get_model("resnet20", seed=5), tmp_path / "w.pt", drawn_by="--model-seed 5")
    torch.save(targets.flat_params(targets.get_model("lenet", seed=3)), tmp_path / "flat.pt")
    with pytest.warns(UserWarning, match="--weight-init xavier changes nothing"):
        targets.load_weights(targets.get_model("lenet", seed=0), tmp_path / "flat.pt", drawn_by="--weight-init xavier")
    for name in ("w.pt", "flat.pt"):  # two settings: "change"
        model = "resnet20" if name == "w.pt" else "lenet"
        with pytest.warns(UserWarning, match="--model-seed 5 and --weight-init xavier change nothing: weights file"):
            targets.load_weights(targets.get_model(model, seed=5), tmp_path / name,
                                 drawn_by="--model-seed 5 and --weight-init xavier")


@pytest.mark.parametrize("dtype,digits", [(torch.float16, 3), (torch.bfloat16, 2)])
def test_half_precision_weights_are_cast_up_with_one_warning_naming_their_precision(tmp_path, dtype, digits):
    source = targets.get_model("lenet", seed=3)
    half = {k: t.to(dtype) if t.is_floating_point() else t for k, t in source.model.state_dict().items()}
    torch.save(half, tmp_path / "sd.pt")
    torch.save(targets.flat_params(source).detach().to(dtype), tmp_path / "flat.pt")
    name = str(dtype).replace("torch.", "")
    for file in ("sd.pt", "flat.pt"):
        v = targets.get_model("lenet", seed=0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            targets.load_weights(v, tmp_path / file)
        said = [str(w.message) for w in caught]
        assert said == [f"weights file '{tmp_path / file}' stores its weights in {name}: they are cast to the run's "
                        f"precision, and keep the rounding they were stored with (about {digits} significant "
                        "digits)"], said  # one line for the file, not one per tensor
        assert v.dtype == torch.float32
        assert torch.equal(targets.flat_params(v), targets.flat_params(source).detach().to(dtype).float())
    torch.save(source.model.state_dict(), tmp_path / "full.pt")
    with warnings.catch_warnings():  # stored in the model's own precision: nothing to say
        warnings.simplefilter("error")
        targets.load_weights(targets.get_model("lenet", seed=0), tmp_path / "full.pt")


def test_integer_weights_are_cast_with_one_warning_and_integer_buffers_without(tmp_path):
    source = targets.get_model("resnet20", seed=3)  # BatchNorm: num_batches_tracked is an integer buffer of its own
    codes = {k: (t * 100).round().to(torch.int8) if t.is_floating_point() else t
             for k, t in source.model.state_dict().items()}
    torch.save(codes, tmp_path / "sd.pt")
    torch.save(source.model.state_dict(), tmp_path / "float.pt")
    torch.save(targets.flat_params(source).detach().round().long(), tmp_path / "flat.pt")
    floats = sum(1 for t in source.model.state_dict().values() if t.is_floating_point())
    for file, what in (("sd.pt", f"'conv1.weight' and {floats - 1} more"), ("flat.pt", "the weight vector"),
                       ("float.pt", None)):
        v = targets.get_model("resnet20", seed=0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            targets.load_weights(v, tmp_path / file)
        said = [str(w.message) for w in caught if "integers" in str(w.message)]
        if what is None:
            assert said == []
        else:
            dtype = "int8" if file == "sd.pt" else "int64"
            assert said == [f"weights file '{tmp_path / file}' gives integers ({dtype}) for {what}, floating-point "
                            "weights of the model: they are cast as they are (a quantised checkpoint's integer codes "
                            "need their scales applied first)"], said


def test_tensors_without_dense_values_are_refused_naming_the_tensor(tmp_path):
    v = targets.get_model("lenet", seed=0)
    state = v.model.state_dict()
    first = next(iter(state))
    sparse = {**state, first: state[first].to_sparse()}
    torch.save(sparse, tmp_path / "sparse.pt")
    with pytest.raises(UserError, match=f"'{first}' is a sparse_coo tensor; weights must be a dense tensor"):
        targets.load_weights(v, tmp_path / "sparse.pt")
    torch.save({k: torch.empty_like(t, device="meta") for k, t in state.items()}, tmp_path / "meta.pt")
    with pytest.raises(UserError, match=f"'{first}' is a meta tensor \\(a shape without values\\)"):
        targets.load_weights(v, tmp_path / "meta.pt")


@pytest.mark.parametrize("poison,needle", [(float("nan"), "holds a non-finite number \\(nan\\) at index 0"),
                                           (1j, "holds complex numbers")])
def test_a_checkpoints_buffers_are_checked_as_its_weights_are(tmp_path, poison, needle):
    v = targets.get_model("resnet20", seed=0)
    buffers = {k: b.clone() for k, b in v.model.named_buffers()}
    buffers["bn1.running_var"] = buffers["bn1.running_var"] + poison * torch.ones(16)
    torch.save({"weights": targets.flat_params(v), "buffers": buffers}, tmp_path / "ckpt.pt")
    with pytest.raises(UserError, match=f"'bn1.running_var' {needle}"):
        targets.load_weights(targets.get_model("resnet20", seed=1), tmp_path / "ckpt.pt")


class _FrozenCountFirst(torch.nn.Module):
    """A frozen integer parameter registered before the float layers."""

    def __init__(self):
        super().__init__()
        self.steps = torch.nn.Parameter(torch.tensor([3]), requires_grad=False)
        self.fc = torch.nn.Linear(12, 3)

    def forward(self, x):
        return self.fc(x.flatten(1))


def test_a_frozen_integer_parameter_first_says_nothing_of_the_victims_precision(tmp_path):
    victim = targets.Victim.from_module(_FrozenCountFirst(), input_shape=(3, 2, 2), num_classes=3)
    assert victim.dtype == torch.float32 and victim.device.type == "cpu"
    weights = torch.arange(39, dtype=torch.float64) / 39
    torch.save(weights, tmp_path / "flat.pt")
    targets.load_weights(victim, tmp_path / "flat.pt")
    assert victim.model.fc.weight.dtype == torch.float32 and victim.model.steps.dtype == torch.int64
    assert torch.equal(targets.flat_params(victim), weights.float())
