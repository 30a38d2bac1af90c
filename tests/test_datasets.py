"""datasets/: the synthetic set, folder listing, the pil/roi/gpu pipelines, reproducible windows,
worker-side timings, and corrupt or unexpected files."""

import io
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, JpegImagePlugin
from torch.utils.data import DataLoader

REPO = Path(__file__).resolve().parents[1]
# datasets/ is used from the checkout, not installed: make the repository root importable under plain
# `pytest` too (only `python -m pytest` puts the working directory on sys.path).
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import custom_op  # noqa: E402
import datasets  # noqa: E402
from datasets import (  # noqa: E402
    CorruptImageError,
    GpuBackendUnavailableError,
    JpegCropDataset,
    collate_encoded,
    list_jpegs,
    make_synthetic_set,
    photo_like,
    random_window,
    sample_rng,
)
from datasets.synthetic import encode_jpeg, image_path, prepared_copy, synthetic_set_dir  # noqa: E402
from datasets.transforms import mask_box  # noqa: E402
from datasets.windows import TRANSFORM_STREAM, WINDOW_STREAM  # noqa: E402
from test_resized_crop import PILLOW_ORDER  # noqa: E402

H, W = 120, 160  # small images keep the tests fast; crops below are smaller than the images
CROP, OUT = 64, 48


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    return make_synthetic_set(
        12, H, W, seed=1, num_classes=3, cache_dir=tmp_path_factory.mktemp("cache"), show_progress=False
    )


def make_ds(root, pipeline, **kw):
    kw.setdefault("crop_size", CROP)
    kw.setdefault("output_size", OUT)
    return JpegCropDataset(root, pipeline, **kw)


def write_folder(root: Path, n: int = 4, size=(H, W)) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        p = root / f"img_{i}.jpg"
        p.write_bytes(encode_jpeg(photo_like(*size, seed=i)))
        paths.append(p)
    return paths


# ----------------------------------------------------------------------------- synthetic set


def test_photo_like_is_deterministic_and_seed_dependent():
    a = photo_like(H, W, seed=3)
    assert a.shape == (H, W, 3) and a.dtype == np.uint8
    assert np.array_equal(a, photo_like(H, W, seed=3))
    assert not np.array_equal(a, photo_like(H, W, seed=4))


@pytest.mark.parametrize("size", [(1, 1), (2, 5), (193, 7), (200, 3)])
def test_photo_like_odd_sizes(size):
    assert photo_like(*size, seed=0).shape == (*size, 3)


def test_photo_like_compresses_like_a_photo_not_like_noise():
    # A photo at quality 90 takes roughly 1-5 bits per pixel; uniform noise takes well over 10.
    pixels = photo_like(533, 800, seed=0)
    bpp = len(encode_jpeg(pixels)) * 8 / (533 * 800)
    assert 1.0 < bpp < 5.0
    noise = np.random.default_rng(0).integers(0, 256, size=(533, 800, 3), dtype=np.uint8)
    assert len(encode_jpeg(noise)) * 8 / (533 * 800) > 3 * bpp
    # smooth regions exist: many 8x8 luma blocks are nearly flat
    luma = pixels.astype(np.float32).mean(axis=2)[:528, :800].reshape(66, 8, 100, 8).std(axis=(1, 3))
    assert (luma < 4).mean() > 0.1


def test_photo_like_rejects_bad_size():
    with pytest.raises(ValueError, match="positive"):
        photo_like(0, 10, seed=0)


def test_synthetic_set_layout_labels_and_format(synth):
    files = list_jpegs(synth)
    assert files.layout == "imagefolder"
    assert files.classes == ["class_000", "class_001", "class_002"]
    assert len(files.paths) == 12
    for path, label in zip(files.paths, files.labels):
        assert Path(path).parent.name == f"class_{label:03d}"
    with Image.open(files.paths[0]) as im:
        assert im.format == "JPEG" and im.size == (W, H) and im.mode == "RGB"
        assert JpegImagePlugin.get_sampling(im) == 2  # 4:2:0
        assert not im.info.get("progressive")
    # image i is photo_like(seed derived from (seed, i)) in class i % num_classes
    assert Path(image_path(synth, 4, 3)).is_file() and Path(image_path(synth, 4, 3)).parent.name == "class_001"


