"""Image folders (ROOT/<class>/<image files>) load as torchvision's ImageFolder sees them, cut to squares, and read
from disk only the images a batch needs; a missing or malformed root is a one-sentence DataError naming the layout."""

import numpy as np
import pytest
import torch
from PIL import Image

from leakattack import data
from leakattack.data import DataError, ImageFolderSet, ImageSet, get_batch, get_dataset, train_test_split
from leakattack.data import folder as folder_module

#: 8 px images keep the reads quick; nothing here scores a reconstruction; the fixture's RGBA image and small
#: images are meant (their warnings: tests/data/test_own_folder_files.py)
pytestmark = [pytest.mark.filterwarnings("ignore:images of 8x8 pixels cannot be scored"),
              pytest.mark.filterwarnings("ignore:transparent pixels' alpha is dropped"),
              pytest.mark.filterwarnings("ignore:images smaller than")]

LAYOUT = "<class>/<image files>"


def pixels(h, w, channels, seed):
    return np.random.default_rng(seed).integers(0, 256, size=(h, w, channels) if channels > 1 else (h, w),
                                                dtype=np.uint8)


@pytest.fixture
def root(tmp_path):
    """Two classes named so that sorting matters, a nested image, a grey and an RGBA image, files to skip."""
    r = tmp_path / "imgs"
    (r / "b_dog").mkdir(parents=True)
    (r / "a_cat" / "more").mkdir(parents=True)
    Image.fromarray(pixels(30, 40, 3, 0)).save(r / "a_cat" / "x1.png")  # landscape
    Image.fromarray(pixels(50, 20, 3, 1)).save(r / "a_cat" / "more" / "x2.PNG")  # portrait, in a sub-folder
    Image.fromarray(pixels(24, 24, 1, 2), mode="L").save(r / "b_dog" / "grey.png")
    Image.fromarray(pixels(33, 27, 4, 3), mode="RGBA").save(r / "b_dog" / "rgba.png")
    Image.fromarray(pixels(20, 20, 3, 4)).save(r / "b_dog" / "photo.jpg", quality=90)
    (r / "b_dog" / "notes.txt").write_text("not an image")
    (r / "b_dog" / "._photo.jpg").write_bytes(b"resource fork, not an image")
    (r / ".ipynb_checkpoints").mkdir()
    yield r
    data._load_cached.cache_clear()


def test_classes_are_the_sorted_sub_folders_and_files_their_images(root):
    ds = get_dataset("imagefolder", root=root, image_size=16)
    assert isinstance(ds, ImageSet) and isinstance(ds, ImageFolderSet)
    assert ds.name == "imagefolder" and ds.class_names == ["a_cat", "b_dog"] and ds.num_classes == 2
    assert [p.relative_to(root).as_posix() for p in ds.files] == [
        "a_cat/x1.png", "a_cat/more/x2.PNG", "b_dog/grey.png", "b_dog/photo.jpg", "b_dog/rgba.png"]
    assert ds.labels.tolist() == [0, 0, 1, 1, 1] and ds.labels.dtype == torch.long
    assert len(ds) == 5 and ds.in_shape == (3, 16, 16)
    assert ds.images.shape == (5, 3, 16, 16) and ds.images.dtype == torch.float32
    assert 0.0 <= float(ds.images.min()) and float(ds.images.max()) <= 1.0
    assert str(root.resolve()) in ds.source and "16 px" in ds.source


def test_the_default_size_is_224_and_the_set_is_cached(root):
    ds = get_dataset("imagefolder", root=root)
    assert ds.in_shape == (3, 224, 224) and get_dataset("imagefolder", root=str(root)) is ds
    assert get_batch(ds, 0, 1)[0].shape == (1, 3, 224, 224)


