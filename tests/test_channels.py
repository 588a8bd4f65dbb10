"""Multi-channel feature sets ([[channel]] tables): config, build, stage-cache reuse, layout."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.settings.config import (
    ChannelsConfig,
    ConfigError,
    PipelineConfig,
    load_config,
    stage_hash,
)
from classify_images.pipeline.storage.feature_store import load_feature_set

from .conftest import FIXTURE_IMAGES, SMALL_CONFIG, write_config_toml

#: A second channel: a smaller codebook, max pooling, l2 (its own encodings, the same descriptors).
OTHER = {
    "codebook": {**SMALL_CONFIG["codebook"], "size": 8},
    "pooling": {"method": "max", "levels": [1, 2]},
    "normalization": {"method": "l2"},
}


def channels_toml(path: Path, channels: list[tuple[str, float, dict]]) -> Path:
    """A [[channel]] config: SMALL_CONFIG's [dataset] and [image], then each channel's tables."""
    import json

    lines = []
    for table in ("dataset", "image"):
        lines += [f"[{table}]"] + [f"{k} = {json.dumps(v)}" for k, v in SMALL_CONFIG[table].items()]
    for name, weight, tables in channels:
        lines += ["[[channel]]", f'name = "{name}"', f"weight = {weight}"]
        for table, values in tables.items():
            lines += [f"[channel.{table}]"] + [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _own(tables: dict) -> dict:
    return {t: tables[t] for t in ("sift", "codebook", "pooling", "normalization") if t in tables}


def _entries(cache: Path, stage: str) -> set[str]:
    """The stage-cache entries of one stage function (joblib: one folder per call)."""
    found = set()
    for folder, subfolders, _ in os.walk(cache):
        if Path(folder).name.endswith(stage):
            found |= set(subfolders)
    return found


def test_a_channel_is_the_single_channel_config_with_its_tables(tmp_path):
    single = load_config(write_config_toml(tmp_path / "single.toml"))
    multi = load_config(
        channels_toml(tmp_path / "multi.toml", [("bof", 1.0, _own(SMALL_CONFIG)), ("other", 2.0, OTHER)])
    )
    assert isinstance(single, PipelineConfig) and isinstance(multi, ChannelsConfig)
    first = multi.channels[0].config
    assert first == single and stage_hash(first, list(first.to_dict())) == stage_hash(single, list(single.to_dict()))
    assert [c.name for c in multi.channels] == ["bof", "other"] and multi.channels[1].weight == 2.0
    assert ChannelsConfig.from_dict(multi.to_dict()) == multi


@pytest.mark.parametrize(
    "channels, words",
    [
        ([("a", 1.0, {}), ("a", 1.0, {})], "two channels are named 'a'"),
        ([("1a", 1.0, {})], "name = '1a'"),
        ([("a", 0.0, {})], "weight = 0.0: expected a number > 0"),
        ([("a", 1.0, {"normalization": {"method": "minmax"}})], "'minmax' is fitted on training rows"),
        ([("a", 1.0, {"pooling": {"method": "median"}})], "channel 'a'.*pooling.method"),
    ],
)
def test_bad_channels_are_one_line(tmp_path, channels, words):
    with pytest.raises(ConfigError, match=words) as caught:
        load_config(channels_toml(tmp_path / "bad.toml", channels))
    assert "\n" not in str(caught.value)


def test_top_level_sift_beside_channels_is_refused(tmp_path):
    path = channels_toml(tmp_path / "bad.toml", [("a", 1.0, {})])
    path.write_text(path.read_text() + "[sift]\nstep = 4\n")
    with pytest.raises(ConfigError, match=r"put it inside each \[\[channel\]\] as \[channel.sift\]"):
        load_config(path)


def test_multi_channel_build_reuses_the_single_channel_cache_and_concatenates_rows(tmp_path):
    cache = tmp_path / "cache"
    single = load_feature_set(
        build_feature_set(
            FIXTURE_IMAGES, tmp_path / "single", load_config(write_config_toml(tmp_path / "s.toml")), cache_dir=cache
        ).path
    )
    before = {
        stage: _entries(cache, stage)
        for stage in ("check_image_group", "image_descriptors", "learn_codebook", "image_encoding")
    }
    config = load_config(channels_toml(tmp_path / "m.toml", [("bof", 1.0, _own(SMALL_CONFIG)), ("other", 2.0, OTHER)]))
    multi = load_feature_set(build_feature_set(FIXTURE_IMAGES, tmp_path / "multi", config, cache_dir=cache).path)
    after = {stage: _entries(cache, stage) for stage in before}
    n_images = len(single.train_paths) + len(single.test_paths)
    # the "bof" channel equals the single config: every one of its entries was read, none added;
    # the other channel shares the descriptors and adds its codebook and one encoding per image
    assert (
        after["check_image_group"] == before["check_image_group"]
        and after["image_descriptors"] == before["image_descriptors"]
    )
    assert len(after["learn_codebook"] - before["learn_codebook"]) == 1
    assert len(after["image_encoding"] - before["image_encoding"]) == n_images
    layout = multi.channels
    assert [(c.name, c.offset, c.signed, c.weight) for c in layout] == [
        ("bof", 0, False, 1.0),
        ("other", 80, False, 2.0),
    ]
    assert layout[0].dims == single.n_features == 80 and layout[1].dims == 5 * 8 and multi.n_features == 120
    assert multi.train_paths == single.train_paths and multi.test_paths == single.test_paths
    for part in ("X_train", "X_test"):
        rows = np.asarray(getattr(multi, part))
        assert rows[:, :80].tobytes() == np.asarray(getattr(single, part)).tobytes()
        np.testing.assert_allclose(np.linalg.norm(rows[:, 80:], axis=1), 1.0, rtol=1e-5)  # l2 rows of the other channel
    assert multi.config_hash != single.config_hash and isinstance(multi.config, ChannelsConfig)
    again = build_feature_set(FIXTURE_IMAGES, tmp_path / "multi", config, cache_dir=cache)
    assert again.reused


def _multi_feature_set(tmp_path, channels) -> Path:
    from classify_images.pipeline.interfaces.cli import main

    config = channels_toml(tmp_path / "multi.toml", channels)
    out = tmp_path / "multi"
    assert (
        main(
            [
                "build-features",
                str(FIXTURE_IMAGES),
                "--config",
                str(config),
                "--out",
                str(out),
                "--cache-dir",
                str(tmp_path / "cache"),
                "-q",
            ]
        )
        == 0
    )
    return out


def test_train_evaluate_predict_a_combined_multi_channel_model(tmp_path, capsys):
    import json

    from classify_images.classifiers.combination import combine_rows
    from classify_images.pipeline.interfaces.cli import main
    from classify_images.pipeline.interfaces.image_features import load_image_model
    from classify_images.pipeline.training.model_file import load_model, load_model_parts, read_model_meta

    fs_path = _multi_feature_set(tmp_path, [("bof", 1.0, _own(SMALL_CONFIG)), ("other", 2.0, OTHER)])
    fs = load_feature_set(fs_path)
    model_path = tmp_path / "model.npz"
    assert (
        main(
            [
                "train",
                str(fs_path),
                "--classifier",
                "linear",
                "--combine",
                "average",
                "--search",
                "C=1,100",
                "--out",
                str(model_path),
                "-q",
            ]
        )
        == 0
    )
    meta = read_model_meta(model_path)
    assert meta["combine"]["rule"] == "average" and [c["name"] for c in meta["combine"]["channels"]] == ["bof", "other"]
    assert meta["search"]["best"]["C"] in (1, 100)
    # the model's extractor makes the combined rows of new images, bit for bit those evaluate scores
    classifier, extractor, _ = load_model_parts(model_path)
    image = str(FIXTURE_IMAGES / fs.test_paths[0])
    X, status = extractor.transform_images([image])
    expected = combine_rows(np.asarray(fs.X_test[:1]), fs.channels, "average", "linear")
    np.testing.assert_allclose(X, expected, rtol=1e-6, atol=1e-7)
    assert status[0]["ok"]
    model = load_image_model(model_path)
    assert model.predict([image])[0] == classifier.predict(expected)[0]
    report = tmp_path / "report"
    assert main(["evaluate", str(fs_path), str(model_path), "--out", str(report), "-q"]) == 0
    saved = json.loads((report / "report.json").read_text())
    assert saved["combine"]["rule"] == "average"
    estimator, meta = load_model(model_path)
    test = combine_rows(np.asarray(fs.X_test), fs.channels, "average", "linear")
    assert saved["mean_per_class_accuracy"] == pytest.approx(
        float(
            np.mean(
                [
                    np.mean(estimator.predict(test)[np.asarray(fs.y_test) == k] == np.asarray(fs.class_names)[k])
                    for k in range(len(fs.class_names))
                ]
            )
        )
    )


def test_experiment_with_each_rule_and_the_refusals(tmp_path, capsys):
    import json

    from classify_images.pipeline.interfaces.cli import main

    fs_path = _multi_feature_set(tmp_path, [("bof", 1.0, _own(SMALL_CONFIG)), ("other", 2.0, OTHER)])
    for rule, classifier in (("concat", "linear"), ("average", "pmsvm"), ("mbkl", "mbkl")):
        out = tmp_path / f"exp-{rule}"
        assert (
            main(
                [
                    "experiment",
                    str(fs_path),
                    "--classifier",
                    classifier,
                    "--combine",
                    rule,
                    "--repeats",
                    "2",
                    "--out",
                    str(out),
                    "-q",
                ]
            )
            == 0
        )
        saved = json.loads((out / "experiment.json").read_text())
        assert saved["combine"]["rule"] == rule and len(saved["runs"]) == 2
    capsys.readouterr()
    assert (
        main(
            [
                "experiment",
                str(fs_path),
                "--classifier",
                "linear",
                "--combine",
                "mbkl",
                "--out",
                str(tmp_path / "bad"),
                "-q",
            ]
        )
        == 2
    )
    assert "use --classifier mbkl" in capsys.readouterr().err
    single = tmp_path / "single"
    assert (
        main(
            [
                "build-features",
                str(FIXTURE_IMAGES),
                "--config",
                str(write_config_toml(tmp_path / "s.toml")),
                "--out",
                str(single),
                "--cache-dir",
                str(tmp_path / "cache"),
                "-q",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert (
        main(
            [
                "train",
                str(single),
                "--classifier",
                "linear",
                "--combine",
                "concat",
                "-q",
                "--out",
                str(tmp_path / "m.npz"),
            ]
        )
        == 2
    )
    assert "no channel layout" in capsys.readouterr().err


def _count_decodes(monkeypatch) -> dict[str, int]:
    """Count the images the descriptor stages decode (the grey loader they call), per ``class/file``."""
    from classify_images.pipeline.extraction import stages

    counts: dict[str, int] = {}
    real = stages.load_grayscale

    def counting(path, *args, **kwargs):
        name = Path(path).relative_to(FIXTURE_IMAGES).as_posix()
        counts[name] = counts.get(name, 0) + 1
        return real(path, *args, **kwargs)

    counting.__module__, counting.__qualname__ = real.__module__, real.__qualname__
    monkeypatch.setattr(stages, "load_grayscale", counting)
    return counts


def test_a_cold_two_channel_build_decodes_each_image_once_per_pass(tmp_path, monkeypatch):
    """Two channels with their own [sift] (no descriptor shared through the cache, none cached): each
    training image is decoded once by the sample pass and once by the encode pass, each test image
    once (by the encode pass), not once per channel; the rows equal the channels' single builds."""
    no_cache = {"cache_descriptors": False}
    bof = {**_own(SMALL_CONFIG), "sift": {**SMALL_CONFIG["sift"], **no_cache}}
    other = {**OTHER, "sift": {**SMALL_CONFIG["sift"], "step": 6, **no_cache}}
    config = load_config(channels_toml(tmp_path / "m.toml", [("bof", 1.0, bof), ("other", 1.0, other)]))
    counts = _count_decodes(monkeypatch)
    multi = load_feature_set(
        build_feature_set(FIXTURE_IMAGES, tmp_path / "multi", config, cache_dir=tmp_path / "cache").path
    )
    expected = {p: 2 for p in multi.train_paths} | {p: 1 for p in multi.test_paths}
    assert len(expected) == len(multi.train_paths) + len(multi.test_paths) and counts == expected
    monkeypatch.undo()
    columns = 0
    for name, tables in (("bof", bof), ("other", other)):  # each channel alone, on a cold cache of its own
        single = load_feature_set(
            build_feature_set(
                FIXTURE_IMAGES,
                tmp_path / name,
                load_config(write_config_toml(tmp_path / f"{name}.toml", {**SMALL_CONFIG, **tables})),
                cache_dir=tmp_path / f"cache-{name}",
            ).path
        )
        for part in ("X_train", "X_test"):
            block = np.asarray(getattr(multi, part))[:, columns : columns + single.n_features]
            assert block.tobytes() == np.asarray(getattr(single, part)).tobytes()
        columns += single.n_features
    assert columns == multi.n_features


def test_a_single_config_reuses_every_entry_of_a_cold_multi_channel_build(tmp_path, monkeypatch):
    """The shared decodes leave the cache keys as they were: after a cold [[channel]] build whose first
    channel is the single config (descriptors cached, the default), the single build adds no entry
    and decodes no image for its descriptors."""
    cache = tmp_path / "cache"
    config = load_config(channels_toml(tmp_path / "m.toml", [("bof", 1.0, _own(SMALL_CONFIG)), ("other", 2.0, OTHER)]))
    build_feature_set(FIXTURE_IMAGES, tmp_path / "multi", config, cache_dir=cache)
    stages = ("check_image_group", "image_descriptors", "descriptor_sample", "learn_codebook", "image_encoding")
    before = {stage: _entries(cache, stage) for stage in stages}
    counts = _count_decodes(monkeypatch)
    build_feature_set(
        FIXTURE_IMAGES, tmp_path / "single", load_config(write_config_toml(tmp_path / "s.toml")), cache_dir=cache
    )
    assert {stage: _entries(cache, stage) for stage in stages} == before and all(before.values())
    assert counts == {}
