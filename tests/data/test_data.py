"""Tests for leakattack.data: the registry, built-in offline sets, errors, batching and splitting."""

from pathlib import Path

import pytest
import torch

from leakattack import data
from leakattack.data import (
    DataError,
    ImageSet,
    get_batch,
    get_dataset,
    list_datasets,
    load_dataset,
    register_dataset,
    train_test_split,
)
from leakattack.errors import UserError


def test_list_datasets_names():
    """The six supported names, in order."""
    assert list_datasets() == ["photos", "digits", "mnist", "cifar10", "cifar100", "imagefolder"]


def test_photos_shape_range_and_labels():
    """photos: 50 RGB 32x32 float32 images in [0, 1], 10 classes named after the photos."""
    ds = get_dataset("photos")
    assert isinstance(ds, ImageSet)
    assert ds.images.shape == (50, 3, 32, 32) and ds.images.dtype == torch.float32
    assert ds.in_shape == (3, 32, 32)
    assert 0.0 <= float(ds.images.min()) and float(ds.images.max()) <= 1.0
    assert ds.num_classes == 10 and len(ds.class_names) == 10
    assert ds.labels.dtype == torch.long
    assert torch.equal(torch.bincount(ds.labels, minlength=10), torch.full((10,), 5))
    assert ds.class_names[int(ds.labels[0])] == "astronaut"


def test_photos_index0_is_detailed():
    """Image 0 (the astronaut's face) is not flat: pixel std > 0.1."""
    assert float(get_dataset("photos").images[0].std()) > 0.1


def test_photos_consecutive_indices_are_distinct_classes():
    """The first 10 images are one crop of each of the 10 photos."""
    assert get_dataset("photos").labels[:10].tolist() == list(range(10))


def test_photos_are_deterministic():
    """Rebuilding the set from scratch (cache cleared) gives bit-identical images."""
    a = get_dataset("photos").images.clone()
    data._load_cached.cache_clear()
    b = get_dataset("photos").images
    assert torch.equal(a, b)


@pytest.mark.parametrize("size", [32, 33, 224, 300])
def test_photo_crops_are_resized_as_scikit_image_resizes_them(size):
    """The sparse per-axis resampling is skimage.transform.resize (order 1, anti-aliased, mode reflect) to
    round-off, downsampling (by 6.25x to 44x, odd sizes) and upsampling alike, and the 32 px set holds
    resize's images in float32 (to the last bit on the machines measured; a bit of rounding apart allowed)."""
    import numpy as np
    import skimage.data
    from skimage.transform import resize

    from leakattack.data.embedded import PHOTO_NAMES, _photo_boxes, _resize

    for name in ("astronaut", "retina", "coins"):
        img = np.asarray(getattr(skimage.data, name)(), dtype=np.float64) / 255.0
        img = (np.repeat(img[:, :, None], 3, axis=2) if img.ndim == 2 else img)[:, :, :3]
        for top, left, side in _photo_boxes(name, *img.shape[:2])[:2]:
            patch = img[top:top + side, left:left + side]
            want = resize(patch, (size, size), order=1, anti_aliasing=True, mode="reflect")
            got = _resize(patch, size)
            assert got.shape == want.shape == (size, size, 3)
            assert np.abs(got - want).max() < 1e-12, (name, side, size)
            if size == 32:
                k = PHOTO_NAMES.index(name)
                crop = _photo_boxes(name, *img.shape[:2]).index((top, left, side))
                photo = get_dataset("photos").images[crop * len(PHOTO_NAMES) + k].permute(1, 2, 0).numpy()
                assert np.abs(photo - np.clip(want, 0, 1).astype(np.float32)).max() <= 2 ** -23, (name, crop)


def test_photos_source_names_the_file_that_states_their_licences():
    """The photos' provenance points at a file of the package whose docstring lists each photo's licence."""
    ds = get_dataset("photos")
    path = Path(data.__file__).parent / "embedded.py"
    assert "leakattack/data/embedded.py" in ds.source and path.is_file()
    text = path.read_text()
    assert all(name in text for name in ds.class_names) and "BSD-3-Clause" in text


