"""Training in groups of classes: the classifier entry point, the merge, and Dask (classify_images/pipeline/training/distributed_training.py).

The cluster tests share one LocalCluster of 2 worker processes on the loopback interface
(module fixture); every call has a time limit (``TIMEOUT``).  The claim under test: the model trained on the cluster is the model
``fit`` learns on one machine, bit for bit (fitted arrays and predictions).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_array_equal
from sklearn.exceptions import ConvergenceWarning

from classify_images.classifiers import MBKL, HIKnSVM, PmSVM, QuadraticHingeSVC
from classify_images.classifiers.base import merge_problem_groups
from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.storage.feature_store import FeatureSetError, load_feature_set
from classify_images.pipeline.training.model_file import load_model

from .conftest import build_fixture_feature_set
from .test_hik_nsvm import histograms

#: Seconds any training on the cluster may take in these tests (they take about one).
TIMEOUT = 600  # a hang guard only, not a speed claim

DECOMPOSING = {
    "nsvm": lambda: HIKnSVM(n_epochs=8, fit_intercept=True, random_state=3),
    "pmsvm": lambda: PmSVM(random_state=3),
    "pmsvm-lut": lambda: PmSVM(p=-8, lut_bins=100, random_state=3),
}


def fit_on(client, *args, **kwargs):
    """``fit_distributed`` with the tests' time limit."""
    from classify_images.pipeline.training.distributed_training import fit_distributed

    return fit_distributed(client, *args, timeout=TIMEOUT, **kwargs)


def assert_same_model(a, b, X) -> None:
    """Every fitted array equal, bit for bit, and the same predictions and scores."""
    assert type(a) is type(b)
    for name in (*type(a)._fitted_arrays, "classes_"):
        assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert_array_equal(a.decision_function(X), b.decision_function(X))
    assert_array_equal(a.predict(X), b.predict(X))


def data(n_classes: int = 5, sparse: bool = False):
    X, y = histograms(21, n=120, d=30, n_classes=n_classes)
    labels = np.array(["cat", "dog", "eel", "fox", "gnu", "hen"])[y]  # string labels, as the command line trains on
    return (sp.csr_matrix(X) if sparse else X), labels


# ------------------------------------------------------------------ classifier layer (no cluster)
@pytest.mark.parametrize("name", sorted(DECOMPOSING))
@pytest.mark.parametrize("n_classes", [2, 5])
def test_groups_merged_equal_fit(name, n_classes):
    X, y = data(n_classes, sparse=name == "nsvm")
    full = DECOMPOSING[name]().fit(X, y)
    total = 1 if n_classes == 2 else n_classes
    cuts = [(0, total)] if total == 1 else [(3, 5), (0, 1), (1, 3)]  # any order
    groups = [DECOMPOSING[name]().fit_problem_group(X, y, a, b) for a, b in cuts]
    assert groups[0].fitted_problems_ == cuts[0]
    assert_same_model(merge_problem_groups(groups), full, X)


def test_merge_refuses_groups_that_do_not_make_one_model():
    X, y = data()
    make = DECOMPOSING["nsvm"]
    a, b = make().fit_problem_group(X, y, 0, 2), make().fit_problem_group(X, y, 2, 5)
    with pytest.raises(ValueError, match="not each of the 5 problems once"):
        merge_problem_groups([a])
    with pytest.raises(ValueError, match="not each of the 5 problems once"):
        merge_problem_groups([a, make().fit_problem_group(X, y, 1, 5)])
    with pytest.raises(ValueError, match="different parameters"):
        merge_problem_groups([a, HIKnSVM(n_epochs=9, fit_intercept=True, random_state=3).fit_problem_group(X, y, 2, 5)])
    other = make().fit_problem_group(X * 2, y, 2, 5)  # other data: other "auto" learning rate
    with pytest.raises(ValueError, match="learning_rate_ differs between the groups"):
        merge_problem_groups([a, other])
    with pytest.raises(ValueError, match="not a non-empty range"):
        make().fit_problem_group(X, y, 3, 3)
    assert_same_model(merge_problem_groups([b, a]), make().fit(X, y), X)


