"""Training from a sharded feature set without assembling it: rows by index, shard blocks, streaming.

No cluster: the sharded layout is written by the single-machine build too.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from classify_images.classifiers import HIKnSVM
from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.settings.config import validate_config
from classify_images.pipeline.storage.feature_store import load_feature_set
from classify_images.pipeline.storage.shard_store import ShardedRows, as_dense
from classify_images.pipeline.training.model_file import load_model
from classify_images.pipeline.training.streaming_training import ShardBlocks, StreamingError

from .conftest import FIXTURE_IMAGES, SMALL_CONFIG


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """A sharded feature set of the fixture images, 5 images per shard."""
    root = tmp_path_factory.mktemp("sharded")
    config = validate_config(json.loads(json.dumps(SMALL_CONFIG)))
    build_feature_set(FIXTURE_IMAGES, root / "fs", config, cache_dir=None, store="sharded", batch_size=5)
    return root / "fs"


def test_rows_by_index_read_the_right_rows_in_the_order_asked(sharded):
    rows = load_feature_set(sharded).rows["train"]
    assert isinstance(rows, ShardedRows) and len(rows.entries) > 2
    dense = rows.toarray()
    rng = np.random.default_rng(0)
    for pick in (rng.permutation(len(rows))[:7], np.array([len(rows) - 1, 0, 3, 3]), np.array([], dtype=np.int64)):
        got = as_dense(rows[pick])
        assert got.shape == (pick.size, rows.shape[1])
        np.testing.assert_array_equal(got, dense[pick])
    with pytest.raises(IndexError):
        rows[np.array([len(rows)])]


def test_shard_blocks_visit_every_row_once_in_a_seeded_order(sharded):
    feature_set = load_feature_set(sharded)
    rows, y = feature_set.rows["train"], feature_set.y_train
    dense = rows.toarray()
    blocks = ShardBlocks(rows, y, rows_per_block=9, seed=3)
    assert np.array_equal(np.sort(blocks.order), np.arange(len(rows)))
    assert not np.array_equal(blocks.order, np.arange(len(rows)))  # shards permuted
    got_X = np.concatenate([as_dense(X) for X, _ in blocks])
    got_y = np.concatenate([labels for _, labels in blocks])
    np.testing.assert_array_equal(got_X, dense[blocks.order])
    np.testing.assert_array_equal(got_y, y[blocks.order])
    assert all(X.shape[0] >= 9 for X, _ in list(blocks)[:-1])
    # the same blocks on every pass, and for the same seed
    assert np.array_equal(ShardBlocks(rows, y, 9, seed=3).order, blocks.order)
    with pytest.raises(StreamingError, match="rows_per_block"):
        ShardBlocks(rows, y, 0)


def test_streaming_train_on_a_sharded_set_never_assembles_it(sharded, tmp_path, monkeypatch):
    feature_set = load_feature_set(sharded)
    names = np.asarray(feature_set.class_names)[feature_set.y_train]
    order = ShardBlocks(feature_set.rows["train"], names, 8, seed=5).order
    expected = HIKnSVM(shuffle=False, n_epochs=5, random_state=5).fit(
        np.asarray(feature_set.X_train)[order], names[order]
    )

    def refuse(self):
        raise AssertionError("the sharded training rows were assembled")

    monkeypatch.setattr(ShardedRows, "toarray", refuse)
    out = tmp_path / "streamed.npz"
    assert (
        main(
            [
                "train",
                str(sharded),
                "--classifier",
                "nsvm",
                "--param",
                "shuffle=false",
                "--param",
                "n_epochs=5",
                "--streaming",
                "--block-rows",
                "8",
                "--seed",
                "5",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    model, _ = load_model(out)
    np.testing.assert_array_equal(model.coef_, expected.coef_)
    monkeypatch.undo()
    X_test = np.asarray(feature_set.X_test)
    np.testing.assert_array_equal(model.predict(X_test), expected.predict(X_test))


def test_shard_blocks_keep_sparse_shards_sparse(sharded):
    """Hard-VQ histograms are stored as CSR shards; the blocks stay CSR (nothing densified)."""
    feature_set = load_feature_set(sharded)
    rows = feature_set.rows["train"]
    assert rows.format == "csr"
    X, _ = next(iter(ShardBlocks(rows, feature_set.y_train, 8, seed=0)))
    assert sp.issparse(X) and X.shape[0] >= 8