def test_photos_above_their_smallest_crop_say_which_are_upscaled():
    """At 224 px nine crops (180-200 px in their photographs, photo 0's face among them) are upscaled: one
    warning names the count, an example and the size that keeps every crop's pixels, and the source says so too;
    at 180 px none is, and nothing is said."""
    import warnings

    from leakattack.data.embedded import load_photos
    from leakattack.errors import SettingWarning

    with pytest.warns(SettingWarning) as caught:
        ds = load_photos(224)
    text = " ".join(str(w.message) for w in caught if issubclass(w.category, SettingWarning))
    assert "9 of the 50 photos" in text and "photo 0 (astronaut, 200 px)" in text and "--image-size 180" in text
    assert "9 of the 50 crops are smaller than 224 px and upscaled" in ds.source
    with warnings.catch_warnings():
        warnings.simplefilter("error", SettingWarning)
        ds = load_photos(180)
    assert "upscaled" not in ds.source


def test_digits_shape_range_and_labels():
    """digits: 1797 greyscale 28x28 images in [0, 1], labels 0..9, deterministic."""
    ds = get_dataset("digits")
    assert ds.images.shape == (1797, 1, 28, 28) and ds.images.dtype == torch.float32
    assert ds.in_shape == (1, 28, 28)
    assert float(ds.images.min()) == 0.0 and float(ds.images.max()) <= 1.0
    assert float(ds.images.max()) > 0.9
    assert ds.num_classes == 10 and set(ds.labels.tolist()) == set(range(10))
    assert get_dataset("digits").images is ds.images  # cached


def test_get_batch_returns_clones_of_consecutive_images():
    """get_batch(ds, 3, 4) is images 3..6; editing it leaves the data set untouched."""
    ds = get_dataset("digits")
    x, y = get_batch(ds, 3, batch_size=4)
    assert torch.equal(x, ds.images[3:7]) and torch.equal(y, ds.labels[3:7])
    x.zero_()
    assert float(ds.images[3:7].abs().sum()) > 0


def test_class_draw_takes_the_next_images_of_the_first_ones_class():
    """--batch-draw class: image I and the next B-1 images of its class, wrapping round the set; every label the
    same, a client that holds one class."""
    ds = get_dataset("photos")  # labels i % 10: five crops of each photograph
    x, y = get_batch(ds, 23, 4, draw="class")
    assert y.tolist() == [3, 3, 3, 3]
    assert torch.equal(x, ds.images[[3, 23, 33, 43]])  # 23, 33, 43, then round to 3; in increasing order
    with pytest.raises(DataError, match=r"class 3 \(rocket\) of dataset photos has 5 images, fewer than the batch "
                                        "size 6"):
        get_batch(ds, 23, 6, draw="class")


def test_random_draw_holds_the_first_image_and_repeats_for_the_same_index():
    """--batch-draw random: image I and B-1 distinct others, the same for the same I and another for another I;
    labels repeat as the set's classes make them."""
    ds = get_dataset("photos")
    pos = data.batch_positions(ds, 7, 8, "random")
    assert 7 in pos.tolist() and len(set(pos.tolist())) == 8 and pos.tolist() == sorted(pos.tolist())
    assert torch.equal(pos, data.batch_positions(ds, 7, 8, "random"))
    assert not torch.equal(pos, data.batch_positions(ds, 8, 8, "random"))
    x, y = get_batch(ds, 7, 8, draw="random")
    assert torch.equal(x, ds.images[pos]) and torch.equal(y, ds.labels[pos])
    repeats = [len(set(ds.labels[data.batch_positions(ds, i, 8, "random")].tolist())) < 8 for i in range(20)]
    assert any(repeats)  # consecutive photos never repeat a label in a batch of eight; random ones do
    assert data.batch_positions(ds, 49, 50, "random").tolist() == list(range(50))
    with pytest.raises(DataError, match="a batch of 51 images does not fit in dataset photos of 50 images"):
        get_batch(ds, 0, 51, draw="random")
    with pytest.raises(DataError, match="unknown batch draw 'mixed'"):
        get_batch(ds, 0, 2, draw="mixed")


@pytest.mark.parametrize("index,batch", [(50, 1), (-1, 1), (48, 4)])
def test_get_batch_out_of_range_raises_data_error(index, batch):
    """Indices past the end (or a batch running past it) raise DataError naming the data-set size."""
    ds = get_dataset("photos")
    with pytest.raises(DataError, match="out of range: dataset photos has 50 images"):
        get_batch(ds, index, batch)


