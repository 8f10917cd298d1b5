"""What a researcher's own image folder holds besides plain RGB photos: files of formats not read, images smaller than
the crop, photos with an EXIF orientation, transparent PNGs, a 16-bit PNG opened by an older Pillow.  Each is read as
torchvision's ImageFolder reads it, and where that differs from the file as a viewer shows it, one line says so."""

import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from leakattack import data
from leakattack.data import DataError, get_batch, get_dataset, train_test_split
from leakattack.data import folder as folder_module
from leakattack.errors import SettingWarning


@pytest.fixture(autouse=True)
def _fresh_cache():
    yield
    data._load_cached.cache_clear()


def rgb(h, w, seed=0):
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8))


def two_classes(root, size=20):
    for i, cls in enumerate(("a", "b")):
        (root / cls).mkdir(parents=True, exist_ok=True)
        rgb(size, size, i).save(root / cls / "x.png")
    return root


def said(fn) -> list[str]:
    """The SettingWarnings ``fn()`` gives, as text."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if issubclass(w.category, SettingWarning)]


def test_images_of_formats_not_read_are_warned_of_and_other_files_are_not(tmp_path):
    root = two_classes(tmp_path)
    rgb(20, 20).save(root / "a" / "anim.gif")
    (root / "b" / "README.txt").write_text("notes")
    lines = said(lambda: get_dataset("imagefolder", root=root, image_size=16))
    assert len(lines) == 1 and "1 file(s) ending in .gif" in lines[0] and "anim.gif" in lines[0], lines
    assert len(get_dataset("imagefolder", root=root, image_size=16)) == 2  # the GIF stays skipped, as torchvision
    data._load_cached.cache_clear()
    (root / "a" / "anim.gif").unlink()
    assert said(lambda: get_dataset("imagefolder", root=root, image_size=16)) == []  # a README is no image


def test_a_class_folder_of_only_unread_formats_says_so(tmp_path):
    root = two_classes(tmp_path)
    (root / "c").mkdir()
    rgb(20, 20).save(root / "c" / "only.gif")
    with pytest.raises(DataError, match=r"class folder\(s\) c under .* \(1 of other endings, e\.g\. only\.gif, are "
                                        r"not read\)") as err:
        get_dataset("imagefolder", root=root, image_size=16)
    assert "\n" not in str(err.value)


def test_upscaled_images_are_warned_of_once_per_set_with_the_size_that_keeps_them(tmp_path):
    root = two_classes(tmp_path, size=20)
    ds = get_dataset("imagefolder", root=root, image_size=32)
    lines = said(lambda: get_batch(ds, 0, 2))
    assert lines == [f"images smaller than 32 px on the shorter side are upscaled (bilinear), which adds unknowns but "
                     f"no detail: e.g. {root / 'a' / 'x.png'} (20x20 px); leakattack run --image-size 20 keeps "
                     f"their pixels"]
    assert said(lambda: get_batch(ds, 1, 1)) == []  # once per set: the baseline and the batch read the same files
    data._load_cached.cache_clear()
    assert said(lambda: get_batch(get_dataset("imagefolder", root=root, image_size=16), 0, 2)) == []  # shrunk


def test_a_split_of_a_folder_warns_of_upscaling_once(tmp_path):
    """leakattack train read the train and the test part of a split and warned of the same upscaling twice."""
    root = two_classes(tmp_path, size=20)
    train, test = train_test_split(get_dataset("imagefolder", root=root, image_size=32), 0.5, seed=0)
    lines = said(lambda: (train.images, test.images))
    assert len(lines) == 1 and "are upscaled (bilinear)" in lines[0], lines


def test_a_protocols_split_warns_of_upscaling_without_naming_an_image_size_it_cannot_take(tmp_path):
    """leakattack train, which reads an image folder at 224 px and has no --image-size, was told that `leakattack run
    --image-size 20` keeps the images' pixels (and run --protocol, which does not read that flag, as well)."""
    from leakattack.training import load_split

    root = two_classes(tmp_path, size=20)
    train, test = load_split({"dataset": "imagefolder", "data_root": str(root), "test_fraction": 0.5, "seed": 0})
    lines = said(lambda: (train.images, test.images))
    assert len(lines) == 1 and "are upscaled (bilinear)" in lines[0] and "--image-size" not in lines[0], lines


