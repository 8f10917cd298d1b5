"""Message files: what write_message saves, read_message returns; sketch descriptions rebuild the same R."""

import re
import warnings

import pytest
import torch

from leakattack import cli
from leakattack.errors import SettingWarning, UserError
from leakattack.results.message import FORMAT, VERSION, MessageError, read_message, read_truth, write_message
from leakattack.sketch import check_description, get_sketch, list_sketches, sketch_from_description


@pytest.mark.parametrize("kind", list_sketches())
def test_a_sketch_description_rebuilds_the_same_operator(kind):
    params = {"s": 3} if kind == "sparse" else {}
    R = get_sketch(kind, 300, None if kind == "none" else 120, seed=5, **params)
    again = sketch_from_description(R.describe())
    assert again.describe() == R.describe() and torch.equal(again.to_dense(), R.to_dense())
    assert check_description(R.describe()) == R.b


@pytest.mark.parametrize("desc,needle", [
    ({"kind": "srht", "d": 10, "b": 5}, "has no 'seed'"),
    ({"kind": "srht", "d": 10, "b": 20, "seed": 0}, "b = 20 > d = 10"),
    ({"kind": "srht", "d": 10, "b": 5, "seed": -1}, "seed must be a non-negative integer"),
    ({"kind": "sparse", "d": 10, "b": 5, "seed": 0, "s": 9}, "s must be an integer in [1, min(b, 64)]"),
    ({"kind": "srht", "d": 10, "b": 5, "seed": 0, "s": 2}, "sketch 'srht' has no parameter 's'"),
    ("srht", "must be a dict"),
])
def test_a_bad_sketch_description_is_one_sentence(desc, needle):
    with pytest.raises(UserError) as err:
        sketch_from_description(desc)
    assert needle in str(err.value)


def test_write_then_read_gives_back_every_field(tmp_path):
    R = get_sketch("sparse", 40, 16, seed=2, s=2)
    y = R.apply(torch.randn(40))
    path = write_message(tmp_path / "sub" / "m.pt", y, sketch=R, kind="update", batch_size=2, labels=[3, 1],
                         lr=0.05, local_steps=4, defense="clip:C=1", input_shape=(1, 4, 4), num_classes=5, round=3,
                         client="node-7")
    raw = torch.load(path, weights_only=True)
    assert raw["format"] == FORMAT and raw["version"] == VERSION
    m = read_message(path)
    assert torch.equal(m.y, y) and m.kind == "update" and m.sketch == R.describe() and m.batch_size == 2
    assert m.labels.tolist() == [3, 1] and m.lr == 0.05 and m.local_steps == 4 and m.defense == "clip:C=1"
    assert m.input_shape == (1, 4, 4) and m.num_classes == 5 and m.ids == {"round": 3, "client": "node-7"}
    assert not list(path.parent.glob("*.tmp"))


@pytest.mark.parametrize("kwargs,needle", [
    (dict(kind="update"), "an update message needs 'lr'"),
    (dict(labels=[1, 2]), "holds 2 labels for a batch of 1"),
    (dict(labels=[-1]), "'labels' must be class indices at least 0, got -1 at position 0"),
    (dict(batch_size=2, labels=[3, 10], num_classes=10), "'labels' must be class indices in [0, 10) (num_classes is "
                                                         "10), got 10 at position 1"),
    (dict(batch_size=0), "'batch_size' must be a positive integer"),
    (dict(sketch={"kind": "srht", "d": 8, "b": 3, "seed": 0}),
     "has 4 numbers but its sketch (srht, d = 8) sends b = 3"),
    (dict(lr=-1.0, kind="update"), "'lr' must be a positive number"),
    (dict(input_shape=(3, 0)), "'input_shape' must be a list of 1 to 3 positive integers"),
    (dict(input_shape=(1, 1, 2, 2)), "'input_shape' must be a list of 1 to 3 positive integers such as [3, 32, 32], "
                                     "got [1, 1, 2, 2]"),
    (dict(input_shape=(3, 10 ** 5, 10 ** 5)), "'input_shape' must be at most 67,108,864 numbers per example"),
    (dict(num_classes=10 ** 9), "'num_classes' must be at most 1,000,000, got 1000000000"),
    (dict(kind="update", lr=0.1, local_steps=10 ** 12), "'local_steps' must be at most 1,000,000 (the attacker "
                                                        "unrolls every step at each evaluation)"),
    (dict(client=object()), "'ids' must be a dict of names to numbers or strings"),
    # values that conversion met first (a ValueError traceback from int() or float())
    (dict(input_shape="x"), "'input_shape' must be a list of 1 to 3 positive integers such as [3, 32, 32], got 'x'"),
    (dict(input_shape=[3, "a", 2]), "'input_shape' must be a list of 1 to 3 positive integers"),
    (dict(input_shape=7), "'input_shape' must be a list of 1 to 3 positive integers"),
    (dict(kind="update", lr="fast"), "'lr' must be a positive number"),
    (dict(labels=["cat"]), "'labels' must be class indices (a 1-d integer tensor), got ['cat']"),
    (dict(labels=[[1], [2, 3]]), "'labels' must be class indices (a 1-d integer tensor)"),
])
def test_write_message_refuses_what_would_not_be_a_valid_file_and_writes_nothing(tmp_path, kwargs, needle):
    with pytest.raises(MessageError) as err:
        write_message(tmp_path / "m.pt", torch.zeros(4), **kwargs)
    assert needle in str(err.value) and not list(tmp_path.iterdir())