@pytest.mark.parametrize("name", ["mnist", "cifar10", "cifar100"])
def test_missing_root_raises_data_error_with_path(name, tmp_path):
    """A torchvision set absent from an empty root (download off) raises DataError naming the root."""
    with pytest.raises(DataError) as info:
        get_dataset(name, root=tmp_path)
    msg = str(info.value)
    assert str(tmp_path.resolve()) in msg and "--download" in msg and "--data-root" in msg


@pytest.mark.parametrize("download", [False, True])
def test_a_root_that_is_a_file_is_named_as_such(tmp_path, download):
    """--data-root FILE was told the set is not found there and to pass --download, which cannot write into a file."""
    (tmp_path / "t.sh").write_text("")
    with pytest.raises(DataError) as info:
        get_dataset("mnist", root=tmp_path / "t.sh", download=download)
    assert str(info.value) == (f"data root {(tmp_path / 't.sh').resolve()} is a file, not a folder: point --data-root "
                               "at the folder containing mnist (MNIST/ inside it)")


def test_no_root_raises_data_error():
    """mnist without any root raises DataError pointing at --data-root."""
    with pytest.raises(DataError, match="--data-root"):
        get_dataset("mnist")


def test_unknown_name_raises_data_error_listing_choices():
    """An unknown name raises DataError (a UserError, so a ValueError) naming it and listing the valid names in
    order."""
    with pytest.raises(DataError, match="unknown dataset 'imagenet': choose one of "
                                        "photos, digits, mnist, cifar10, cifar100, imagefolder") as info:
        get_dataset("imagenet")
    assert isinstance(info.value, UserError) and isinstance(info.value, ValueError)


def test_names_are_case_insensitive():
    """'Photos' and 'DIGITS' load the same (cached) sets as their lower-case names."""
    assert get_dataset("Photos") is get_dataset("photos")
    assert get_dataset("DIGITS").images is get_dataset("digits").images


def test_load_dataset_is_the_former_name_of_get_dataset():
    """load_dataset is an alias of get_dataset, not a second loader."""
    assert load_dataset is get_dataset


def test_registering_a_name_twice_is_an_error():
    """A second registration under an existing name raises instead of shadowing the first."""
    with pytest.raises(ValueError, match="registered twice"):
        register_dataset("photos", lambda: None, offline=True)
    assert list_datasets() == ["photos", "digits", "mnist", "cifar10", "cifar100", "imagefolder"]


def test_a_loader_that_cannot_be_called_or_returns_no_image_set_is_named(monkeypatch):
    """A loader of 3 was kept and the run ended in "'int' object is not callable"; one that returned a list was refused
    as 'get_batch takes an ImageSet', naming neither the set nor its loader."""
    from leakattack import data as data_module

    monkeypatch.setattr(data_module._REGISTRY, "_items", dict(data_module._REGISTRY._items))
    monkeypatch.setattr(data_module._REGISTRY, "_meta", dict(data_module._REGISTRY._meta))
    monkeypatch.setattr(data_module, "_ORDER", list(data_module._ORDER))
    with pytest.raises(TypeError, match="^the loader of data set 'three' must be a callable that returns an ImageSet"):
        register_dataset("three", 3, offline=True)
    assert "three" not in list_datasets()

    def listing():
        return [1, 2, 3]

    register_dataset("listing", listing, offline=True)
    with pytest.raises(UserError, match=r"^the loader of data set 'listing' \(.*listing\) returned list \[1, 2, 3\], "):
        get_dataset("listing")


def test_train_test_split_is_seeded_stratified_and_disjoint():
    """Split 0.2 of digits: 20% in total, each class within one image of 20%, same seed -> same split."""
    ds = get_dataset("digits")
    tr, te = train_test_split(ds, test_fraction=0.2, seed=0)
    assert len(tr) + len(te) == len(ds)
    counts = torch.bincount(ds.labels, minlength=10)
    te_counts = torch.bincount(te.labels, minlength=10)
    assert len(te) == round(0.2 * len(ds))
    assert torch.all((te_counts.float() - 0.2 * counts.float()).abs() < 1.0)
    tr2, te2 = train_test_split(ds, test_fraction=0.2, seed=0)
    assert torch.equal(te.images, te2.images) and torch.equal(tr.labels, tr2.labels)
    _, te3 = train_test_split(ds, test_fraction=0.2, seed=1)
    assert not torch.equal(te.images, te3.images)