@pytest.mark.parametrize("size", [16, 21, 224])
def test_pixels_equal_torchvision_imagefolder_with_resize_and_center_crop(root, size):
    """Bit for bit what ImageFolder(root, Compose([Resize(s), CenterCrop(s), ToTensor()])) gives, class by class."""
    tv = pytest.importorskip("torchvision")
    from torchvision import transforms

    (root / ".ipynb_checkpoints").rmdir()  # ImageFolder would take these two for a class and an image
    (root / "b_dog" / "._photo.jpg").unlink()
    # folders go by path string: a_cat/more-2 before a_cat/more/deep ('-' sorts before '/')
    for sub, seed in (("more-2", 5), ("more/deep", 6)):
        (root / "a_cat" / sub).mkdir()
        Image.fromarray(pixels(16, 16, 3, seed)).save(root / "a_cat" / sub / "x0.png")
    ref = tv.datasets.ImageFolder(str(root), transform=transforms.Compose(
        [transforms.Resize(size), transforms.CenterCrop(size), transforms.ToTensor()]))
    ds = get_dataset("imagefolder", root=root, image_size=size)
    assert ds.class_names == ref.classes and ds.labels.tolist() == ref.targets
    assert [str(p) for p in ds.files] == [path for path, _ in ref.samples]
    for i in range(len(ds)):
        x, _ = ref[i]
        assert torch.equal(ds.images[i], x), ds.files[i]


def test_grey_images_repeat_over_three_channels_and_alpha_is_dropped(root):
    ds = get_dataset("imagefolder", root=root, image_size=24)  # the 24 x 24 grey image keeps its size
    grey = ds.images[ds.files.index(root / "b_dog" / "grey.png")]
    assert torch.equal(grey[0], grey[1]) and torch.equal(grey[1], grey[2])
    assert torch.equal(grey[0], torch.from_numpy(pixels(24, 24, 1, 2) / np.float32(255.0)))
    rgba = ds.images[ds.files.index(root / "b_dog" / "rgba.png")]
    assert rgba.shape == (3, 24, 24) and float(rgba.std()) > 0.1  # colour kept, not blended to one tone


def test_a_batch_reads_only_its_own_images(root, monkeypatch):
    read = []
    real = folder_module.read_image
    monkeypatch.setattr(folder_module, "read_image",
                        lambda path, size, **kw: read.append(path.name) or real(path, size, **kw))
    ds = get_dataset("imagefolder", root=root, image_size=8)
    assert len(ds) == 5 and ds.in_shape == (3, 8, 8) and read == []  # listing the folder opens no image
    x, y = get_batch(ds, 1, 2)
    assert read == ["x2.PNG", "grey.png"] and x.shape == (2, 3, 8, 8) and y.tolist() == [0, 1]
    assert torch.equal(x, ds.images[1:3])  # the same pixels as the whole set, read once more in full


def test_a_broken_image_fails_only_the_batch_that_holds_it(root):
    (root / "b_dog" / "zz_broken.png").write_bytes(b"\x89PNG\r\n\x1a\n but cut off")
    ds = get_dataset("imagefolder", root=root, image_size=8)
    assert get_batch(ds, 0, 5)[0].shape == (5, 3, 8, 8)
    with pytest.raises(DataError, match="zz_broken.png is not readable") as err:
        get_batch(ds, 5, 1)
    assert "\n" not in str(err.value) and LAYOUT in str(err.value)


def test_a_split_of_a_folder_stays_on_disk_and_keeps_the_pixels(root, monkeypatch):
    ds = get_dataset("imagefolder", root=root, image_size=8)
    whole = ds.images.clone()
    data._load_cached.cache_clear()
    ds = get_dataset("imagefolder", root=root, image_size=8)
    tr, te = train_test_split(ds, test_fraction=0.4, seed=0)
    assert isinstance(tr, ImageFolderSet) and ds._loaded is None and tr._loaded is None
    assert len(tr) + len(te) == 5 and sorted(tr.files + te.files) == sorted(ds.files)
    for part in (tr, te):
        for i, path in enumerate(part.files):
            assert torch.equal(part.images[i], whole[ds.files.index(path)])
            assert int(part.labels[i]) == int(ds.labels[ds.files.index(path)])


