import numpy as np
import pytest

from classify_images.pipeline.settings.dataset import DatasetError, discover_dataset, split_indices

from .conftest import FIXTURE_IMAGES


def test_fixture_layout_and_background_folder(tmp_path):
    ds = discover_dataset(FIXTURE_IMAGES)
    assert ds.class_names == ["china", "digit_0", "digit_1", "flower"]
    assert len(ds.paths) == 48 and np.bincount(ds.labels).tolist() == [12] * 4
    (tmp_path / "BACKGROUND_Google").mkdir()
    (tmp_path / "BACKGROUND_Google" / "clutter.jpg").write_bytes(b"1")
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "x.jpg").write_bytes(b"1")
    assert discover_dataset(tmp_path).class_names == ["a", "b"]
    assert "BACKGROUND_Google" in discover_dataset(tmp_path, keep_background=True).class_names


@pytest.mark.realdata
def test_caltech_layout_background_excluded_by_default(caltech_mini):
    ds = discover_dataset(caltech_mini)
    assert ds.class_names == ["Faces_easy", "accordion", "airplanes", "car_side"]
    assert len(ds.paths) == 80 and np.bincount(ds.labels).tolist() == [20] * 4
    kept = discover_dataset(caltech_mini, keep_background=True)
    assert "BACKGROUND_Google" in kept.class_names and len(kept.class_names) == 5


def test_extensions_case_insensitive_and_non_images_ignored(tmp_path):
    for cls in ("a", "b"):
        (tmp_path / cls).mkdir()
        (tmp_path / cls / "x.JPG").write_bytes(b"1")
        (tmp_path / cls / "y.Png").write_bytes(b"1")
        (tmp_path / cls / "notes.txt").write_text("no")
        (tmp_path / cls / ".hidden.jpg").write_bytes(b"1")
    ds = discover_dataset(tmp_path)
    assert ds.paths == ["a/x.JPG", "a/y.Png", "b/x.JPG", "b/y.Png"]


@pytest.mark.parametrize(
    "layout, message",
    [
        ({}, "no class folders"),
        ({"only": 2}, "single class"),
        ({"a": 2, "b": 0}, "no images"),
    ],
)
def test_bad_layouts_are_one_line_errors(tmp_path, layout, message):
    for cls, n in layout.items():
        (tmp_path / cls).mkdir()
        for i in range(n):
            (tmp_path / cls / f"{i}.jpg").write_bytes(b"1")
    with pytest.raises(DatasetError, match=message) as info:
        discover_dataset(tmp_path)
    assert "\n" not in str(info.value)


def test_missing_folder(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        discover_dataset(tmp_path / "nope")


def test_split_protocol_is_seeded_and_capped():
    labels = np.repeat(np.arange(3), [10, 20, 30])
    train, test = split_indices(labels, 5, 8, seed=1)
    assert np.bincount(labels[train]).tolist() == [5, 5, 5]
    assert np.bincount(labels[test]).tolist() == [5, 8, 8]
    assert not set(train) & set(test)
    again = split_indices(labels, 5, 8, seed=1)
    assert np.array_equal(train, again[0]) and np.array_equal(test, again[1])
    other = split_indices(labels, 5, 8, seed=2)
    assert not np.array_equal(train, other[0])
    _, rest = split_indices(labels, 5, None, seed=1)
    assert np.bincount(labels[rest]).tolist() == [5, 15, 25]


def test_split_class_too_small_names_the_fix():
    labels = np.repeat(np.arange(2), [4, 30])
    with pytest.raises(DatasetError, match="lower --train-per-class to at most 3"):
        split_indices(labels, 10)
