"""tests/photo_data.py: where the photo tests find real JPEGs (CUSTOM_OP_TEST_DATA: a folder like ../shared/data,
any folder of JPEGs, or none), and what the generated set that replaces them covers."""

from pathlib import Path

import pytest

import custom_op
import jpeg_markers as jm
import photo_data


@pytest.fixture
def data_env(monkeypatch):
    """Sets CUSTOM_OP_TEST_DATA for one test; photo_data's cached listing is recomputed before and after."""

    def set_to(value):
        monkeypatch.setenv(photo_data.ENV, str(value))
        photo_data.real_photos.cache_clear()

    yield set_to
    monkeypatch.undo()
    photo_data.real_photos.cache_clear()


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\xff\xd8")
    return path


def test_data_root_forms(monkeypatch, data_env, tmp_path):
    monkeypatch.delenv(photo_data.ENV, raising=False)
    assert photo_data.data_root() == photo_data.DEFAULT_ROOT
    for hidden in ("none", "None", "", " "):
        data_env(hidden)
        assert photo_data.data_root() is None
        assert photo_data.real_photos() == () and photo_data.real_odd_dir() is None
    data_env(tmp_path)
    assert photo_data.data_root() == tmp_path


def test_a_folder_like_shared_data(data_env, tmp_path):
    photos = [touch(tmp_path / "imagenet-sample" / name) for name in ("a.JPEG", "b.jpg", "c.jpeg")]
    touch(tmp_path / "imagenet-sample" / "notes.txt")
    touch(tmp_path / "odd-jpegs" / "hopper.jpg")
    data_env(tmp_path)
    assert photo_data.real_photos() == tuple(photos)
    assert photo_data.real_odd_dir() == tmp_path / "odd-jpegs"


def test_only_odd_jpegs_means_generated_photos(data_env, tmp_path):
    touch(tmp_path / "odd-jpegs" / "hopper.jpg")
    data_env(tmp_path)
    assert photo_data.real_photos() == ()
    assert photo_data.real_odd_dir() == tmp_path / "odd-jpegs"


def test_a_plain_folder_of_jpegs(data_env, tmp_path, monkeypatch):
    photos = [touch(tmp_path / name) for name in ("a/x.jpg", "b/c/y.JPEG", "b/z.Jpg", "top.jpeg")]
    touch(tmp_path / ".hidden" / "h.jpg")
    touch(tmp_path / "a" / ".h.jpg")
    touch(tmp_path / "readme.txt")
    data_env(tmp_path)
    assert photo_data.real_photos() == tuple(sorted(photos))
    assert photo_data.real_odd_dir() is None  # the odd files are generated
    monkeypatch.setattr(photo_data, "MAX_PHOTOS", 3)
    photo_data.real_photos.cache_clear()
    many = sorted(touch(tmp_path / "many" / f"{i:02d}.jpg") for i in range(10))
    chosen = photo_data.real_photos()
    assert len(chosen) == 3 and list(chosen) == sorted(chosen)
    assert chosen[0] == tuple(sorted(photos[:3] + many))[0]


def test_a_folder_inside_a_hidden_one(data_env, tmp_path):
    photo = touch(tmp_path / ".cache" / "photos" / "x.jpg")
    data_env(tmp_path / ".cache" / "photos")
    assert photo_data.real_photos() == (photo,)


def test_a_folder_without_jpegs(data_env, tmp_path):
    data_env(tmp_path / "missing")
    assert photo_data.real_photos() == () and photo_data.real_odd_dir() is None
    touch(tmp_path / "readme.txt")
    data_env(tmp_path)
    assert photo_data.real_photos() == ()


def test_the_generated_set_covers_what_the_real_photos_have_and_more(generated_photos):
    infos = {p.name: custom_op.read_jpeg_header(p.read_bytes()) for p in generated_photos}
    data = {p.name: p.read_bytes() for p in generated_photos}
    assert len(infos) == len(photo_data.RECIPES)
    assert {i.subsampling for i in infos.values()} >= {"4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "gray"}
    assert {i.color_space for i in infos.values()} == {"ycbcr", "gray", "cmyk", "ycck", "rgb"}
    assert {i.progressive for i in infos.values()} == {True, False}
    assert {i.random_access for i in infos.values()} == {True, False}
    assert {i.orientation for i in infos.values()} >= {1, 3, 5, 6, 8}
    intervals = {jm.find(d, jm.DRI) is not None for d in data.values()}
    assert intervals == {True, False}
    assert any(jm.find(d, jm.SOF_ARITHMETIC) is not None for d in data.values())
    sizes = [(i.height, i.width) for i in infos.values()]
    assert (1, 1) in sizes and any(min(s) >= 1500 for s in sizes)
    assert sum(300 <= min(s) and max(s) <= 700 for s in sizes) >= 20  # ImageNet-like
    assert any(h % 16 and w % 16 and max(h, w) > 16 for h, w in sizes)  # partial MCUs on both edges
    # Every stride the tests take over the set meets photo-sized files.
    small = [min(s) < 300 for s in sizes]
    for start, step in ((0, 2), (0, 3), (0, 4), (0, 5), (1, 8)):
        assert not all(small[start::step]), (start, step)


# The real odd-jpegs/ files' headers (../shared/data): the stand-ins have the same.
ODD_HEADERS = {
    "exif_gps.jpg": (8, 8, 3, "ycbcr", "4:2:0", False, 1),
    "flower.jpg": (360, 480, 3, "ycbcr", "4:2:0", False, 1),
    "hopper.jpg": (128, 128, 3, "ycbcr", "4:2:0", False, 1),
    "hopper_gray.jpg": (128, 128, 1, "gray", "gray", False, 1),
    "hopper_orientation_3.jpg": (128, 128, 3, "ycbcr", "4:2:0", False, 3),
    "hopper_orientation_6.jpg": (128, 128, 3, "ycbcr", "4:2:0", False, 6),
    "icc-after-SOF.jpg": (10, 10, 1, "gray", "gray", False, 1),
    "pil_sample_cmyk.jpg": (100, 100, 4, "ycck", "4:4:4", False, 1),
    "testimgint.jpg": (149, 227, 3, "ycbcr", "4:2:0", False, 1),
    "testorig.jpg": (149, 227, 3, "ycbcr", "4:2:0", False, 1),
    "truncated_jpeg.jpg": (100, 100, 3, "ycbcr", "4:2:0", True, 1),
}


def test_the_odd_stand_ins_have_the_real_files_properties(generated_odd_jpegs):
    assert sorted(p.name for p in generated_odd_jpegs.iterdir()) == sorted(ODD_HEADERS)
    real = photo_data.real_odd_dir()
    for name, expected in ODD_HEADERS.items():
        data = (generated_odd_jpegs / name).read_bytes()
        info = custom_op.read_jpeg_header(data)
        assert tuple(info)[:7] == expected, name
        if real is not None and (real / name).is_file():
            assert info == custom_op.read_jpeg_header((real / name).read_bytes()), name
    icc = (generated_odd_jpegs / "icc-after-SOF.jpg").read_bytes()
    markers = [s.marker for s in jm.segments(icc)]
    assert 0xE2 in markers[markers.index(jm.find(icc, jm.SOF).marker) :]
    with pytest.raises(RuntimeError, match="Premature end"):
        custom_op.decode_jpeg((generated_odd_jpegs / "truncated_jpeg.jpg").read_bytes())
