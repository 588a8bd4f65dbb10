"""The LLC, VLAD and Fisher-vector configs: shipped files, validation, hashes."""

import pytest

from classify_images.pipeline.settings.config import TABLES, PipelineConfig, load_config, stage_hash

from .test_config import assert_one_line_config_error


def test_shipped_encoder_configs_load_and_round_trip():
    expected = {
        "llc": ("llc", "signed_max", (1, 2, 4)),
        "vlad": ("vlad", "average", (1, 2)),
        "fisher": ("fisher", "average", (1, 2, "3x1")),
    }
    for name, (kind, method, levels) in expected.items():
        config = load_config(name)
        assert (config.codebook.kind, config.pooling.method, config.pooling.levels) == (kind, method, levels)
        assert PipelineConfig.from_dict(config.to_dict()) == config
    assert load_config("llc").codebook.n_neighbors == 5 and load_config("fisher").codebook.pca_dims == 64
    assert load_config("fisher").to_dict()["pooling"]["levels"] == [1, 2, "3x1"]


@pytest.mark.parametrize("base_name, root_name", [("vlad", "vlad-rootsift"), ("fisher-flip", "fisher-flip-rootsift")])
def test_rootsift_config_is_its_base_with_rootsift_and_its_own_hashes(base_name, root_name):
    base, root = load_config(base_name), load_config(root_name)
    assert root.sift.root_sift and not base.sift.root_sift
    assert PipelineConfig.from_dict(root.to_dict()) == root
    # everything but the RootSIFT switch is the base config (fisher-flip's flips included)
    plain = root.to_dict()
    plain["sift"].pop("root_sift")
    base_dict = base.to_dict()
    base_dict["sift"].pop("root_sift", None)
    assert plain == base_dict
    # descriptors, codebook and feature set are all keyed apart from the base's: nothing stale is reused
    for tables in (["image", "sift"], list(TABLES)):
        assert stage_hash(root, tables) != stage_hash(base, tables)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '[codebook]\nkind = "gmm"\n',
            "codebook.kind = 'gmm': expected one of 'kmeans', 'sparse', 'llc', 'vlad', 'fisher'",
        ),
        ("[codebook]\npca_dims = 32\n", "codebook.pca_dims applies to codebook.kind = 'fisher' only"),
        ('[codebook]\nkind = "vlad"\nn_neighbors = 5\n', "codebook.n_neighbors applies to codebook.kind = 'llc' only"),
        (
            '[codebook]\nkind = "llc"\nsize = 4\nn_neighbors = 5\n',
            "codebook.n_neighbors = 5: expected at most codebook.size = 4",
        ),
        ('[codebook]\nkind = "fisher"\npca_dims = 400\n', "codebook.pca_dims = 400: expected an integer ≥ 1 and ≤ 384"),
        ('[codebook]\nkind = "llc"\nn_neighbors = 0\n', "codebook.n_neighbors = 0: expected an integer ≥ 1"),
        (
            '[codebook]\nkind = "fisher"\nposterior_threshold = 1.0\n',
            "codebook.posterior_threshold = 1.0: expected a finite number ≥ 0 and < 1",
        ),
        (
            "[codebook]\nposterior_threshold = 0.1\n",
            "codebook.posterior_threshold applies to codebook.kind = 'fisher' only",
        ),
        (
            '[pooling]\nlevels = [1, "3y1"]\n',
            "pooling.levels = \\[1, '3y1'\\]: expected a non-empty list of integers ≥ 1 .* \"RxC\"",
        ),
        ("[pooling]\nlevels = []\n", "pooling.levels = \\[\\]: expected a non-empty list"),
        ('[pooling]\nlevels = [1, "0x2"]\n', "pooling.levels"),
        ('[pooling]\nmethod = "median"\n', "expected one of .*'signed_max'"),
    ],
)
def test_bad_encoder_config_is_one_line_error_naming_the_key(tmp_path, text, message):
    assert_one_line_config_error(tmp_path, text, message)


def test_new_keys_change_the_hash_only_when_set():
    base = load_config(None)
    llc = load_config(None, {"codebook": {"kind": "llc"}})
    llc5 = load_config(None, {"codebook": {"kind": "llc", "n_neighbors": 5}})
    hashed = base.to_dict(semantic_only=True)["codebook"]
    assert "n_neighbors" not in hashed and "pca_dims" not in hashed
    assert len({stage_hash(c, list(TABLES)) for c in (base, llc, llc5)}) == 3
    single = load_config(None, {"pooling": {"levels": 2}})
    assert single.pooling.levels == (2,)
