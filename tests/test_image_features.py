"""``ImageFeatures``: images -> vectors as a scikit-learn transformer, in pipelines, grid searches
and cross-validation, giving exactly the rows of a feature set built with the same codebook."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_val_score
from sklearn.pipeline import make_pipeline

from classify_images import MBKL, HIKnSVM, ImageFeatures, PmSVM, QuadraticHingeSVC
from classify_images.pipeline.interfaces.image_features import UnreadableImagesError
from classify_images.pipeline.settings.config import PipelineConfig, load_config
from classify_images.pipeline.settings.defaults import RECOMMENDED_CONFIG

from .conftest import FIXTURE_IMAGES, SMALL_CONFIG, write_config_toml

CONFIG = PipelineConfig.from_dict(SMALL_CONFIG)
PATHS = sorted(str(p) for p in FIXTURE_IMAGES.glob("*/*.jpg"))
LABELS = np.asarray([p.split("/")[-2] for p in PATHS])


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def test_vectors_equal_the_feature_set_rows(tmp_path, cache):
    """fit on a feature set's training images -> its codebook; transform -> its rows, bit for bit."""
    from classify_images.pipeline.extraction.build import build_feature_set
    from classify_images.pipeline.storage.feature_store import load_feature_set

    for method in ("l1", "minmax"):
        raw = {**SMALL_CONFIG, "normalization": {"method": method}}
        config = PipelineConfig.from_dict(raw)
        build_feature_set(FIXTURE_IMAGES, tmp_path / method, config, cache_dir=cache)
        fs = load_feature_set(tmp_path / method)
        root = fs.manifest["dataset"]["root"]
        train = [f"{root}/{p}" for p in fs.train_paths]
        test = [f"{root}/{p}" for p in fs.test_paths]
        features = ImageFeatures(config, cache_dir=cache).fit(train)
        np.testing.assert_array_equal(features.codebook_, fs.codebook())
        np.testing.assert_array_equal(features.transform(train), fs.X_train)
        np.testing.assert_array_equal(features.transform(test), fs.X_test)
        assert features.n_features_out_ == fs.n_features


def test_config_by_name_path_or_object(tmp_path):
    toml = write_config_toml(tmp_path / "c.toml")
    assert ImageFeatures()._read_config() == load_config(RECOMMENDED_CONFIG) == load_config("recommended")
    assert ImageFeatures("bof-spm")._read_config() == load_config("bof-spm")
    assert ImageFeatures(toml)._read_config() == load_config(toml)
    assert ImageFeatures(CONFIG)._read_config() is CONFIG


def test_clone_keeps_parameters_as_given(cache):
    features = ImageFeatures(CONFIG, cache_dir=cache, n_jobs=2)
    copy = clone(features)
    assert copy.get_params() == features.get_params() and copy.config == CONFIG
    fitted = clone(features).set_params(n_jobs=1).fit(PATHS)
    assert not hasattr(clone(fitted), "extractor_")


def test_parallel_workers_give_the_same_vectors(cache):
    one = ImageFeatures(CONFIG, cache_dir=cache).fit(PATHS)
    two = ImageFeatures(CONFIG, cache_dir=cache, n_jobs=2).fit(PATHS)
    np.testing.assert_array_equal(one.transform(PATHS[::5]), two.transform(PATHS[::5]))


def test_without_cache_same_vectors(cache):
    cached = ImageFeatures(CONFIG, cache_dir=cache).fit(PATHS).transform(PATHS[:4])
    uncached = ImageFeatures(CONFIG, cache_dir=False).fit(PATHS).transform(PATHS[:4])
    np.testing.assert_array_equal(cached, uncached)


@pytest.mark.parametrize(
    "estimator, grid",
    [
        (QuadraticHingeSVC(), {"quadratichingesvc__C": [0.1, 10.0]}),
        (PmSVM(random_state=0), {"pmsvm__C": [0.01, 1.0]}),
        (MBKL(random_state=0, n_stumps=200), {"mbkl__C": [0.1, 10.0]}),
        (HIKnSVM(random_state=0, n_epochs=10), {"hiknsvm__margin": [0.02, 0.2]}),
    ],
)
def test_every_classifier_in_grid_search_and_cross_validation(cache, estimator, grid):
    pipeline = make_pipeline(ImageFeatures(CONFIG, cache_dir=cache), estimator)
    cv = StratifiedKFold(3, shuffle=True, random_state=0)
    search = GridSearchCV(pipeline, grid, cv=cv).fit(PATHS, LABELS)
    assert set(search.cv_results_["params"][0]) == set(grid)
    assert search.best_score_ > 0.5  # four easy classes, chance 0.25
    predicted = search.predict(PATHS[:6])
    assert set(predicted) <= set(LABELS)
    scores = cross_val_score(pipeline, PATHS, LABELS, cv=cv)
    assert np.all(np.isfinite(scores)) and scores.mean() > 0.5


def test_unreadable_images_are_one_line(tmp_path, cache):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a jpeg")
    features = ImageFeatures(CONFIG, cache_dir=cache)
    with pytest.raises(UnreadableImagesError) as info:
        features.fit([*PATHS, str(broken), str(tmp_path / "missing.jpg")])
    message = str(info.value)
    assert "2 of 50 images cannot be read" in message and "missing.jpg (file does not exist)" in message
    assert "\n" not in message
    features.fit(PATHS)
    with pytest.raises(UnreadableImagesError, match="broken.jpg"):
        features.transform([PATHS[0], str(broken)])


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(config="no-such-config"), "does not exist"),
        (dict(config=CONFIG, n_jobs=0), "n_jobs"),
        (dict(config=3), "config"),
    ],
)
def test_bad_parameters(bad, match):
    with pytest.raises(ValueError, match=match):
        ImageFeatures(**bad).fit(PATHS[:4])


def test_fitted_pipeline_saves_as_a_self_contained_model(tmp_path, cache):
    from classify_images import load_model
    from classify_images.pipeline.training.model_file import save_model

    pipeline = make_pipeline(ImageFeatures(CONFIG, cache_dir=cache), QuadraticHingeSVC()).fit(PATHS, LABELS)
    path = save_model(tmp_path / "model", pipeline)
    loaded = load_model(path)
    np.testing.assert_array_equal(loaded.predict(PATHS[::7]), pipeline.predict(PATHS[::7]))
    np.testing.assert_array_equal(loaded.decision_function(PATHS[::7]), pipeline.decision_function(PATHS[::7]))
