"""The model zoo: sizes at natural inputs, torchvision parity, seeding, input shapes, the oracle on big models."""

import hashlib

import pytest
import torch
import torchvision
from torch import nn

import targets
from leakattack.errors import UserError

CIFAR = (3, 32, 32)
IMAGENET = (3, 224, 224)

#: d with 10 classes at the natural input (ResNets: He et al. 0.27 M / 0.46 M; torchvision's counts less 990 heads)
SIZES = {
    "resnet20": (CIFAR, 269_722),
    "resnet32": (CIFAR, 464_154),
    "resnet_cifar": (CIFAR, 269_722),
    "resnet18": (CIFAR, 11_173_962),
    "vit_small": (CIFAR, 1_806_538),
    "resnet50": (IMAGENET, 23_528_522),
    "resnet101": (IMAGENET, 42_520_650),
    "vit_b_16": (IMAGENET, 85_806_346),
}
RUN = ("resnet20", "resnet32", "resnet_cifar", "resnet18", "vit_small", "resnet50")  # the others are only built

#: sha256 of the float32 weights of each small model at seed 0, from before the zoo grew: they must never change
FROZEN = {
    "lenet": "1bf2b8f0c4c724c30d89801b913ded87ebcdf6a6f71436afc0c72fd85150663d",
    "mlp": "b4bf2ca01af1831bd88bb923523f34bf22011b99243f5f70b1420800dd5cad1d",
    "logreg": "4b1107a3cf8d965d0f66e7cfbdee221b57b0e0ef8edbdba316a0d1ca28ea873e",
    "linreg": "2cdef3825dc1396e9788b991edf5cdf0b4f1f3d760e2d260baeb9004574b01a6",
}


def test_the_zoo_lists_every_family():
    assert set(SIZES) | set(FROZEN) <= set(targets.list_models())


@pytest.mark.parametrize("name", sorted(FROZEN))
def test_small_models_keep_their_weights_bit_for_bit(name):
    w = targets.flat_params(targets.get_model(name, seed=0))
    assert hashlib.sha256(w.numpy().tobytes()).hexdigest() == FROZEN[name]
    if name == "lenet":
        assert w[:3].tolist() == [-0.003743410110473633, 0.26822179555892944, -0.4115225672721863]


@pytest.mark.parametrize("name", sorted(SIZES))
def test_every_model_has_its_size_and_output_shape_at_its_natural_input(name):
    shape, d = SIZES[name]
    v = targets.get_model(name, num_classes=10, in_shape=shape, seed=0)
    assert v.d == targets.num_params(v) == d
    assert v.task == "classification" and isinstance(v.head, nn.Linear) and v.head.out_features == 10
    if name in RUN:
        with torch.no_grad():
            assert v(torch.rand(2, *shape)).shape == (2, 10)


def test_torchvision_counts_with_a_thousand_classes():
    # torchvision's documented sizes: 25,557,032 and 44,549,160
    assert targets.get_model("resnet50", num_classes=1000, in_shape=IMAGENET).d == 25_557_032
    assert targets.get_model("resnet101", num_classes=1000, in_shape=IMAGENET).d == 44_549_160


@pytest.mark.parametrize("name,build", [
    ("resnet50", lambda: torchvision.models.resnet50(weights=None, num_classes=10)),
    ("vit_b_16", lambda: torchvision.models.vit_b_16(weights=None, image_size=32, num_classes=10)),
])
def test_torchvision_models_are_torchvisions_own_with_its_seeded_initialisation(name, build):
    ours = targets.get_model(name, num_classes=10, in_shape=CIFAR, seed=7).model.state_dict()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        theirs = build().state_dict()
    assert list(ours) == list(theirs)
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_resnet18_is_torchvisions_layout_with_a_cifar_stem():
    ours = targets.get_model("resnet18", in_shape=CIFAR).model
    tv = torchvision.models.resnet18(weights=None, num_classes=10)
    tv.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    tv.maxpool = nn.Identity()
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in tv.state_dict().items()}
    assert not any(isinstance(m, nn.MaxPool2d) for m in ours.modules())