@pytest.mark.parametrize("spec", ["bogus:x=1", "gaussian:sigma=-1", "clip:C=1@nowhere"])
def test_a_defense_a_run_refuses_is_refused_when_the_message_is_written_in_the_same_sentence(tmp_path, capsys, spec):
    """write_message writes no file that ``leakattack run --message`` would refuse for its defense: the same sentence
    (a UserError: exit code 2 on the command line), before anything is written."""
    with pytest.raises(MessageError) as err:
        write_message(tmp_path / "m.pt", torch.zeros(4), defense=spec)
    assert not list(tmp_path.iterdir())
    said = str(err.value)
    assert said.startswith("message: ") and "\n" not in said
    # the file as it would have been, saved past the check: the run refuses it with the same sentence
    write_message(tmp_path / "m.pt", torch.zeros(4))
    fields = torch.load(tmp_path / "m.pt", weights_only=True)
    torch.save({**fields, "defense": spec}, tmp_path / "m.pt")
    assert cli.main(["run", "--message", str(tmp_path / "m.pt"), "--model", "lenet", "--quiet", "--no-lpips",
                     "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"leakattack: error: message file '{tmp_path / 'm.pt'}': {said.removeprefix('message: ')}")


def test_a_gradient_with_an_updates_local_training_is_written_with_a_warning(tmp_path):
    """A gradient message is attacked as one gradient: a learning rate or local steps given with it are not read."""
    with pytest.warns(SettingWarning, match=r"^lr=0.1 and local_steps=3 describe an update's local training, which a "
                                            r"gradient message does not read: give kind='update'"):
        write_message(tmp_path / "m.pt", torch.zeros(4), lr=0.1, local_steps=3)
    assert read_message(tmp_path / "m.pt").kind == "gradient"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write_message(tmp_path / "g.pt", torch.zeros(4))
        write_message(tmp_path / "u.pt", torch.zeros(4), kind="update", lr=0.1, local_steps=3)


def test_a_non_finite_or_complex_message_is_refused_naming_the_first_bad_number(tmp_path):
    with pytest.raises(MessageError, match="the message holds a non-finite number \\(nan\\) at index 1"):
        write_message(tmp_path / "m.pt", torch.tensor([1.0, float("nan"), float("inf")]))
    with pytest.raises(MessageError, match="'message' must be a flat, non-empty, real floating-point tensor, got a "
                                           "complex64 tensor of shape \\(2,\\)"):
        write_message(tmp_path / "m.pt", torch.zeros(2, dtype=torch.complex64))
    assert not list(tmp_path.iterdir())


def test_the_local_steps_bound_is_the_iterations_bound():
    from leakattack.config.params import MAX_ITERATIONS
    from leakattack.results.message import MAX_LOCAL_STEPS

    assert MAX_LOCAL_STEPS == MAX_ITERATIONS  # a copy: results comes before config in the import order


def test_a_truth_file_is_a_tensor_or_a_dict_of_images_and_labels(tmp_path):
    x = torch.rand(2, 3, 4, 4)
    torch.save(x, tmp_path / "a.pt")
    torch.save({"images": x[0], "labels": torch.tensor(4)}, tmp_path / "b.pt")
    images, labels = read_truth(tmp_path / "a.pt")
    assert torch.equal(images, x) and labels is None
    images, labels = read_truth(tmp_path / "b.pt")
    assert images.shape == (1, 3, 4, 4) and labels.tolist() == [4]
    torch.save({"labels": torch.tensor([1])}, tmp_path / "c.pt")
    with pytest.raises(MessageError, match="is a dict without 'images'"):
        read_truth(tmp_path / "c.pt")


@pytest.mark.parametrize("images, said", [
    # no image values: a traceback from min() over an empty tensor
    (torch.empty(0, 3, 4, 4), r"holds no image values \(shape \(0, 3, 4, 4\)\)"),
    ({"images": torch.empty(2, 0, 4, 4)}, r"holds no image values \(shape \(2, 0, 4, 4\)\)"),
    # the dtype that is refused is named (the sentence gave the shape alone, which was the one asked for)
    ((torch.rand(2, 3, 4, 4) * 255).to(torch.uint8), r"got a uint8 tensor of shape \(2, 3, 4, 4\) \(pixels 0-255: "),
    (torch.zeros(2, 3, 4, 4, dtype=torch.bool), r"got a bool tensor of shape"),
    (torch.zeros(2, 3, 4, 4, dtype=torch.complex64), r"got a complex64 tensor of shape"),
    ([1.0, 2.0], r"got a list"),
])
def test_a_truth_file_without_float_images_is_one_sentence_naming_what_it_holds(tmp_path, images, said):
    torch.save(images, tmp_path / "t.pt")
    with pytest.raises(MessageError, match="^" + re.escape(f"truth file '{tmp_path / 't.pt'}' ") + ".*" + said):
        read_truth(tmp_path / "t.pt")


def test_an_input_shape_of_numpy_integers_or_a_torch_size_is_written_as_a_list(tmp_path):
    import numpy as np

    for shape in (np.array([1, 2, 2]), torch.Size([1, 2, 2]), (np.int64(1), 2, 2)):
        path = write_message(tmp_path / "m.pt", torch.zeros(4), input_shape=shape)
        assert read_message(path).input_shape == (1, 2, 2)


def test_a_view_is_written_as_its_own_numbers_only(tmp_path):
    # torch.save writes a view's whole storage: the other clients' messages and the data set's other labels
    messages, labels = torch.randn(3, 10, dtype=torch.float64), torch.arange(1000) % 10
    path = write_message(tmp_path / "m.pt", messages[1], labels=labels[4:6], batch_size=2, num_classes=10)
    raw = torch.load(path, weights_only=True)
    assert raw["message"].untyped_storage().nbytes() == 10 * 8
    assert raw["labels"].untyped_storage().nbytes() == 2 * raw["labels"].element_size()
    m = read_message(path)
    assert torch.equal(m.y, messages[1]) and m.labels.tolist() == [4, 5]


def test_numpy_scalars_are_written_as_plain_values_that_read_back(tmp_path):
    import numpy as np

    path = write_message(tmp_path / "m.pt", torch.ones(4), num_classes=np.int64(10), batch_size=np.int64(2),
                         local_steps=np.int64(3), round=np.int64(3), client=np.str_("a"))
    m = read_message(path)
    assert (m.num_classes, m.batch_size, m.local_steps) == (10, 2, 3)
    assert m.ids == {"round": 3, "client": "a"} and type(m.ids["round"]) is int and type(m.ids["client"]) is str


def test_a_truth_within_round_off_of_the_pixel_range_is_taken_and_a_nan_is_named(tmp_path):
    """1 + 1e-6 (round-off) was refused as not unnormalised pixels, and a NaN got the same sentence."""
    import pytest as _pytest
    import torch as _torch

    from leakattack.results.message import MessageError, read_truth

    x = _torch.rand(1, 1, 4, 4, generator=_torch.Generator().manual_seed(0))
    x[0, 0, 0, 0] = 1 + 1e-6
    _torch.save({"images": x, "labels": _torch.tensor([1])}, tmp_path / "t.pt")
    images, labels = read_truth(tmp_path / "t.pt")
    assert float(images.max()) == 1.0 and labels.tolist() == [1]
    x[0, 0, 0, 0] = float("nan")
    _torch.save(x, tmp_path / "n.pt")
    with _pytest.raises(MessageError, match="1 of the images' values is not finite"):
        read_truth(tmp_path / "n.pt")
    x[0, 0, 0, 0] = 2.0
    _torch.save(x, tmp_path / "b.pt")
    with _pytest.raises(MessageError, match=r"must lie in \[0, 1\] \(unnormalised pixels\), and they reach .* to 2"):
        read_truth(tmp_path / "b.pt")


def test_a_path_that_cannot_hold_the_message_file_is_one_sentence_naming_it(tmp_path):
    """A folder gave IsADirectoryError naming the atomic write's temporary file ('/tmp/.x.q9eqp1a8.tmp'), a path
    under a file FileExistsError: each is one MessageError naming the path given, and nothing is written."""
    (tmp_path / "afile").write_text("")
    for path, needle in ((tmp_path, "is a folder"), (tmp_path / "afile" / "m.pt", "afile' is a file, not a folder")):
        with pytest.raises(MessageError, match=needle) as err:
            write_message(path, torch.zeros(5))
        assert str(err.value).startswith(f"message file path '{path}'") and ".tmp" not in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
    with pytest.raises(MessageError, match="^the message file path is empty"):
        write_message("", torch.zeros(5))
    # a path no command line names is no --out: a newline in a file name is the file system's to take
    assert write_message(tmp_path / "a\nb.pt", torch.zeros(5)).is_file()