def test_an_exif_orientation_is_warned_of_and_not_applied(tmp_path):
    root = two_classes(tmp_path)
    photo = rgb(20, 40, 5)  # landscape as stored; the tag says: turn 90 degrees to show it upright
    exif = photo.getexif()
    exif[0x0112] = 6
    photo.save(root / "b" / "phone.jpg", exif=exif, quality=95)
    ds = get_dataset("imagefolder", root=root, image_size=16)
    lines = said(lambda: get_batch(ds, 1, 2))
    assert len(lines) == 1 and "EXIF orientations are not applied" in lines[0], lines
    assert f"{root / 'b' / 'phone.jpg'} (rotated 90 degrees to show upright)" in lines[0]
    with Image.open(root / "b" / "phone.jpg") as im:  # as stored, unrotated: torchvision's loader
        expected = torch.from_numpy(np.asarray(im.convert("RGB").resize((32, 16), Image.Resampling.BILINEAR)
                                               .crop((8, 0, 24, 16)), dtype=np.float32) / 255.0).permute(2, 0, 1)
    assert torch.equal(get_batch(ds, 1, 1)[0][0], expected)


def test_transparent_pixels_are_warned_of_and_opaque_alpha_is_not(tmp_path):
    root = two_classes(tmp_path)
    opaque = np.full((20, 20, 4), 255, np.uint8)
    opaque[..., :3] = 90
    Image.fromarray(opaque, "RGBA").save(root / "a" / "opaque.png")
    ds = get_dataset("imagefolder", root=root, image_size=16)
    assert said(lambda: get_batch(ds, 0, 3)) == []
    clear = opaque.copy()
    clear[:5, :, 3] = 0
    Image.fromarray(clear, "RGBA").save(root / "b" / "clear.png")
    data._load_cached.cache_clear()
    ds = get_dataset("imagefolder", root=root, image_size=16)
    lines = said(lambda: get_batch(ds, 0, 4))
    assert lines == ["transparent pixels' alpha is dropped, not composited onto a background (as torchvision's "
                     f"ImageFolder does), so colours hidden under it show: e.g. {root / 'b' / 'clear.png'}"]


def test_a_sixteen_bit_png_opened_in_mode_i_by_an_older_pillow_is_scaled(tmp_path):
    """Older Pillow opens 16-bit greyscale PNG in mode I (32-bit integers): a PNG holds at most 16 bits, so its
    0-65535 is scaled as I;16's is, not refused as pixels of no fixed range."""
    eight = np.random.default_rng(3).integers(0, 256, (12, 12), dtype=np.uint8)
    im = Image.fromarray(eight.astype(np.int32) * 257)
    assert im.mode == "I"
    im.format = "PNG"
    out = np.asarray(folder_module._as_rgb(im))
    assert out.shape == (12, 12, 3) and np.array_equal(out[..., 0], eight)
    im.format = "TIFF"  # a TIFF can hold 32-bit integers: no fixed range
    with pytest.raises(folder_module._Unsupported, match="32-bit integer"):
        folder_module._as_rgb(im)


def test_a_class_too_small_for_a_class_batch_is_named(tmp_path):
    root = two_classes(tmp_path)
    ds = get_dataset("imagefolder", root=root, image_size=16)
    with pytest.raises(DataError, match=r"class 1 \(b\) of dataset imagefolder has 1 image, fewer than the batch "
                                        "size 2"):
        get_batch(ds, 1, 2, draw="class")


def test_a_folder_given_as_the_data_set_name_points_at_imagefolder(tmp_path):
    root = two_classes(tmp_path / "my images")
    with pytest.raises(DataError, match="a folder of images is the dataset imagefolder") as err:
        get_dataset(str(root))
    assert f"--dataset imagefolder --data-root {root}" in str(err.value)


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="named pipes are POSIX's")
def test_a_named_pipe_with_an_image_ending_is_one_sentence_not_a_read_without_end(tmp_path):
    """A named pipe called 1.png in a class folder is refused naming it; read, it would wait for a writer without
    end (a writer here opens and closes it while the test runs, so that a read returns rather than hangs)."""
    import os
    import threading

    root = two_classes(tmp_path)
    pipe = root / "a" / "y.png"
    os.mkfifo(pipe)
    done = threading.Event()

    def unblock():  # a reader waiting on the pipe gets its end of file
        while not done.wait(0.2):
            try:
                os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # no reader yet
                continue

    writer = threading.Thread(target=unblock, daemon=True)
    writer.start()
    try:
        with pytest.raises(DataError, match=rf"image {pipe} is a named pipe, not a file"):
            get_batch(get_dataset("imagefolder", root=root, image_size=16), 0, 2)
    finally:
        done.set()
        writer.join()
