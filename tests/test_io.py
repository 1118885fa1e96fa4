"""Reading images and masks: encodings, resizing rule, and clear errors for bad files."""

from __future__ import annotations

import errno
import os
import struct
import zlib
from pathlib import Path

import cv2
import numpy as np
import pytest
import scipy.io

from seg.config import MaskEncoding
from seg.data.io import BadSampleError, encode_mask, fit_mask_to_image, read_image, read_mask_array

P = Path("m.png")


def test_read_image_is_rgb_and_grayscale_becomes_rgb(tmp_path: Path) -> None:
    bgr = np.zeros((4, 5, 3), np.uint8)
    bgr[..., 2] = 200  # red in OpenCV's BGR order
    cv2.imwrite(str(tmp_path / "c.png"), bgr)
    cv2.imwrite(str(tmp_path / "g.png"), np.full((4, 5), 77, np.uint8))
    rgb = read_image(tmp_path / "c.png")
    assert rgb.shape == (4, 5, 3) and rgb[0, 0].tolist() == [200, 0, 0]
    gray = read_image(tmp_path / "g.png")
    assert gray.shape == (4, 5, 3) and (gray == 77).all()


def _sideways_jpeg(path: Path, photo: np.ndarray, orientation: int) -> None:
    """``photo`` (RGB) stored as is, with an EXIF Orientation tag (6: shown turned 90 degrees
    clockwise, as a phone held upright stores it)."""
    from PIL import Image

    image = Image.fromarray(photo)
    exif = image.getexif()
    exif[0x0112] = orientation
    image.save(path, exif=exif.tobytes(), quality=95)


def test_photos_are_read_with_their_exif_orientation(vikram_pairs: Path, tmp_path: Path) -> None:
    """As PIL's exif_transpose shows them; a mask on the stored grid is named as such."""
    from PIL import Image, ImageOps

    photo = read_image(vikram_pairs / "Training_Images" / "1.jpg")  # landscape, no tag
    h, w = photo.shape[:2]
    for orientation in (3, 6, 8):
        path = tmp_path / f"o{orientation}.jpg"
        _sideways_jpeg(path, photo, orientation)
        got = read_image(path)
        with Image.open(path) as im:
            shown = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
        np.testing.assert_array_equal(got, shown)
        assert got.shape[:2] == ((h, w) if orientation == 3 else (w, h)), orientation
    with pytest.raises(BadSampleError, match=r"turned by 90 degrees: masks follow the photo as"):
        fit_mask_to_image(np.zeros((h, w), np.uint8), (w, h), P, 0.01)


