import pytest

from classify_images.pipeline.settings.config import TABLES, ConfigError, load_config, named_configs, stage_hash


def test_shipped_configs_load_and_validate():
    names = named_configs()
    for required in ("scspm", "bof-spm", "lspm", "hik-nsvm"):
        assert required in names
        config = load_config(required)
        assert set(config.to_dict()) == set(TABLES)
    scspm = load_config("scspm")
    assert scspm.codebook.kind == "sparse" and scspm.codebook.size == 1024
    assert scspm.to_dict(semantic_only=True)["pooling"] == {"method": "max", "levels": [1, 2, 4]}
    assert load_config("hik-nsvm").sift.patch_sizes == (16, 24, 32, 40)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[sift]\nstepp = 3\n", "unknown key sift.stepp"),
        ("[siftt]\nstep = 3\n", r"unknown table \[siftt\]"),
        ('[pooling]\nmethod = "median"\n', "pooling.method = 'median': expected one of"),
        ("[sift]\npatch_sizes = [15]\n", "sift.patch_sizes = \\[15\\]: .*multiples? of 4"),
        ("[codebook]\nsize = 1.5\n", "codebook.size"),
        ("[sift]\nstep = ", "not valid TOML"),
        # rules owned by features/ and coding/ modules, still naming the key
        ("[sift]\nstep = 0\n", "sift.step = 0: step must be an integer >= 1"),
        ("[sift]\npatch_sizes = [16, 16]\n", "sift.patch_sizes = \\[16, 16\\]: .*duplicates"),
        ("[image]\nmax_side = 8\n", "image.max_side = 8: expected an integer ≥ 16"),
        ('[image]\nmax_side = "big"\n', "image.max_side = 'big': expected an integer ≥ 16"),
        ('[codebook]\nkind = "gmm"\n', "codebook.kind = 'gmm': expected one of 'kmeans', 'sparse'"),
        (
            '[normalization]\nmethod = "l3"\n',
            "normalization.method = 'l3': expected one of 'l2', 'l1', 'power', 'minmax', 'none'",
        ),
        ("[pooling]\nlevels = [0]\n", "pooling.levels = \\[0\\]: expected a non-empty list of integers ≥ 1"),
        ("[dataset]\ntest_per_class = -1\n", "dataset.test_per_class = -1"),
    ],
)
def test_bad_config_is_one_line_error_naming_the_key(tmp_path, text, message):
    assert_one_line_config_error(tmp_path, text, message)


def assert_one_line_config_error(tmp_path, text: str, message: str) -> None:
    """The config file ``text`` is refused with one line matching ``message``."""
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        load_config(path)
    assert "\n" not in str(info.value)


def test_missing_config_lists_ready_made_ones():
    with pytest.raises(ConfigError, match="ready-made configs: .*scspm"):
        load_config("no-such-config")


def test_overrides_and_stage_hash():
    base = load_config(None)
    changed = load_config(None, {"dataset": {"train_per_class": 7, "seed": None}})
    assert changed.dataset.train_per_class == 7 and changed.dataset.seed == 0
    assert stage_hash(base, ["sift"]) == stage_hash(changed, ["sift"])
    assert stage_hash(base, ["dataset"]) != stage_hash(changed, ["dataset"])
    no_cache = load_config(None, {"sift": {"cache_descriptors": False}})
    assert stage_hash(base, ["sift"]) == stage_hash(no_cache, ["sift"])


def test_config_is_frozen_dataclasses_with_defaults():
    import dataclasses

    from classify_images.pipeline.settings.config import PipelineConfig, SiftConfig

    config = load_config(None)
    assert config == PipelineConfig() and config.sift == SiftConfig()
    assert config.codebook.lambda_ == 0.15 and config.to_dict()["codebook"]["lambda"] == 0.15
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.sift.step = 4
    assert PipelineConfig.from_dict(load_config("scspm").to_dict()) == load_config("scspm")
    assert "cache_descriptors" not in config.sift_params()


def test_config_hash_is_todays():
    # The hash of the plain form is what feature sets record: it must not move with the
    # representation (a changed hash rebuilds every feature set).
    assert stage_hash(load_config(None), list(TABLES)) == "62a0f469c755bee0acc1e5d4edcf87f1bef3921a"