@pytest.mark.parametrize("make", [MBKL], ids=lambda c: c.__name__)
def test_joint_classifiers_refuse_groups(make):
    X, y = data()
    with pytest.raises(NotImplementedError, match="L-BFGS run"):
        make().fit_problem_group(X, y, 0, 2)


# ------------------------------------------------------------------ on a LocalCluster
@pytest.fixture(scope="module")
def client():
    pytest.importorskip("distributed")
    from classify_images.pipeline.execution.cluster import ClusterSpec, open_client

    with open_client(ClusterSpec(n_workers=2)) as client:
        yield client


@pytest.mark.parametrize("name", sorted(DECOMPOSING))
def test_cluster_model_equals_local_model(client, name):
    X, y = data(5, sparse=name == "nsvm")
    estimator = DECOMPOSING[name]()
    model = fit_on(client, estimator, X, y)  # the rows scattered to both workers
    assert not hasattr(estimator, "classes_")
    assert model.get_params() == estimator.get_params()
    assert_same_model(model, DECOMPOSING[name]().fit(X, y), X)
    more_groups = fit_on(client, estimator, X, y, n_groups=4)  # more groups than workers
    assert_same_model(more_groups, model, X)


def test_cluster_repeated_calls_on_the_same_data(client):
    """Each call scatters the labels anew: data of the call before, being released, is never taken for it."""
    X, y = data(4)
    expected = PmSVM(random_state=0).fit(X, y)
    for _ in range(6):
        assert_same_model(fit_on(client, PmSVM(random_state=0), X, y), expected, X)


def test_cluster_model_two_classes_and_sample_weight(client):
    X, y = data(2)
    weight = np.random.default_rng(1).uniform(0.5, 2.0, size=X.shape[0])
    model = fit_on(client, PmSVM(random_state=0), X, y, sample_weight=weight)
    assert_same_model(model, PmSVM(random_state=0).fit(X, y, sample_weight=weight), X)


def test_cluster_seed_drawn_once_when_random_state_is_none(client):
    """random_state=None: every group shuffles with the seed the client draws (here after np.random.seed)."""
    X, y = data(4)
    np.random.seed(12)
    model = fit_on(client, HIKnSVM(n_epochs=5), X, y, n_groups=4)
    np.random.seed(12)
    assert_same_model(model, HIKnSVM(n_epochs=5).fit(X, y), X)


def test_cluster_workers_read_the_feature_set_themselves(client, tmp_path):
    from classify_images.pipeline.training.distributed_training import FeatureSetRows

    feature_set = load_feature_set(build_fixture_feature_set(tmp_path))
    names = np.asarray(feature_set.class_names)[feature_set.y_train]
    rows = FeatureSetRows.of(feature_set)
    model = fit_on(client, PmSVM(random_state=0), rows, names)
    X = np.asarray(feature_set.X_train)
    assert_same_model(model, PmSVM(random_state=0).fit(X, names), np.asarray(feature_set.X_test))
    elsewhere = FeatureSetRows(rows.path, (rows.shape[0] + 1, rows.shape[1]), rows.config_hash)
    with pytest.raises(FeatureSetError, match="the workers must see the client's files"):
        fit_on(client, PmSVM(random_state=0), elsewhere, np.resize(names, rows.shape[0] + 1))