def test_corrupt_truncated_and_missing_images_name_the_file(
    shared_datasets: Path, tmp_path: Path
) -> None:
    real = (shared_datasets / "ccp" / "photos" / "0001.jpg").read_bytes()
    (tmp_path / "half.jpg").write_bytes(real[: len(real) // 2])
    (tmp_path / "junk.jpg").write_bytes(b"not an image at all")
    (tmp_path / "empty.jpg").write_bytes(b"")
    for name, words in [("half.jpg", "corrupt"), ("junk.jpg", "corrupt"), ("empty.jpg", "empty"),
                        ("absent.jpg", "missing")]:  # fmt: skip
        with pytest.raises(BadSampleError, match=words) as info:
            read_image(tmp_path / name)
        assert name in str(info.value)


def _radiance_hdr(w: int, h: int) -> bytes:
    """A real Radiance HDR image of w x h pixels, one colour run-length encoded: ~64 bytes a
    row for any width, decoded by OpenCV, whose header PIL cannot read."""
    runs = [127] * (w // 127) + ([w % 127] if w % 127 else [])
    row = bytes([2, 2, w >> 8, w & 255])
    for value in (128, 64, 32, 129):  # R, G, B and the shared exponent
        row += b"".join(bytes([128 + n, value]) for n in runs)
    return f"#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y {h} +X {w}\n".encode() + row * h


def test_a_format_pil_cannot_read_is_held_to_the_same_pixel_limit(tmp_path: Path) -> None:
    """A 14000 x 14000 HDR named .png (PIL cannot read its header; OpenCV decodes it to 2 GB of
    floats) is refused from OpenCV's header, in a fresh process as a user's; a small one
    decodes, and is held to a caller's smaller limit after decoding."""
    import subprocess
    import sys

    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(_radiance_hdr(14000, 14000))
    code = (  # the peak memory added by the read, over the process after its imports
        "import resource, sys\n"
        "from seg.data.io import BadSampleError, read_image\n"
        "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "try:\n"
        "    read_image(sys.argv[1])\n"
        "except BadSampleError as err:\n"
        "    print(err)\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) // 1024)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENCV_IO_MAX_IMAGE_PIXELS"}
    done = subprocess.run(
        [sys.executable, "-c", code, str(bomb)], capture_output=True, text=True, env=env
    )
    message, peak_mb = done.stdout.strip().splitlines()
    assert "bomb.png: its header claims more pixels than the decode limit" in message, done
    assert int(peak_mb) < 300, f"{peak_mb} MB more: the image was decoded (~2.3 GB)"

    small = tmp_path / "small.png"
    small.write_bytes(_radiance_hdr(64, 48))
    assert read_image(small).shape == (48, 64, 3)
    with pytest.raises(BadSampleError, match=r"small\.png: 64 x 48 pixels .* exceed"):
        read_image(small, max_pixels=1000)


def _png_header(w: int, h: int) -> bytes:
    """A PNG whose header claims w x h pixels (8-bit gray), with the data of one row only."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00" * (w + 1))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def test_images_beyond_the_pixel_limit_are_refused_from_their_header(tmp_path: Path) -> None:
    """A decompression bomb (a small file claiming 30000 x 30000 = 2.7 GB of RGB) is refused
    before decoding, naming the file and its size; so is any image over a given limit."""
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(_png_header(30000, 30000))
    with pytest.raises(BadSampleError, match=r"bomb\.png: too large to decode .*900000000 pixels"):
        read_image(bomb)
    with pytest.raises(BadSampleError, match=r"bomb\.png: too large to decode"):
        read_mask_array(bomb)
    cv2.imwrite(str(tmp_path / "ok.png"), np.zeros((40, 50), np.uint8))
    assert read_image(tmp_path / "ok.png").shape == (40, 50, 3)
    with pytest.raises(
        BadSampleError,
        match=r"ok\.png: 50 x 40 pixels \(2,000\) exceed the decode limit of 1,999 pixels",
    ):
        read_image(tmp_path / "ok.png", max_pixels=1999)


def test_mat_masks_read_named_variable_and_reject_missing_key(tmp_path: Path) -> None:
    mask = np.array([[0, 1], [1, 0]], np.uint8)
    scipy.io.savemat(tmp_path / "a.mat", {"mask": mask})
    assert (read_mask_array(tmp_path / "a.mat", "mask") == mask).all()
    with pytest.raises(BadSampleError, match=r"expected variable 'groundtruth'.*\['mask'\]"):
        read_mask_array(tmp_path / "a.mat", "groundtruth")
    (tmp_path / "bad.mat").write_bytes(b"MATLAB 5.0 garbage")
    with pytest.raises(BadSampleError, match=r"bad\.mat"):
        read_mask_array(tmp_path / "bad.mat", "mask")


def test_rgb_mask_with_equal_channels_is_accepted_and_coloured_one_rejected(tmp_path: Path) -> None:
    grey = np.dstack([np.array([[0, 255]], np.uint8)] * 3)
    cv2.imwrite(str(tmp_path / "grey.png"), grey)
    assert read_mask_array(tmp_path / "grey.png").tolist() == [[0, 255]]
    colour = grey.copy()
    colour[0, 1, 0] = 3
    cv2.imwrite(str(tmp_path / "colour.png"), colour)
    with pytest.raises(BadSampleError, match="channels that differ"):
        read_mask_array(tmp_path / "colour.png")


def test_palette_png_gives_its_indices_and_an_rgba_matte_its_alpha(tmp_path: Path) -> None:
    """VOC-style label masks are palette PNGs (OpenCV expands them to colours); cut-out PNGs
    and mattes hold the mask in alpha under a uniform or varying colour."""
    from PIL import Image

    indices = np.array([[0, 1, 255], [1, 0, 15]], np.uint8)
    palette = Image.fromarray(indices, mode="P")
    palette.putpalette([v for i in range(256) for v in ((i * 37) % 256, (i * 91) % 256, i)])
    palette.save(tmp_path / "voc.png")
    assert read_mask_array(tmp_path / "voc.png").tolist() == indices.tolist()
    matte = np.zeros((2, 3, 4), np.uint8)
    matte[..., :3] = (20, 200, 90)  # a uniform colour
    matte[..., 3] = [[0, 128, 255], [255, 10, 0]]
    cv2.imwrite(str(tmp_path / "matte.png"), matte)
    assert read_mask_array(tmp_path / "matte.png").tolist() == matte[..., 3].tolist()
    cutout = matte.copy()
    cutout[0, 0, :3] = (1, 2, 3)  # a photo's colours under the alpha
    cv2.imwrite(str(tmp_path / "cutout.png"), cutout)
    assert read_mask_array(tmp_path / "cutout.png").tolist() == matte[..., 3].tolist()
    opaque = np.dstack([np.array([[0, 255]], np.uint8)] * 3 + [np.full((1, 2), 255, np.uint8)])
    cv2.imwrite(str(tmp_path / "opaque.png"), opaque)
    assert read_mask_array(tmp_path / "opaque.png").tolist() == [[0, 255]]  # colour, not alpha


@pytest.mark.parametrize(
    ("encoding", "raw", "expected"),
    [
        (MaskEncoding.binary01, [[0, 1, 1]], [[0, 1, 1]]),
        (MaskEncoding.binary255, [[0, 255, 0]], [[0, 1, 0]]),
        (MaskEncoding.labels, [[0, 5, 59]], [[0, 1, 1]]),
        (MaskEncoding.instances, [[0, 1, 2]], [[0, 1, 1]]),
        (MaskEncoding.alpha, [[0, 127, 128]], [[0, 0, 1]]),
    ],
)
def test_encodings(encoding: MaskEncoding, raw: list, expected: list) -> None:
    out = encode_mask(np.array(raw, np.uint8), encoding, P, alpha_threshold=128)
    assert out.dtype == np.uint8 and out.tolist() == expected


def test_ignore_value_becomes_255_and_is_not_a_label() -> None:
    raw = np.array([[0, 1, 255]], np.uint8)
    assert encode_mask(raw, MaskEncoding.binary01, P, ignore_value=255).tolist() == [[0, 1, 255]]
    raw16 = np.array([[0, 3, 1000]], np.uint16)
    out = encode_mask(raw16, MaskEncoding.instances, P, ignore_value=1000)
    assert out.tolist() == [[0, 1, 255]]


def test_unexpected_values_are_reported_with_the_file() -> None:
    with pytest.raises(BadSampleError, match=r"m.png.*unexpected mask values \[7\].*binary01"):
        encode_mask(np.array([[0, 1, 7]], np.uint8), MaskEncoding.binary01, P)
    with pytest.raises(BadSampleError, match=r"unexpected mask values \[1\].*binary255"):
        encode_mask(np.array([[0, 1, 255]], np.uint8), MaskEncoding.binary255, P)


def test_smaller_mask_with_same_aspect_is_resized_nearest() -> None:
    mask = np.array([[0, 1], [1, 0]], np.uint8)
    out = fit_mask_to_image(mask, (4, 4), P, 0.01)
    assert out.tolist() == [[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0]]


def test_non_integer_scale_with_same_aspect_is_resized() -> None:
    assert fit_mask_to_image(np.zeros((2, 2), np.uint8), (3, 3), P, 0.01).shape == (3, 3)


@pytest.mark.parametrize("image_hw", [(4, 6), (1, 1)])  # aspect off by 50%; mask larger
def test_mismatched_mask_size_is_an_error(image_hw: tuple[int, int]) -> None:
    with pytest.raises(BadSampleError, match=r"mask size 2x2 does not match image size"):
        fit_mask_to_image(np.zeros((2, 2), np.uint8), image_hw, P, 0.01)


def test_a_checkpoint_or_image_interrupted_mid_write_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writers themselves (not only ``atomic_path``): a write that dies after some bytes
    leaves the previous file byte for byte and no temporary file."""
    import torch

    from seg.checkpoint import CheckpointError, save_checkpoint
    from seg.inference.media import write_image

    ckpt = tmp_path / "last.pt"
    save_checkpoint({"step": 1}, ckpt)
    mask = tmp_path / "x_mask.png"
    write_image(mask, np.zeros((8, 8), np.uint8))
    before = {p.name: p.read_bytes() for p in (ckpt, mask)}

    def dies_mid_write(obj, f, *args, **kwargs):  # as torch.save into a file on a full disk
        f.write(b"PK\x03\x04 half a zip")
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as mp:
        mp.setattr(torch, "save", dies_mid_write)
        with pytest.raises(CheckpointError, match=r"last\.pt: the disk is full .*last good"):
            save_checkpoint({"step": 2}, ckpt)

    # torch's own writer on a full disk: its write fails after some bytes and torch reports
    # a RuntimeError ("unexpected pos") that does not say why; the message still does.
    import builtins

    import seg.checkpoint

    class FullDisk:
        def __init__(self, f):
            self.f, self.left = f, 2000

        def write(self, data):
            if len(data) > self.left:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.left -= len(data)
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def full_open(path, mode="r", *args, **kwargs):
        return FullDisk(builtins.open(path, mode, *args, **kwargs))

    with monkeypatch.context() as mp:
        mp.setattr(seg.checkpoint, "open", full_open, raising=False)
        with pytest.raises(CheckpointError, match=r"last\.pt: the disk is full"):
            save_checkpoint({"model": {"w": torch.randn(10000)}, "step": 2}, ckpt)
    real_write_bytes = Path.write_bytes

    def half(self, data):
        real_write_bytes(self, data[: len(data) // 2])
        raise OSError("No space left on device")

    monkeypatch.setattr(Path, "write_bytes", half)
    with pytest.raises(OSError, match="No space left"):
        write_image(mask, np.full((8, 8), 255, np.uint8))
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_checkpoint_beyond_the_file_size_limit_is_a_clear_error_and_keeps_the_old_one(
    tmp_path: Path,
) -> None:
    """``ulimit -f`` below a checkpoint's size: the kernel refuses the write (EFBIG; Python
    ignores SIGXFSZ) and torch says only "unexpected pos"; the message names the limit, and the
    last good checkpoint stays, with no temporary file beside it."""
    resource = pytest.importorskip("resource")  # POSIX
    import torch

    from seg.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

    ckpt = tmp_path / "last.pt"
    save_checkpoint({"step": 1, "model": {"w": torch.zeros(10)}, "config": {}}, ckpt)
    before = ckpt.read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    limit = 100_000  # the new checkpoint holds 400 kB of weights
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        with pytest.raises(CheckpointError) as raised:
            save_checkpoint({"step": 2, "model": {"w": torch.randn(100_000)}}, ckpt)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    message = str(raised.value)
    assert f"{ckpt}: the file outgrew the largest file allowed" in message
    assert f"limit of {limit:,} bytes (ulimit -f)" in message
    assert "last good checkpoint is kept" in message and "unexpected pos" not in message
    assert ckpt.read_bytes() == before
    assert load_checkpoint(ckpt)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]