def test_cifar_resnets_follow_he_et_al():
    m = targets.get_model("resnet20").model
    convs = [c for c in m.modules() if isinstance(c, nn.Conv2d)]
    assert len(convs) + 1 == 20 and convs[0].kernel_size == (3, 3) and convs[0].out_channels == 16
    assert all(c.kernel_size == (3, 3) for c in convs)  # option A: parameter-free shortcuts
    maps = []
    for stage in (m.layer1, m.layer2, m.layer3):
        stage.register_forward_hook(lambda mod, inp, out: maps.append(tuple(out.shape[1:])))
    m(torch.rand(2, *CIFAR))
    assert maps == [(16, 32, 32), (32, 16, 16), (64, 8, 8)]
    assert [len(s) for s in (m.layer1, m.layer2, m.layer3)] == [3, 3, 3]
    assert [len(s) for s in (targets.get_model("resnet32").model.layer1,)] == [5]
    b = targets.get_model("resnet20", shortcut="B").model
    assert sum(c.kernel_size == (1, 1) for c in b.modules() if isinstance(c, nn.Conv2d)) == 2
    assert targets.get_model("resnet_cifar", depth=56).model.layer3.__len__() == 9
    assert targets.get_model("resnet20", width=8).model.fc.in_features == 32
    assert isinstance(targets.get_model("resnet20", act="tanh").model.act, nn.Tanh)


def test_vit_small_is_the_stated_architecture():
    m = targets.get_model("vit_small").model
    assert m.patch_embed.kernel_size == (4, 4) and m.pos_embed.shape == (1, 65, 192) and len(m.blocks) == 6
    assert m.blocks[0].attn.heads == 3 and m.blocks[0].mlp[0].out_features == 384
    v = targets.get_model("vit_small", in_shape=(3, 32, 48), patch=8, dim=64, depth=2, heads=4, mlp=128)
    assert v.model.pos_embed.shape == (1, 4 * 6 + 1, 64)
    assert v(torch.rand(1, 3, 32, 48)).shape == (1, 10)


@pytest.mark.parametrize("name", sorted(targets.list_models()))
def test_same_seed_same_weights_other_seed_other_weights_and_the_callers_generator_untouched(name):
    state = torch.random.get_rng_state()
    a = targets.get_model(name, seed=1)
    assert torch.equal(torch.random.get_rng_state(), state)
    b, c = targets.get_model(name, seed=1), targets.get_model(name, seed=2)
    sa, sb, sc = (v.model.state_dict() for v in (a, b, c))
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(targets.flat_params(a), targets.flat_params(c))
    for k, t in sa.items():  # every tensor drawn at random (not a constant such as BN's 1 and 0) follows the seed
        if t.is_floating_point() and t.numel() > 1 and t.std() > 0:
            assert not torch.equal(t, sc[k]), k


def test_position_embeddings_and_class_token_follow_the_seed():
    a, b = targets.get_model("vit_small", seed=3).model, targets.get_model("vit_small", seed=4).model
    assert not torch.equal(a.pos_embed, b.pos_embed) and not torch.equal(a.cls_token, b.cls_token)
    assert torch.equal(a.pos_embed, targets.get_model("vit_small", seed=3).model.pos_embed)


def test_native_initialisation_unless_an_init_is_asked_for():
    native = targets.get_model("resnet20", seed=0)
    assert native.meta["init"] is None and targets.default_init("resnet20") is None
    w = native.model.layer3[1].conv1.weight
    # Kaiming normal (fan_out): std sqrt(2 / (64 * 9)); 3 % tolerance for 36,864 draws (about 5 standard errors)
    assert abs(w.std().item() / (2 / (64 * 9)) ** 0.5 - 1) < 0.03
    uni = targets.get_model("resnet20", seed=0, init="uniform").model
    u = uni.layer3[1].conv1.weight
    assert u.abs().max() <= 0.5 and abs(u.var().item() * 12 - 1) < 0.05  # U(-0.5, 0.5), 5 % on the variance
    assert torch.equal(uni.bn1.weight, torch.ones(16))  # initialise draws conv and linear layers only
    with pytest.raises(UserError, match="unknown weight init 'he'"):
        targets.get_model("resnet20", init="he")