def error_of(**kwargs) -> str:
    with pytest.raises(DataError) as err:
        get_dataset("imagefolder", **kwargs)
    msg = str(err.value)
    assert "\n" not in msg and msg.count(". ") == 0, msg  # one sentence
    return msg


def test_no_root_names_the_flag_and_the_layout():
    msg = error_of()
    assert "--data-root DIR" in msg and "DIR/<class>/<image files>" in msg


def test_a_missing_root_names_the_layout(tmp_path):
    msg = error_of(root=tmp_path / "absent")
    assert msg.startswith(f"no image folder at {(tmp_path / 'absent').resolve()}") and LAYOUT in msg


def test_a_file_as_root_names_the_layout(tmp_path):
    (tmp_path / "a.png").write_bytes(b"")
    msg = error_of(root=tmp_path / "a.png")
    assert "is a file, not a folder" in msg and LAYOUT in msg
    # an image in a class folder: the root it belongs to, where the layout read <image's folder>/<root>/<class>/...
    (tmp_path / "cats").mkdir()
    (tmp_path / "cats" / "red.png").write_bytes(b"")
    msg = error_of(root=tmp_path / "cats" / "red.png")
    assert (f"names the folder above the class folders (for this image, {tmp_path.resolve()}, where its class folder "
            "is cats), laid out as <root>/<class>/<image files>") in msg
    assert "cats/<root>" not in msg


def test_images_beside_the_class_folders_are_warned_of(tmp_path):
    """They are not read (torchvision's ImageFolder layout), and were left out without a word."""
    from leakattack.errors import SettingWarning

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        Image.fromarray(pixels(8, 8, 3, 0)).save(tmp_path / name / "x.png")
    Image.fromarray(pixels(8, 8, 3, 1)).save(tmp_path / "loose1.png")
    Image.fromarray(pixels(8, 8, 3, 2)).save(tmp_path / "loose2.jpg")
    with pytest.warns(SettingWarning, match=r"image folder: 2 image file\(s\) directly in .* \(e\.g\. loose1\.png\) "
                                            "are not read: only the images in its class sub-folders are"):
        classes, files, _ = folder_module.scan_folder(tmp_path)
    assert classes == ["a", "b"] and len(files) == 2


def test_images_directly_in_the_root_are_pointed_out(tmp_path):
    Image.fromarray(pixels(8, 8, 3, 0)).save(tmp_path / "loose.png")
    msg = error_of(root=tmp_path)
    assert "no class sub-folders (it has 1 image(s) directly inside" in msg and LAYOUT in msg


def test_an_empty_root_names_the_layout(tmp_path):
    msg = error_of(root=tmp_path)
    assert "no class sub-folders (it has none)" in msg and LAYOUT in msg


def test_a_class_folder_without_images_is_named(tmp_path):
    (tmp_path / "cat").mkdir()
    (tmp_path / "dog").mkdir()
    Image.fromarray(pixels(8, 8, 3, 0)).save(tmp_path / "cat" / "a.png")
    (tmp_path / "dog" / "readme.txt").write_text("no images here")
    msg = error_of(root=tmp_path)
    assert msg.startswith("class folder(s) dog under") and LAYOUT in msg and ".png" in msg


def test_an_image_size_is_refused_only_by_fixed_size_sets():
    with pytest.raises(DataError, match="--image-size applies to photos, imagefolder only, not to digits"):
        get_dataset("digits", image_size=16)


