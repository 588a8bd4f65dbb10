"""``--search``: parameters chosen by stratified k-fold CV on the training rows (train, experiment,
run), the Gram-matrix path against scikit-learn's GridSearchCV, the record in the model file and
the report, the edge warning, and one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.metrics import balanced_accuracy_score
from sklearn.model_selection import StratifiedKFold

from classify_images.classifiers import QuadraticHingeSVC
from classify_images.classifiers.model_selection import SearchError, edge_warning, search_parameters
from classify_images.pipeline.cli import main
from classify_images.pipeline.model_file import load_model

from .conftest import build_fixture_feature_set


def _problem(n_per_class=20, d=300, k=3, seed=0):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(k), n_per_class)
    X = rng.normal(size=(y.size, d)) + 2.0 * np.eye(k, d)[y]
    return X.astype(np.float32), y


def _reference_scores(X, y, Cs, folds=3, seed=0):
    """Each C fitted on each fold's own rows (copies), scored on the held-out rows."""
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    return [np.mean([balanced_accuracy_score(y[va], QuadraticHingeSVC(C=C, tol=1e-8).fit(X[tr], y[tr]).predict(X[va]))
                     for tr, va in splitter.split(X, y)]) for C in Cs]


def test_the_gram_path_scores_as_refitting_each_fold():
    X, y = _problem()
    Cs = [1e-4, 1e-3, 1e-2, 1e-1, 1.0]
    fast = search_parameters(QuadraticHingeSVC(tol=1e-8), X, y, {"C": Cs}, seed=3)
    assert fast.method == "gram"
    np.testing.assert_allclose([s["score"] for s in fast.scores], _reference_scores(X, y, Cs, seed=3), atol=1e-12)
    # the generic path (GridSearchCV) agrees, and picks the same point
    slow = search_parameters(QuadraticHingeSVC(tol=1e-8, solver="features"), X, y, {"C": Cs}, seed=3)
    assert slow.method == "refit"
    np.testing.assert_allclose([s["score"] for s in slow.scores], [s["score"] for s in fast.scores], atol=1e-12)
    assert fast.best == slow.best
    # more rows than dimensions: the generic path
    X_tall, y_tall = _problem(n_per_class=40, d=20)
    assert search_parameters(QuadraticHingeSVC(), X_tall, y_tall, {"C": [0.1, 1]}).method == "refit"


def test_the_choice_is_the_best_score_and_the_edge_is_flagged():
    X, y = _problem(seed=1)
    result = search_parameters(QuadraticHingeSVC(), X, y, {"C": [1e-6, 1e-5, 1e-2, 1.0]})
    scores = [s["score"] for s in result.scores]
    assert result.best["C"] == [1e-6, 1e-5, 1e-2, 1.0][int(np.argmax(scores))]
    inside = {"grid": {"C": [1, 2, 3]}, "best": {"C": 2}, "on_edge": []}
    assert edge_warning(inside) is None
    edge = search_parameters(QuadraticHingeSVC(), X, y, {"C": [1e-9, 1e-8, 1e-7]})  # all at chance: ties go to the first
    assert edge.best == {"C": 1e-9} and edge.on_edge == ["C"]
    assert edge.warning() == ("the search chose C = 1e-09, on the edge of its grid: the best value may lie beyond it; "
                              "widen the grid")
    assert search_parameters(QuadraticHingeSVC(), X, y, {"C": [1e-9, 1e-8]}).on_edge == []  # two values: no inside


def test_bad_grids_are_one_line_errors():
    X, y = _problem()
    with pytest.raises(SearchError, match="has no parameter 'D'"):
        search_parameters(QuadraticHingeSVC(), X, y, {"D": [1, 2]})
    with pytest.raises(SearchError, match="'C' parameter"):
        search_parameters(QuadraticHingeSVC(), X, y, {"C": [-1, 2]})
    with pytest.raises(SearchError, match="fewer than the 3 folds"):
        search_parameters(QuadraticHingeSVC(), X[:62], np.r_[y[:60], 5, 5], {"C": [1, 2]})


@pytest.fixture(scope="module")
def fixture_set(tmp_path_factory):
    return build_fixture_feature_set(tmp_path_factory.mktemp("search"))


def test_train_records_the_choice_in_the_model_and_the_report(fixture_set, tmp_path, capsys):
    model = tmp_path / "m.npz"
    assert main(["train", str(fixture_set), "--classifier", "linear", "--search", "C=0.01,0.1,1,10",
                 "--out", str(model)]) == 0
    printed = capsys.readouterr().out
    estimator, meta = load_model(model)
    search = meta["search"]
    assert search["grid"] == {"C": [0.01, 0.1, 1, 10]} and search["folds"] == 3 and search["method"] == "gram"
    assert estimator.C == search["best"]["C"] == meta["params"]["C"]
    assert f"C = {search['best']['C']:g} chosen by 3-fold" in printed
    assert ("warning: the search chose" in printed) == (search["best"]["C"] in (0.01, 10))
    assert main(["evaluate", str(fixture_set), str(model), "--out", str(tmp_path / "report")]) == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["search"]["best"] == search["best"]
    assert 'id="search"' in (tmp_path / "report" / "report.html").read_text()


def test_experiment_chooses_per_split_and_errors_are_one_line(fixture_set, tmp_path, capsys):
    assert main(["experiment", str(fixture_set), "--classifier", "linear", "--search", "C=0.1,1,10",
                 "--repeats", "2", "--out", str(tmp_path / "exp")]) == 0
    runs = json.loads((tmp_path / "exp" / "experiment.json").read_text())["runs"]
    assert [set(run["chosen"]) for run in runs] == [{"C"}, {"C"}]
    assert all(run["chosen"]["C"] in (0.1, 1, 10) for run in runs)
    capsys.readouterr()
    for bad, message in ((["--search", "C"], "expected NAME=V1,V2"), (["--search", "C=1,1"], "repeated"),
                         (["--search", "C=1,2", "--param", "C=3"], "both set C"),
                         (["--search", "nope=1,2"], "has no parameter 'nope'")):
        assert main(["train", str(fixture_set), "--classifier", "linear", *bad, "--out", str(tmp_path / "x.npz")]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1


def test_run_searches_and_reports(small_dataset, tmp_path, capsys):
    from .conftest import write_config_toml

    config = write_config_toml(tmp_path / "small.toml")
    out = tmp_path / "run"
    assert main(["run", str(small_dataset), "--config", str(config), "--classifier", "linear", "--search", "C=0.1,1,10",
                 "--out", str(out), "--no-cache", "-q"]) == 0
    assert "chosen by 3-fold stratified cross-validation" in capsys.readouterr().out
    _, meta = load_model(out / "model.npz")
    assert meta["search"]["best"]["C"] in (0.1, 1, 10)
    assert json.loads((out / "report" / "report.json").read_text())["search"] == meta["search"]