@pytest.mark.parametrize("name", sorted(set(targets.list_models()) - {"vit_b_16"}))
def test_every_model_accepts_one_channel_28_px_images(name):
    v = targets.get_model(name, num_classes=10, in_shape=(1, 28, 28))
    if name in ("resnet101",):
        return  # built only
    with torch.no_grad():
        out = v(torch.rand(2, 1, 28, 28))
    assert out.shape == ((2,) if v.task == "regression" else (2, 10))


def test_vit_b_16_takes_its_image_size_and_channels_from_the_data():
    v = targets.get_model("vit_b_16", in_shape=(1, 32, 32))
    assert v.model.image_size == 32 and v.model.conv_proj.in_channels == 1
    assert v.model.encoder.pos_embedding.shape == (1, 5, 768)


@pytest.mark.parametrize("name,shape,message", [
    ("vit_small", (3, 30, 30), "vit patch 4 does not divide the 30x30 images"),
    ("vit_b_16", (3, 28, 28), "vit_b_16 needs square images whose side is a multiple of 16, not 28x28"),
    ("vit_b_16", (3, 32, 48), "not 32x48"),
])
def test_a_patch_that_does_not_divide_the_image_is_one_sentence(name, shape, message):
    with pytest.raises(UserError, match=message) as err:
        targets.get_model(name, in_shape=shape)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name,params,message", [
    ("resnet_cifar", {"depth": 21}, "resnet depth 21 is not 6n \\+ 2"),
    ("resnet20", {"shortcut": "C"}, "unknown shortcut 'C'"),
    ("resnet20", {"width": 0}, "model 'resnet20' parameter width must be a positive whole number, got 0"),
    ("mlp", {"hidden": "abc"}, "model 'mlp' parameter hidden must be a positive whole number, got 'abc'"),
    ("mlp", {"hidden": 0}, "parameter hidden must be a positive whole number, got 0"),
    ("mlp", {"hidden": 2.5}, "parameter hidden must be a positive whole number, got 2.5"),
    ("vit_small", {"mlp": True}, "parameter mlp must be a positive whole number, got True"),
    ("resnet20", {"depth": 56}, "model 'resnet20' has no parameter 'depth'"),
    ("vit_small", {"heads": 5}, "vit dim 192 is not a multiple of heads 5"),
    ("vit_small", {"act": "swish"}, "unknown activation 'swish'"),
])
def test_bad_model_parameters_are_one_sentence(name, params, message):
    with pytest.raises(UserError, match=message):
        targets.get_model(name, **params)


@pytest.mark.parametrize("name", ["resnet18", "vit_small"])
def test_oracle_and_its_double_backward_run_on_big_models(name):
    v = targets.get_model(name, seed=0)
    x, y = torch.rand(2, *CIFAR, requires_grad=True), torch.tensor([1, 7])
    g = targets.flat_gradient(v, x, y, create_graph=True)
    assert g.shape == (v.d,) and g.requires_grad
    (gx,) = torch.autograd.grad(g.pow(2).sum(), x)
    assert gx.shape == x.shape and torch.isfinite(gx).all() and gx.abs().sum() > 0


@pytest.mark.slow
def test_oracle_double_backward_runs_through_torchvisions_vit():
    v = targets.get_model("vit_b_16", in_shape=CIFAR, seed=0)
    x = torch.rand(1, *CIFAR, requires_grad=True)
    g = targets.flat_gradient(v, x, torch.tensor([3]), create_graph=True)
    (gx,) = torch.autograd.grad(g.pow(2).sum(), x)
    assert torch.isfinite(gx).all() and gx.abs().sum() > 0


def test_attention_on_fused_kernels_gets_a_double_backward_through_the_oracle():
    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = nn.MultiheadAttention(8, 2, batch_first=True)
            self.fc = nn.Linear(8, 3)

        def forward(self, x):
            t = x.flatten(2).transpose(1, 2)
            return self.fc(self.mha(t, t, t, need_weights=False)[0].mean(1))

    v = targets.Victim.from_module(Attn(), input_shape=(8, 2, 2), num_classes=3)
    x = torch.rand(2, 8, 2, 2, requires_grad=True)
    g = targets.flat_gradient(v, x, torch.tensor([0, 2]), create_graph=True)
    (gx,) = torch.autograd.grad(g.pow(2).sum(), x)
    assert gx.abs().sum() > 0