def test_synthetic_set_is_written_once_and_reused(synth):
    cache = synth.parent
    mtimes = {p: os.stat(p).st_mtime_ns for p in list_jpegs(synth).paths}
    again = make_synthetic_set(12, H, W, seed=1, num_classes=3, cache_dir=cache, show_progress=False)
    assert again == synth
    assert {p: os.stat(p).st_mtime_ns for p in list_jpegs(synth).paths} == mtimes
    assert synthetic_set_dir(12, H, W, seed=1, num_classes=3, cache_dir=cache) == synth
    # other parameters, other folder
    assert synthetic_set_dir(12, H, W, seed=2, num_classes=3, cache_dir=cache) != synth


def test_synthetic_set_completes_an_interrupted_one(tmp_path):
    root = make_synthetic_set(3, 32, 48, cache_dir=tmp_path, show_progress=False)
    (root / ".complete.json").unlink()
    victim = image_path(root, 1, 10)
    victim.unlink()
    keep = image_path(root, 0, 10)
    before = os.stat(keep).st_mtime_ns
    make_synthetic_set(3, 32, 48, cache_dir=tmp_path, show_progress=False)
    assert victim.is_file() and os.stat(keep).st_mtime_ns == before
    assert not [p for p in root.rglob(".tmp-*")]


def test_prepared_copy_is_random_access_with_the_same_pixels_and_made_once(tmp_path):
    root = make_synthetic_set(4, 96, 128, num_classes=2, cache_dir=tmp_path, show_progress=False)
    prepared = prepared_copy(root, show_progress=False)
    assert prepared == root.with_name(root.name + "-prepared")
    originals, copies = list_jpegs(root), list_jpegs(prepared)
    assert [Path(p).relative_to(root) for p in originals.paths] == [Path(p).relative_to(prepared) for p in copies.paths]
    assert copies.labels == originals.labels
    for src, dst in zip(originals.paths, copies.paths):
        data = Path(dst).read_bytes()
        assert custom_op.read_jpeg_header(data).random_access, dst
        assert torch.equal(custom_op.decode_jpeg(data), custom_op.decode_jpeg(Path(src).read_bytes())), dst
    mtimes = {p: os.stat(p).st_mtime_ns for p in copies.paths}
    assert prepared_copy(root, show_progress=False) == prepared
    assert {p: os.stat(p).st_mtime_ns for p in copies.paths} == mtimes
    # An interrupted copy (the set's own marker copied, a file missing) is completed, the rest kept.
    (prepared / ".prepared.json").unlink()
    assert (prepared / ".complete.json").is_file()
    victim, keep = Path(copies.paths[1]), Path(copies.paths[0])
    victim.unlink()
    assert prepared_copy(root, show_progress=False) == prepared
    assert victim.is_file() and custom_op.read_jpeg_header(victim.read_bytes()).random_access
    assert os.stat(keep).st_mtime_ns == mtimes[copies.paths[0]]


def test_prepared_copy_refuses_a_file_it_cannot_prepare(tmp_path):
    root = tmp_path / "set"
    write_folder(root, n=2)
    (root / "img_1.jpg").write_bytes(b"\xff\xd8 not a JPEG")
    with pytest.raises(RuntimeError, match="img_1.jpg"):
        prepared_copy(root, show_progress=False)
    assert not (tmp_path / "set-prepared" / ".prepared.json").exists()


def test_synthetic_set_shows_its_progress_with_tqdm(tmp_path, capsys, monkeypatch):
    import datasets.synthetic as synthetic

    bars = []
    real_tqdm = synthetic.tqdm

    def recording_tqdm(*args, **kwargs):
        bars.append(kwargs)
        return real_tqdm(*args, **kwargs)

    monkeypatch.setattr(synthetic, "tqdm", recording_tqdm)
    make_synthetic_set(2, 16, 16, cache_dir=tmp_path)
    err = capsys.readouterr().err
    assert "2/2" in err and "generating 2 synthetic 16x16 JPEGs" in err
    assert len(bars) == 1 and not bars[0]["disable"]
    make_synthetic_set(2, 16, 24, cache_dir=tmp_path, show_progress=False)
    assert bars[1]["disable"] and "16x24" not in capsys.readouterr().err


