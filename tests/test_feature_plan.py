"""The configuration is turned into the pipeline's objects once (settings/plan.py), and the plain
tables the cached stages are keyed by are the ones the configuration gave before."""

import json

import numpy as np
import pytest

from classify_images.coding.encoders import encoder_kinds
from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.extraction.channels import ChannelExtractor
from classify_images.pipeline.extraction.extractor import FeatureExtractor
from classify_images.pipeline.settings.config import PipelineConfig, load_config, named_configs, validate_config
from classify_images.pipeline.settings.plan import FeaturePlan, feature_plan_of, make_feature_plan
from classify_images.pipeline.storage.feature_store import load_feature_set
from classify_images.pipeline.training.model_file import load_model_parts, save_model

from .conftest import FIXTURE_PHOTO, SMALL_CONFIG


def _all_configs():
    configs = {name: load_config(name) for name in sorted(named_configs())}
    configs |= {f"kind-{kind}": validate_config({"codebook": {"kind": kind, "size": 8}}) for kind in encoder_kinds()}
    return configs


@pytest.mark.parametrize("name", sorted(_all_configs()))
def test_the_plan_keeps_every_cache_key(name):
    """The plain tables the stages receive (their joblib keys) are the configuration's, bit for bit."""
    config = _all_configs()[name]
    channels = [c.config for c in config.channels] if hasattr(config, "channels") else [config]
    for one in channels:
        plan = make_feature_plan(one)
        assert plan.sift == one.sift_params()
        assert plan.codebook_table == one.codebook_params()
        assert plan.learning_table == one.codebook_params(learning=True)
        assert plan.encoder.kind == one.codebook.kind and plan.kind == one.codebook.kind
        assert plan.pyramid.levels == tuple(one.pooling.levels) and plan.pyramid.method == one.pooling.method
        assert plan.normalizer().method == one.normalization.method
        assert (plan.max_side, plan.max_pixels) == (one.image.max_side, one.image.max_pixels)
        assert plan.smallest_image_side == max(one.sift.patch_sizes)
        assert (plan.n_samples, plan.sample_seed) == (one.codebook.n_samples, one.codebook.seed)


def test_a_plan_passes_through_and_a_config_is_turned_once():
    config = validate_config(SMALL_CONFIG)
    plan = feature_plan_of(config)
    assert isinstance(plan, FeaturePlan) and plan.config is config
    assert feature_plan_of(plan) is plan


def test_an_extractor_of_a_plan_is_the_extractor_of_its_config():
    config = validate_config(SMALL_CONFIG)
    rng = np.random.default_rng(0)
    codebook = rng.random((16, 128), dtype=np.float32)
    plan = make_feature_plan(config)
    of_plan, of_config = FeatureExtractor(plan, codebook), FeatureExtractor(config, codebook)
    assert of_plan.plan is plan and of_plan.encoder is plan.encoder and of_plan.config is config
    assert of_plan.with_cache(of_plan.cache).plan is plan  # handed on, not made again
    from classify_images.pipeline.settings.dataset import file_fingerprint

    fingerprint = file_fingerprint(FIXTURE_PHOTO)
    np.testing.assert_array_equal(
        of_plan.vector(str(FIXTURE_PHOTO), fingerprint), of_config.vector(str(FIXTURE_PHOTO), fingerprint)
    )


class _Counted:
    """Counts the calls of ``PipelineConfig.codebook_params`` and ``sift_params`` (where a room digs into
    the configuration for the tables it turns into objects)."""

    def __init__(self, monkeypatch):
        self.calls = {"codebook_params": 0, "sift_params": 0}
        for name in self.calls:
            original = getattr(PipelineConfig, name)

            def counted(config, *args, _name=name, _original=original, **kwargs):
                self.calls[_name] += 1
                return _original(config, *args, **kwargs)

            monkeypatch.setattr(PipelineConfig, name, counted)


def test_a_build_and_a_model_file_turn_the_config_into_objects_once(tmp_path, small_dataset, monkeypatch):
    counted = _Counted(monkeypatch)
    out = tmp_path / "fs"
    build_feature_set(small_dataset, out, validate_config(SMALL_CONFIG), cache_dir=tmp_path / "cache")
    assert counted.calls == {"codebook_params": 1, "sift_params": 1}  # one plan, handed down

    feature_set = load_feature_set(out)
    from classify_images.classifiers.quadratic_hinge import QuadraticHingeSVC

    estimator = QuadraticHingeSVC().fit(np.asarray(feature_set.X_train), feature_set.y_train)
    extractor = FeatureExtractor.from_feature_set(feature_set)
    model = save_model(tmp_path / "model.npz", estimator, extractor=extractor, feature_set=feature_set.identity())
    counted.calls = dict.fromkeys(counted.calls, 0)
    _, restored, _ = load_model_parts(model)
    assert counted.calls == {"codebook_params": 1, "sift_params": 1}
    assert restored.n_features == feature_set.n_features


def test_a_channel_build_makes_one_plan_per_channel(tmp_path, small_dataset, monkeypatch):
    small = json.loads(json.dumps(SMALL_CONFIG))
    channel = {table: small[table] for table in ("sift", "codebook", "pooling", "normalization")}
    raw = {
        "dataset": small["dataset"],
        "image": small["image"],
        "channel": [{"name": "a", **channel}, {"name": "b", **channel, "pooling": {"levels": [1]}}],
    }
    from classify_images.pipeline.settings.config import read_any_config

    config = read_any_config(raw)
    counted = _Counted(monkeypatch)
    build_feature_set(small_dataset, tmp_path / "fs", config, cache_dir=tmp_path / "cache")
    assert counted.calls == {"codebook_params": 2, "sift_params": 2}
    extractor = ChannelExtractor.from_feature_set(load_feature_set(tmp_path / "fs"))
    assert [e.plan.pyramid.levels for e in extractor.extractors] == [(1, 2), (1,)]