def test_train_test_split_parts_are_disjoint_and_cover_the_set():
    """On a set whose image i is the constant i, the parts' ids are disjoint and cover 0..N-1."""
    n = 40
    ds = ImageSet(name="toy", images=torch.arange(n, dtype=torch.float32).view(n, 1, 1, 1),
                  labels=torch.arange(n) % 4, num_classes=4, class_names=list("abcd"), source="toy")
    tr, te = train_test_split(ds, test_fraction=0.25, seed=3)
    ids_tr = set(tr.images.flatten().long().tolist())
    ids_te = set(te.images.flatten().long().tolist())
    assert not ids_tr & ids_te and ids_tr | ids_te == set(range(n))
    assert len(ids_te) == 10
    assert torch.equal(tr.labels, tr.images.flatten().long() % 4)


def test_train_test_split_rejects_bad_fraction():
    """A test fraction outside (0, 1) is a DataError."""
    with pytest.raises(DataError):
        train_test_split(get_dataset("photos"), test_fraction=1.0)


def _write_idx(path, arr):
    """Write a uint8 array in MNIST's IDX format (magic 0x0800 | ndim, big-endian sizes)."""
    import struct

    with open(path, "wb") as f:
        f.write(struct.pack(">I", 0x0800 | arr.ndim))
        f.write(struct.pack(">" + "I" * arr.ndim, *arr.shape))
        f.write(arr.astype("uint8").tobytes())


def test_mnist_from_root_is_converted_to_unit_range(tmp_path):
    """A (tiny, synthetic) MNIST in IDX format under ROOT/MNIST/raw loads as float32 (N,1,28,28) in [0,1]."""
    import numpy as np

    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, size=(3, 28, 28))
    imgs[0, 0, 0], imgs[1, 0, 0] = 0, 255
    for split in ("train", "t10k"):
        _write_idx(raw / f"{split}-images-idx3-ubyte", imgs)
        _write_idx(raw / f"{split}-labels-idx1-ubyte", np.array([5, 0, 9]))
    ds = get_dataset("mnist", root=tmp_path)
    assert ds.images.shape == (3, 1, 28, 28) and ds.images.dtype == torch.float32
    assert float(ds.images.min()) == 0.0 and float(ds.images.max()) == 1.0
    torch.testing.assert_close(ds.images[2, 0], torch.from_numpy(imgs[2] / 255.0).float())
    assert ds.labels.tolist() == [5, 0, 9] and ds.num_classes == 10
    assert get_dataset("mnist", root=tmp_path, train=False).images.shape == (3, 1, 28, 28)


def test_a_batch_larger_than_the_set_or_running_past_its_end_says_so():
    ds = get_dataset("photos")
    with pytest.raises(DataError, match="a batch of 51 images does not fit in dataset photos of 50 images"):
        get_batch(ds, 0, 51)
    with pytest.raises(DataError, match=r"images 48\.\.51 out of range: dataset photos has 50 images \(the last "
                                        r"batch of 4 starts at image 46\)"):
        get_batch(ds, 48, 4)


def test_a_failed_download_removes_what_it_made_and_keeps_what_was_there(tmp_path, monkeypatch):
    """torchvision makes MNIST/raw/ (and partial files) before its download fails offline: they were left behind."""
    import torchvision

    def failing(root, train, download):
        raw = Path(root) / "MNIST" / "raw"
        raw.mkdir(parents=True)
        (raw / "train-images-idx3-ubyte.gz").write_bytes(b"partial")
        raise RuntimeError("Error downloading train-images-idx3-ubyte.gz:\nTried https://a.example/, got:\n"
                           "<urlopen error [Errno -2] Name or service not known>\n")

    monkeypatch.setattr(torchvision.datasets, "MNIST", failing)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("kept")
    # its first line ends in a colon: the cause, on its last, is named with it
    with pytest.raises(DataError, match=r"could not download mnist into data root .* \(Error downloading "
                                        r"train-images-idx3-ubyte\.gz: <urlopen error \[Errno -2\] Name or service "
                                        r"not known>\)"):
        get_dataset("mnist", root=tmp_path, download=True)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["mine", "mine/notes.txt"]
    with pytest.raises(DataError, match="could not download mnist"):
        get_dataset("mnist", root=tmp_path / "new", download=True)
    assert not (tmp_path / "new").exists()