def test_tqdm_is_a_dependency_of_the_extras_that_show_progress():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in ("profiling", "test"):
        assert "tqdm" in extras[extra], extra
    # the SageMaker job generates the synthetic set too
    requirements = (REPO / "sm_job" / "requirements.txt").read_text().split()
    assert "tqdm" in requirements


def test_default_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("CUSTOM_OP_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert datasets.default_cache_dir() == tmp_path / "custom_op" / "datasets"
    monkeypatch.delenv("CUSTOM_OP_CACHE_DIR")
    assert datasets.default_cache_dir() == tmp_path / "xdg" / "custom_op" / "datasets"


# ----------------------------------------------------------------------------- folder listing


def test_flat_folder(tmp_path):
    write_folder(tmp_path, 3)
    (tmp_path / "b.JPEG").write_bytes((tmp_path / "img_0.jpg").read_bytes())
    files = list_jpegs(tmp_path)
    assert files.layout == "flat" and files.labels == [0, 0, 0, 0] and len(files.paths) == 4


def test_missing_and_empty_folder_errors_name_the_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        JpegCropDataset(tmp_path / "nope", "pil")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=f"no JPEG files .*{empty}"):
        JpegCropDataset(empty, "pil")
    (empty / "class_a").mkdir()
    with pytest.raises(ValueError, match="no JPEG files .*class sub-folders"):
        JpegCropDataset(empty, "pil")


def test_non_jpeg_files_are_not_read_and_are_named(tmp_path):
    only_png = tmp_path / "png"
    only_png.mkdir()
    Image.fromarray(photo_like(16, 16, 0)).save(only_png / "a.png")
    with pytest.raises(ValueError, match=r"no JPEG files .*found in .*names do not end in \.jpg/\.jpeg .*'a\.png'"):
        JpegCropDataset(only_png, "pil")

    mixed = tmp_path / "mixed"
    write_folder(mixed, 2)
    (mixed / "notes.txt").write_text("hello")
    with pytest.warns(UserWarning, match=r"1 file\(s\) .* not read.*notes\.txt"):
        ds = JpegCropDataset(mixed, "pil")
    assert len(ds) == 2


def _not_read_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if "are not read" in str(w.message)]


def test_auto_layout_reads_the_photos_in_root_and_names_the_unread_sub_folder(tmp_path):
    # A folder of photos with one sub-folder is a flat data set, not one class of one sub-folder.
    write_folder(tmp_path, 5)
    write_folder(tmp_path / "rejects", 1)
    with pytest.warns(UserWarning) as caught:
        files = list_jpegs(tmp_path)
    assert files.layout == "flat" and len(files.paths) == 5 and files.classes == ["."]
    assert all(Path(p).parent == tmp_path for p in files.paths)
    (message,) = _not_read_warnings(caught)
    assert "1 sub-folder(s)" in message and "'rejects/'" in message and "layout 'imagefolder'" in message
    # and "flat" asked for explicitly reads the same files, without a warning about sub-folders
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list_jpegs(tmp_path, layout="flat").paths == files.paths


def test_auto_layout_is_imagefolder_when_only_sub_folders_hold_jpegs(tmp_path):
    write_folder(tmp_path / "cats", 2)
    write_folder(tmp_path / "dogs", 3)
    (tmp_path / "README.txt").write_text("about")
    with pytest.warns(UserWarning, match=r"1 file\(s\) .* are not read .*'README\.txt'"):
        files = list_jpegs(tmp_path)
    assert files.layout == "imagefolder" and files.classes == ["cats", "dogs"] and files.labels == [0, 0, 1, 1, 1]


def test_imagefolder_warning_says_why_root_jpegs_are_not_read_once(tmp_path):
    write_folder(tmp_path / "cats", 2)
    for name in ("stray.JPEG", "other.jpg"):
        (tmp_path / name).write_bytes((tmp_path / "cats" / "img_0.jpg").read_bytes())
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.warns(UserWarning) as caught:
        ds = JpegCropDataset(tmp_path, "pil", layout="imagefolder")
    assert len(ds) == 2
    (message,) = _not_read_warnings(caught)
    assert message.startswith(f"3 file(s) in {str(tmp_path)!r} are not read (layout 'imagefolder')")
    jpegs, names = message.split("; ")
    # the JPEGs are not blamed on their extension, only on where they are
    assert "2 JPEG(s) directly in the folder" in jpegs and "'other.jpg'" in jpegs and "'stray.JPEG'" in jpegs
    assert "do not end in .jpg/.jpeg" in names and "'notes.txt'" in names and "JPEG'" not in names