def test_photos_at_224_px_are_50_real_crops_and_at_32_px_the_default_set():
    big = get_dataset("photos", image_size=224)
    assert big.images.shape == (50, 3, 224, 224) and big.images.dtype == torch.float32
    assert 0.0 <= float(big.images.min()) and float(big.images.max()) <= 1.0
    stds = big.images.flatten(1).std(dim=1)
    assert float(stds.min()) > 0.01  # every crop has content: none blank or constant
    flat = big.images.flatten(1)
    assert len({tuple(row[:64].tolist()) for row in flat}) == 50  # 50 different crops
    assert torch.equal(big.labels, get_dataset("photos").labels)
    assert torch.equal(get_dataset("photos", image_size=32).images, get_dataset("photos").images)


def test_a_single_class_is_refused_as_its_gradient_is_zero(tmp_path):
    (tmp_path / "cat").mkdir()
    Image.fromarray(pixels(8, 8, 3, 0)).save(tmp_path / "cat" / "a.png")
    msg = error_of(root=tmp_path)
    assert "holds one class sub-folder (cat): a classifier of one class has a zero loss and a zero gradient" in msg


def test_sixteen_bit_grey_is_scaled_not_clipped_to_white(tmp_path):
    """Pillow's own conversion clips 16-bit greyscale at 255 (a white image); its [0, 65535] maps onto [0, 1]."""
    eight = pixels(24, 24, 1, 5)
    Image.fromarray(eight.astype(np.uint16) * 257).save(tmp_path / "g16.png")
    assert Image.open(tmp_path / "g16.png").mode.startswith("I;16")
    x = folder_module.read_image(tmp_path / "g16.png", 24)
    assert x.shape == (3, 24, 24) and torch.equal(x[0], x[2])
    assert torch.equal(x[0], torch.from_numpy(eight / np.float32(255.0)))


def test_float_pixels_and_a_decompression_bomb_are_one_sentence(tmp_path, monkeypatch):
    Image.fromarray(np.zeros((4, 4), np.float32)).save(tmp_path / "f.tiff")
    with pytest.raises(DataError, match=r"f\.tiff holds floating-point pixels, which have no fixed range"):
        folder_module.read_image(tmp_path / "f.tiff", 4)
    Image.fromarray(pixels(40, 40, 3, 6)).save(tmp_path / "big.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 500)  # 1600 pixels: past twice the limit, Pillow's error
    # an image, only larger than Pillow opens: "not readable ... must be an image" named the wrong fix
    with pytest.raises(DataError, match=r"big\.png has more pixels than Pillow opens \(Image size \(1600 pixels\) "
                                        r"exceeds .*PIL\.Image\.MAX_IMAGE_PIXELS sets the limit\): shrink it") as err:
        folder_module.read_image(tmp_path / "big.png", 8)
    assert "\n" not in str(err.value) and "must be an image" not in str(err.value)


def test_pillows_warnings_name_the_file_once(tmp_path, monkeypatch):
    from leakattack.errors import SettingWarning

    Image.fromarray(pixels(40, 40, 3, 7)).save(tmp_path / "large.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 1600 pixels: above the limit, below twice it
    monkeypatch.setattr(folder_module, "_WARNED", set())
    with pytest.warns(SettingWarning) as said:
        folder_module.read_image(tmp_path / "large.png", 8)
        folder_module.read_image(tmp_path / "large.png", 8)  # the baseline and the batch read the same file
    assert [str(w.message) for w in said] == [f"image {tmp_path / 'large.png'}: Image size (1600 pixels) exceeds "
                                              "limit of 1000 pixels, could be decompression bomb DOS attack."]


def test_a_link_back_to_the_root_is_not_followed(tmp_path):
    for cls, seed in (("a", 1), ("b", 2)):
        (tmp_path / cls).mkdir()
        Image.fromarray(pixels(8, 8, 3, seed)).save(tmp_path / cls / "x.png")
    (tmp_path / "a" / "up").symlink_to("..", target_is_directory=True)
    with pytest.warns(UserWarning, match="leads back to .* not followed"):
        classes, files, labels = folder_module.scan_folder(tmp_path)
    assert classes == ["a", "b"] and labels == [0, 1] and [f.parent.name for f in files] == ["a", "b"]