def test_cluster_warnings_come_back_to_the_client(client):
    X, y = data(3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit_on(client, PmSVM(max_iter=1, random_state=0), X, y, n_groups=3)
    assert [w.category for w in caught] == [ConvergenceWarning]  # once, not once per group


@pytest.mark.parametrize("make", [MBKL], ids=lambda c: c.__name__)
def test_cluster_refuses_joint_classifiers(client, make):
    from classify_images.pipeline.training.distributed_training import DistributedTrainingError

    X, y = data()
    with pytest.raises(DistributedTrainingError, match="cannot be trained in groups of classes"):
        fit_on(client, make(), X, y)


def test_cluster_trains_linear_per_class_groups_to_the_local_model(client):
    """The squared-hinge problems decompose per class: groups on the workers give the joint
    L-BFGS model of one machine within solver tolerance (not bit for bit)."""
    from .test_linear_scale import data as signed_data

    X, y = signed_data(n_classes=5)
    joint = QuadraticHingeSVC(tol=1e-9, max_iter=5000).fit(X, y)
    spread = fit_on(client, QuadraticHingeSVC(tol=1e-9, max_iter=5000), X, y, n_groups=3)
    np.testing.assert_allclose(spread.coef_, joint.coef_, rtol=1e-4, atol=1e-5 * np.abs(joint.coef_).max())
    assert spread.objective_ == pytest.approx(joint.objective_, rel=1e-6)
    assert_array_equal(spread.predict(X), joint.predict(X))


def test_cluster_time_limit(client):
    from classify_images.pipeline.training.distributed_training import fit_distributed

    X, y = data(2)
    with pytest.raises(TimeoutError, match="did not finish within 0.01 s"):
        fit_distributed(client, HIKnSVM(n_epochs=3000, learning_rate=1e-3, margin=0.1), X, y, timeout=0.01)


# ------------------------------------------------------------------ command line
@pytest.fixture(scope="module")
def feature_set_path(tmp_path_factory):
    return build_fixture_feature_set(tmp_path_factory.mktemp("train-cli"))


def test_cli_train_on_a_local_cluster_saves_the_local_model(feature_set_path, tmp_path, capsys):
    pytest.importorskip("distributed")
    local, remote = tmp_path / "local.npz", tmp_path / "cluster.npz"
    common = ["train", str(feature_set_path), "--classifier", "nsvm", "--param", "n_epochs=10"]
    assert main([*common, "--out", str(local)]) == 0
    assert main([*common, "--cluster", "local:2", "--out", str(remote)]) == 0
    (a, _), (b, _) = load_model(local), load_model(remote)
    X = np.asarray(load_feature_set(feature_set_path).X_test)
    assert_same_model(b, a, X)


def test_cli_train_streaming(feature_set_path, tmp_path):
    from classify_images.pipeline.training.streaming_training import RowBlocks

    out = tmp_path / "streamed.npz"
    assert (
        main(
            [
                "train",
                str(feature_set_path),
                "--classifier",
                "nsvm",
                "--param",
                "shuffle=false",
                "--param",
                "n_epochs=7",
                "--streaming",
                "--block-rows",
                "4",
                "--seed",
                "5",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    model, _ = load_model(out)
    feature_set = load_feature_set(feature_set_path)
    names = np.asarray(feature_set.class_names)[feature_set.y_train]
    order = RowBlocks(feature_set.X_train, names, 4, seed=5).order  # the blocks the command cut
    expected = HIKnSVM(shuffle=False, n_epochs=7, random_state=5).fit(
        np.asarray(feature_set.X_train)[order], names[order]
    )
    assert_same_model(model, expected, np.asarray(feature_set.X_test))


@pytest.mark.parametrize(
    "options, message",
    [
        (
            ["--classifier", "pmsvm", "--streaming"],
            "--streaming needs a classifier that learns from row blocks (partial_fit): only nsvm and linear",
        ),
        (["--classifier", "nsvm", "--block-rows", "8"], "--block-rows sets the blocks of --streaming"),
        (["--classifier", "nsvm", "--streaming", "--block-rows", "0"], "--block-rows must be at least 1, not 0"),
        (["--classifier", "nsvm", "--streaming", "--cluster", "local:2"], "--streaming trains on this machine"),
        (["--classifier", "mbkl", "--scheduler", "tcp://127.0.0.1:1"], "classifier 'mbkl': MBKL learns its stumps"),
        (["--classifier", "nsvm", "--cluster", "local:0"], "--cluster 'local:0' is not understood"),
    ],
)
def test_cli_train_option_errors_are_one_line(feature_set_path, capsys, options, message):
    assert main(["train", str(feature_set_path), *options]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_cli_train_scheduler_unreachable_is_one_line(feature_set_path, capsys, monkeypatch):
    pytest.importorskip("distributed")
    from classify_images.pipeline.execution import cluster as cluster_module

    monkeypatch.setattr(cluster_module, "DEFAULT_CONNECT_TIMEOUT", 1.0)  # nothing listens: no need to wait 10 s
    assert main(["train", str(feature_set_path), "--classifier", "pmsvm", "--scheduler", "tcp://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot reach the Dask scheduler at tcp://127.0.0.1:1" in err, err