def test_dataset_takes_an_existing_listing_without_listing_again(tmp_path, monkeypatch):
    write_folder(tmp_path, 3)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.warns(UserWarning, match="are not read"):
        files = list_jpegs(tmp_path)
    import datasets.jpeg_dataset as jd

    monkeypatch.setattr(jd, "list_jpegs", lambda *a, **k: pytest.fail("listed the folder again"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = JpegCropDataset(tmp_path, "pil", files=files)
    assert ds.paths == files.paths and ds.layout == "flat"


def test_unknown_pipeline_and_options(synth):
    with pytest.raises(ValueError, match="unknown pipeline 'cv2'; choose one of pil, roi, gpu"):
        JpegCropDataset(synth, "cv2")
    with pytest.raises(ValueError, match="on_error must be 'raise' or 'skip'"):
        JpegCropDataset(synth, "pil", on_error="ignore")
    with pytest.raises(ValueError, match="layout"):
        JpegCropDataset(synth, "pil", layout="tree")


@pytest.mark.parametrize("pipeline,cpu", [("gpu", "roi"), ("gpu-rrc", "rrc")])
def test_gpu_pipeline_says_the_backend_is_missing(synth, pipeline, cpu):
    import custom_op

    if callable(getattr(custom_op, "cuda_available", None)) and custom_op.cuda_available():
        pytest.skip("this build has the GPU backend")
    with pytest.raises(
        GpuBackendUnavailableError,
        match=rf"'{pipeline}' needs the GPU backend of custom_op, which is not available here: .+; use '{cpu}'",
    ):
        JpegCropDataset(synth, pipeline)


# ----------------------------------------------------------------------------- samples


@pytest.mark.parametrize("pipeline", ["pil", "roi"])
def test_sample_shapes_dtypes_and_timings(synth, pipeline):
    ds = make_ds(synth, pipeline)
    assert len(ds) == 12
    img, label, info = ds[5]
    assert img.shape == (3, OUT, OUT) and img.dtype == torch.uint8 and img.is_contiguous()
    assert label == ds.labels[5] and Path(ds.paths[5]).parent.name == f"class_{label:03d}"
    assert set(info) == {"read", "decode", "transform", "index", "skipped"}
    assert all(isinstance(info[k], float) and info[k] >= 0 for k in ("read", "decode", "transform"))
    assert info["index"] == 5 and info["skipped"] == ""
    raw, _, _ = make_ds(synth, pipeline, transforms=False)[5]
    assert raw.shape == (3, CROP, CROP) and raw.dtype == torch.uint8
    assert ds[-1][1] == ds.labels[11]
    with pytest.raises(IndexError):
        ds[12]


def test_small_image_gives_window_of_image_size(tmp_path):
    write_folder(tmp_path, 1, size=(40, 300))
    for pipeline in ("pil", "roi"):
        raw, _, _ = make_ds(tmp_path, pipeline, transforms=False)[0]
        assert raw.shape == (3, 40, CROP)
        assert make_ds(tmp_path, pipeline)[0][0].shape == (3, OUT, OUT)


def test_same_seed_same_windows_and_pixels_in_pil_and_roi(synth):
    pil = make_ds(synth, "pil", seed=7, transforms=False)
    roi = make_ds(synth, "roi", seed=7, transforms=False)
    windows = [pil.window(i) for i in range(len(pil))]
    assert windows == [roi.window(i) for i in range(len(roi))]
    assert len(set(windows)) > 1  # windows are actually random
    for i in range(len(pil)):
        a, b = pil[i][0], roi[i][0]
        top, left, h, w = windows[i]
        assert torch.equal(a, b), f"sample {i}: pil and roi windows differ"
        # and they are the pixels of that window of the whole decoded image
        full = np.asarray(Image.open(pil.paths[i]).convert("RGB"))
        assert np.array_equal(a.permute(1, 2, 0).numpy(), full[top : top + h, left : left + w])
    # the further transforms draw the same random values in both pipelines too
    pil_t, roi_t = make_ds(synth, "pil", seed=7), make_ds(synth, "roi", seed=7)
    assert all(torch.equal(pil_t[i][0], roi_t[i][0]) for i in range(len(pil_t)))


def test_windows_depend_on_seed_and_epoch_only(synth):
    a = [make_ds(synth, "roi", seed=1).window(i) for i in range(12)]
    assert a == [make_ds(synth, "roi", seed=1).window(i) for i in range(12)]
    assert a != [make_ds(synth, "roi", seed=2).window(i) for i in range(12)]
    assert a != [make_ds(synth, "roi", seed=1, epoch=1).window(i) for i in range(12)]


def test_random_window_bounds():
    rng = np.random.default_rng(0)
    for _ in range(200):
        h, w = (int(v) for v in rng.integers(1, 50, size=2))
        win = random_window(h, w, 16, 24, rng)
        assert 0 <= win.top and win.top + win.height <= h and 0 <= win.left and win.left + win.width <= w
        assert (win.height, win.width) == (min(16, h), min(24, w))
    with pytest.raises(ValueError):
        sample_rng(-1, 0, 0, WINDOW_STREAM)


@pytest.mark.parametrize("pipeline", ["pil", "roi"])
def test_dataloader_with_workers_matches_in_process_samples(synth, pipeline):
    ds = make_ds(synth, pipeline, seed=3)
    loader = DataLoader(ds, batch_size=4, num_workers=2, shuffle=False)
    batches = list(loader)
    assert len(batches) == 3
    images, labels, info = batches[1]
    assert images.shape == (4, 3, OUT, OUT) and images.dtype == torch.uint8
    assert labels.tolist() == [ds.labels[i] for i in range(4, 8)]
    assert info["decode"].shape == (4,) and info["decode"].dtype == torch.float64
    assert (info["decode"] > 0).all() and info["index"].tolist() == [4, 5, 6, 7]
    assert info["skipped"] == ["", "", "", ""]
    # worker assignment does not change the samples
    expected = torch.stack([ds[i][0] for i in range(4, 8)])
    assert torch.equal(images, expected)


def test_photos_pil_and_roi_agree(photos, tmp_path):
    # The photos (real or generated, conftest's `photos`) in a flat folder of links.
    paths = photos[:40]
    for k, path in enumerate(paths):
        (tmp_path / f"{k:02d}-{path.name}").symlink_to(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pil = JpegCropDataset(tmp_path, "pil", seed=5, transforms=False)
        roi = JpegCropDataset(tmp_path, "roi", seed=5, transforms=False)
    assert pil.layout == "flat" and len(pil) == len(paths)
    for i in range(len(paths)):
        assert pil.window(i) == roi.window(i)
        assert torch.equal(pil[i][0], roi[i][0]), pil.paths[i]


@pytest.mark.filterwarnings("ignore:.*are not read")  # the folder's license text
def test_odd_jpegs_agree_or_fail_alike_in_pil_and_roi(odd_jpegs):
    # CMYK, grayscale, EXIF-rotated, ICC after SOF, a truncated progressive file: per file, both
    # pipelines give the same window and pixels, or both report it as corrupt with its path.
    kw = dict(seed=2, crop_size=CROP, transforms=False)
    pil = JpegCropDataset(odd_jpegs, "pil", **kw)
    roi = JpegCropDataset(odd_jpegs, "roi", **kw)
    outcomes = {}
    for i, path in enumerate(pil.paths):
        try:
            a = pil[i][0]
        except CorruptImageError as e:
            assert path in str(e)
            with pytest.raises(CorruptImageError, match=path):
                roi[i]
            outcomes[Path(path).name] = "corrupt"
            continue
        assert pil.window(i) == roi.window(i), path
        assert torch.equal(a, roi[i][0]), path
        outcomes[Path(path).name] = "equal"
    assert outcomes.get("truncated_jpeg.jpg") == "corrupt"
    assert outcomes.get("pil_sample_cmyk.jpg") == "equal" and outcomes.get("hopper_gray.jpg") == "equal"


# ----------------------------------------------------------------------------- corrupt files


@pytest.fixture()
def corrupt_folder(tmp_path):
    """img_0..img_3 valid; img_1 truncated, img_2 is a PNG under a .jpg name."""
    paths = write_folder(tmp_path, 4)
    data = paths[1].read_bytes()
    paths[1].write_bytes(data[: len(data) // 3])
    buf = io.BytesIO()
    Image.fromarray(photo_like(H, W, 9)).save(buf, format="PNG")
    paths[2].write_bytes(buf.getvalue())
    return tmp_path, paths


@pytest.mark.parametrize("pipeline", ["pil", "roi"])
def test_corrupt_file_raises_with_its_path(corrupt_folder, pipeline):
    root, paths = corrupt_folder
    ds = make_ds(root, pipeline)
    ds[0]
    for bad in (1, 2):
        with pytest.raises(CorruptImageError, match=str(paths[bad])):
            ds[bad]


@pytest.mark.parametrize("pipeline", ["pil", "roi"])
def test_corrupt_file_raises_with_its_path_from_a_worker(corrupt_folder, pipeline):
    root, paths = corrupt_folder
    loader = DataLoader(make_ds(root, pipeline), batch_size=2, num_workers=1)
    with pytest.raises(CorruptImageError, match=str(paths[1])):
        list(loader)


@pytest.mark.parametrize("pipeline", ["pil", "roi"])
def test_corrupt_file_skipped_and_reported(corrupt_folder, pipeline):
    root, paths = corrupt_folder
    ds = make_ds(root, pipeline, on_error="skip")
    with pytest.warns(UserWarning) as caught:
        img, label, info = ds[1]
    messages = [str(w.message) for w in caught]
    assert messages[0].startswith(f"skipping corrupt file {paths[1]}: cannot {pipeline}-decode it")
    assert messages[1].startswith(f"skipping corrupt file {paths[2]}")
    # replaced by the next loadable file: 2 is corrupt too, so 3
    assert info["index"] == 3 and info["skipped"].split("\n") == [str(paths[1]), str(paths[2])]
    assert torch.equal(img, ds[3][0])
    assert ds.skipped[:2] == [str(paths[1]), str(paths[2])]


def test_corrupt_file_skipped_inside_workers(corrupt_folder, recwarn):
    root, paths = corrupt_folder
    loader = DataLoader(make_ds(root, "roi", on_error="skip"), batch_size=4, num_workers=2)
    ((images, labels, info),) = list(loader)
    assert images.shape == (4, 3, OUT, OUT)
    assert info["index"].tolist() == [0, 3, 3, 3]
    reported = {p for s in info["skipped"] for p in s.split("\n") if p}
    assert reported == {str(paths[1]), str(paths[2])}


def test_all_files_corrupt_with_skip_is_an_error(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"not a jpeg")
    (tmp_path / "b.jpg").write_bytes(b"")
    ds = JpegCropDataset(tmp_path, "roi", on_error="skip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(CorruptImageError, match="every one of the 2 files failed"):
            ds[0]


# ----------------------------------------------------------------------------- gpu batch path


def test_collate_encoded_keeps_variable_length_bytes():
    items = [
        (
            torch.arange(n, dtype=torch.uint8),
            torch.tensor([0, 0, 4, 4]),
            torch.tensor([1, 1, 2, n]),
            1,
            {"read": 0.1, "decode": 0.0, "transform": 0.0, "index": n, "skipped": ""},
        )
        for n in (5, 9)
    ]
    data, windows, masks, labels, info = collate_encoded(items)
    assert isinstance(data, custom_op.PackedFiles) and data.sizes.tolist() == [5, 9]
    assert [d.tolist() for d in data.unpack()] == [list(range(5)), list(range(9))]
    assert windows.shape == (2, 4) and labels.tolist() == [1, 1] and info["index"].tolist() == [5, 9]
    assert masks.tolist() == [[1, 1, 2, 5], [1, 1, 2, 9]]


def test_gpu_batch_path_matches_roi_when_decoded_on_the_cpu(synth, monkeypatch):
    # Runs without a GPU: the worker side (bytes + window) and the main-process hook (decode_batch)
    # with device="cpu", which must give exactly the roi samples.
    import datasets.jpeg_dataset as jd

    monkeypatch.setattr(jd, "gpu_backend_available", lambda: True)
    gpu = make_ds(synth, "gpu", seed=4)
    roi = make_ds(synth, "roi", seed=4)
    encoded, window, mask, label, info = gpu[3]
    assert encoded.dtype == torch.uint8 and encoded.dim() == 1
    assert tuple(window.tolist()) == tuple(roi.window(3)) and label == roi.labels[3]
    assert tuple(mask.tolist()) == mask_box(window[2], window[3], sample_rng(4, 0, 3, TRANSFORM_STREAM))
    loader = DataLoader(gpu, batch_size=4, num_workers=1, collate_fn=collate_encoded)
    for b, (data, windows, masks, labels, _info) in enumerate(loader):
        assert masks.shape == (4, 4) and masks.dtype == torch.int64
        images = datasets.decode_batch(data, windows, masks, device="cpu", output_size=OUT)
        expected = torch.stack([roi[i][0] for i in range(4 * b, 4 * b + 4)])
        assert torch.equal(images, expected)
        assert labels.tolist() == roi.labels[4 * b : 4 * b + 4]


def test_gpu_rrc_batch_path_matches_rrc_when_decoded_on_the_cpu(synth, monkeypatch):
    # Without a GPU: the workers' side (bytes, rrc's window, the mask on the output) and the training
    # process's decode_resized_batch with device="cpu" give exactly the rrc samples.
    import datasets.jpeg_dataset as jd

    monkeypatch.setattr(jd, "gpu_backend_available", lambda: True)
    gpu = make_ds(synth, "gpu-rrc", seed=5)
    rrc = make_ds(synth, "rrc", seed=5)
    encoded, window, mask, label, _info = gpu[2]
    assert encoded.dtype == torch.uint8 and encoded.dim() == 1
    assert tuple(window.tolist()) == tuple(rrc.window(2)) == tuple(gpu.window(2)) and label == rrc.labels[2]
    assert tuple(mask.tolist()) == mask_box(OUT, OUT, sample_rng(5, 0, 2, TRANSFORM_STREAM))
    loader = DataLoader(gpu, batch_size=4, num_workers=1, collate_fn=collate_encoded)
    for b, (data, windows, masks, labels, _info) in enumerate(loader):
        images = datasets.decode_resized_batch(data, windows, masks, device="cpu", output_size=OUT)
        expected = torch.stack([rrc[i][0] for i in range(4 * b, 4 * b + 4)])
        assert torch.equal(images, expected)
        assert labels.tolist() == rrc.labels[4 * b : 4 * b + 4]


def _gpu_skip_reason():
    if not torch.cuda.is_available():
        return "no CUDA device"
    return datasets.jpeg_dataset.gpu_backend_unavailable_reason()


@pytest.mark.skipif(_gpu_skip_reason() is not None, reason=str(_gpu_skip_reason()))
def test_gpu_pipeline_on_cuda_equals_roi(synth):
    # The GPU decode is the CPU path's, and the resize on the GPU is the CPU's resampler.
    gpu = make_ds(synth, "gpu", seed=6)
    roi = make_ds(synth, "roi", seed=6)
    loader = DataLoader(gpu, batch_size=4, num_workers=1, collate_fn=collate_encoded)
    for b, (data, windows, masks, _labels, _info) in enumerate(loader):
        images = datasets.decode_batch(data, windows, masks, device="cuda", output_size=OUT)
        assert images.device.type == "cuda" and images.dtype == torch.uint8 and images.shape == (4, 3, OUT, OUT)
        expected = torch.stack([roi[i][0] for i in range(4 * b, 4 * b + 4)])
        assert torch.equal(images.cpu(), expected)


@pytest.mark.skipif(_gpu_skip_reason() is not None, reason=str(_gpu_skip_reason()))
def test_gpu_rrc_pipeline_on_cuda_equals_rrc(synth):
    # On files prepared for random access, which our CUDA decoder decodes at rrc's DCT scale (other files
    # go to the JPEG engines at full scale).
    from datasets.synthetic import prepared_copy

    prepared = prepared_copy(synth, show_progress=False)
    gpu = make_ds(prepared, "gpu-rrc", seed=7)
    rrc = make_ds(prepared, "rrc", seed=7)
    loader = DataLoader(gpu, batch_size=4, num_workers=1, collate_fn=collate_encoded)
    for b, (data, windows, masks, _labels, _info) in enumerate(loader):
        images = datasets.decode_resized_batch(data, windows, masks, device="cuda", output_size=OUT)
        assert images.device.type == "cuda" and images.shape == (4, 3, OUT, OUT)
        expected = torch.stack([rrc[i][0] for i in range(4 * b, 4 * b + 4)])
        assert torch.equal(images.cpu(), expected)


# ----------------------------------------------------------------------------- RandomResizedCrop pipelines
def test_rrc_pipelines_same_windows_and_pixels_where_decoded_at_full_scale(synth):
    from custom_op.resized_crop import choose_scale

    pil = make_ds(synth, "pil-rrc", seed=3, transforms=False)
    rrc = make_ds(synth, "rrc", seed=3, transforms=False)
    windows = [pil.window(i) for i in range(len(pil))]
    assert windows == [rrc.window(i) for i in range(len(rrc))]
    assert len({(w.height, w.width) for w in windows}) > 1  # random areas and aspects
    full_scale = 0
    for i, (_top, _left, h, w) in enumerate(windows):
        a, b = pil[i][0], rrc[i][0]
        assert a.shape == b.shape == (3, OUT, OUT) and b.dtype == torch.uint8
        if choose_scale(h, w, OUT) == 8 and PILLOW_ORDER:
            # (Pillow before 13 orders its resampling passes otherwise: a few values differ by one.)
            full_scale += 1
            assert torch.equal(a, b), f"sample {i}: pil-rrc and rrc differ at full scale"
        else:
            mse = (a.double() - b.double()).pow(2).mean().item()
            assert mse == 0 or 10 * np.log10(255**2 / mse) > 30, f"sample {i}: PSNR too low"
    assert full_scale > 0 or not PILLOW_ORDER
    # With the further transforms, the output size is unchanged and the transforms draw alike.
    assert make_ds(synth, "rrc", seed=3)[0][0].shape == (3, OUT, OUT)


def test_rrc_pipeline_in_a_dataloader_worker(synth):
    ds = make_ds(synth, "rrc", seed=3)
    loader = DataLoader(ds, batch_size=4, num_workers=1)
    images, labels, info = next(iter(loader))
    assert images.shape == (4, 3, OUT, OUT)
    assert torch.equal(images[0], ds[0][0])


# ----------------------------------------------------------------------------- further transforms, batched
@pytest.mark.parametrize(
    "device",
    ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))],
)
def test_further_transforms_batch_equals_each_image_alone(device):
    from datasets.transforms import further_transforms, further_transforms_batch

    gen = torch.Generator().manual_seed(0)
    shapes = [(64, 64), (40, 56), (64, 64), (224, 224), (40, 56), (64, 64), (100, 30)]
    images = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=gen).to(device) for h, w in shapes]
    kept = [img.clone() for img in images]

    def masks(imgs):  # each image's mask_box, drawn from the rng further_transforms gets
        boxes = [mask_box(img.shape[1], img.shape[2], sample_rng(3, 0, i, 7)) for i, img in enumerate(imgs)]
        return torch.tensor(boxes)

    got = further_transforms_batch(images, masks(images), OUT)
    want = torch.stack([further_transforms(img.clone(), sample_rng(3, 0, i, 7), OUT) for i, img in enumerate(images)])
    assert got.dtype == torch.uint8 and got.shape == (len(images), 3, OUT, OUT) and got.device == want.device
    assert torch.equal(got, want)
    assert all(torch.equal(a, b) for a, b in zip(images, kept))  # the inputs are not changed
    one_size = [img for img in images if img.shape[1:] == (64, 64)]
    got = further_transforms_batch(one_size, masks(one_size).pin_memory() if device == "cuda" else masks(one_size), OUT)
    want = torch.stack([further_transforms(img.clone(), sample_rng(3, 0, i, 7), OUT) for i, img in enumerate(one_size)])
    assert torch.equal(got, want)
    assert further_transforms_batch([], torch.empty(0, 4, dtype=torch.int64), OUT).shape == (0, 3, OUT, OUT)
    with pytest.raises(ValueError, match=r"masks must be a \[3, 4\] tensor"):
        further_transforms_batch(one_size, masks(images), OUT)
