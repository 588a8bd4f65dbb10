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
from classify_images.classifiers.model_selection import (
    SearchError,
    edge_warning,
    search_parameters,
    splits_edge_warning,
)
from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.training.model_file import load_model

from .conftest import build_fixture_feature_set


def _problem(n_per_class=20, d=300, k=3, seed=0):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(k), n_per_class)
    X = rng.normal(size=(y.size, d)) + 2.0 * np.eye(k, d)[y]
    return X.astype(np.float32), y


def _reference_scores(X, y, Cs, folds=3, seed=0):
    """Each C fitted on each fold's own rows (copies), scored on the held-out rows."""
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    return [
        np.mean(
            [
                balanced_accuracy_score(y[va], QuadraticHingeSVC(C=C, tol=1e-8).fit(X[tr], y[tr]).predict(X[va]))
                for tr, va in splitter.split(X, y)
            ]
        )
        for C in Cs
    ]


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
    edge = search_parameters(
        QuadraticHingeSVC(), X, y, {"C": [1e-9, 1e-8, 1e-7]}
    )  # all at chance: ties go to the first
    assert edge.best == {"C": 1e-9} and edge.on_edge == ["C"]
    assert edge.warning() == (
        "the search chose C = 1e-09, on the edge of its grid: the best value may lie beyond it; widen the grid"
    )
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
    assert (
        main(["train", str(fixture_set), "--classifier", "linear", "--search", "C=0.01,0.1,1,10", "--out", str(model)])
        == 0
    )
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


def test_an_experiment_warns_when_any_split_chooses_the_edge():
    """Not only the first split: a 3-split experiment where only seed 1 chose the grid's top value
    (as on 15-Scenes, C = 1000 of 1 … 1000) still warns, naming that split."""
    grid = {"C": [1, 10, 100, 1000]}
    assert splits_edge_warning(grid, [(0, {"C": 10}), (1, {"C": 100}), (2, {"C": 10})]) is None
    warning = splits_edge_warning(grid, [(0, {"C": 100}), (1, {"C": 1000}), (2, {"C": 100})])
    assert warning == (
        "the search chose a value on the edge of its grid on 1 of 3 splits (seed 1: C = 1000): "
        "the best value may lie beyond it; widen the grid"
    )
    assert "2 of 3 splits (seed 0: C = 1; seed 2: C = 1000)" in splits_edge_warning(
        grid, [(0, {"C": 1}), (1, {"C": 10}), (2, {"C": 1000})]
    )
    assert splits_edge_warning(grid, [(0, None), (1, None)]) is None
    assert splits_edge_warning({"C": [1, 10]}, [(0, {"C": 10})]) is None  # two values: no inside


def test_experiment_text_warns_for_a_later_split():
    from classify_images.pipeline.interfaces.report import experiment_text
    from classify_images.pipeline.training.evaluation import Experiment, ExperimentRun

    class First:  # the first split's evaluation: only its search record is read
        search = {"grid": {"C": [1, 10, 100]}, "best": {"C": 10}, "on_edge": []}

    runs = (ExperimentRun(0, 0.9, 1.0, 1.0, chosen={"C": 10}), ExperimentRun(1, 0.8, 1.0, 1.0, chosen={"C": 100}))
    text = experiment_text(Experiment("linear", {}, "fs", "hash", runs, First()))
    assert "warning: the search chose a value on the edge of its grid on 1 of 2 splits (seed 1: C = 100)" in text


def test_experiment_chooses_per_split_and_errors_are_one_line(fixture_set, tmp_path, capsys):
    assert (
        main(
            [
                "experiment",
                str(fixture_set),
                "--classifier",
                "linear",
                "--search",
                "C=0.1,1,10",
                "--repeats",
                "2",
                "--out",
                str(tmp_path / "exp"),
            ]
        )
        == 0
    )
    runs = json.loads((tmp_path / "exp" / "experiment.json").read_text())["runs"]
    assert [set(run["chosen"]) for run in runs] == [{"C"}, {"C"}]
    assert all(run["chosen"]["C"] in (0.1, 1, 10) for run in runs)
    capsys.readouterr()
    for bad, message in (
        (["--search", "C"], "expected NAME=V1,V2"),
        (["--search", "C=1,1"], "repeated"),
        (["--search", "C=1,2", "--param", "C=3"], "both set C"),
        (["--search", "nope=1,2"], "has no parameter 'nope'"),
    ):
        assert main(["train", str(fixture_set), "--classifier", "linear", *bad, "--out", str(tmp_path / "x.npz")]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1


def test_run_searches_and_reports(small_dataset, tmp_path, capsys):
    from .conftest import write_config_toml

    config = write_config_toml(tmp_path / "small.toml")
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                str(small_dataset),
                "--config",
                str(config),
                "--classifier",
                "linear",
                "--search",
                "C=0.1,1,10",
                "--out",
                str(out),
                "--no-cache",
                "-q",
            ]
        )
        == 0
    )
    assert "chosen by 3-fold stratified cross-validation" in capsys.readouterr().out
    _, meta = load_model(out / "model.npz")
    assert meta["search"]["best"]["C"] in (0.1, 1, 10)
    assert json.loads((out / "report" / "report.json").read_text())["search"] == meta["search"]


# ------------------------------------------------------------------ with mirrors ([augment] flip_train)
def _mirrored_problem(n_per_class=14, d=200, k=3, seed=0):
    """Images and their "mirrors" (the rows with permuted, noisy features), stacked as the search takes them."""
    X, y = _problem(n_per_class, d, k, seed)
    rng = np.random.default_rng(seed + 100)
    mirrors = (X[:, rng.permutation(d)] + rng.normal(0, 0.5, X.shape)).astype(np.float32)
    return X, mirrors, y


def _reference_mirrored_scores(X, mirrors, y, Cs, folds=3, seed=0, **params):
    """Slow and obvious: per fold, fit on copies of the training images and their mirrors, score each
    held-out image by the class of its decision values averaged with its mirror's."""
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    scores = []
    for C in Cs:
        per_fold = []
        for tr, va in splitter.split(X, y):
            model = QuadraticHingeSVC(C=C, tol=1e-8, **params).fit(
                np.concatenate([X[tr], mirrors[tr]]), np.concatenate([y[tr], y[tr]])
            )
            averaged = 0.5 * (model.decision_function(X[va]) + model.decision_function(mirrors[va]))
            per_fold.append(balanced_accuracy_score(y[va], model.classes_[np.argmax(averaged, axis=1)]))
        scores.append(np.mean(per_fold))
    return scores


def test_the_mirrored_search_equals_a_slow_reference_on_both_paths():
    X, mirrors, y = _mirrored_problem()
    Cs = [1e-4, 1e-3, 1e-2, 1e-1, 1.0]
    reference = _reference_mirrored_scores(X, mirrors, y, Cs, seed=2)
    stacked = np.concatenate([X, mirrors])
    fast = search_parameters(QuadraticHingeSVC(tol=1e-8), stacked, y, {"C": Cs}, seed=2, mirrored=True)
    assert fast.method == "gram" and fast.mirrored and fast.to_dict()["mirrored"] is True
    np.testing.assert_allclose([s["score"] for s in fast.scores], reference, atol=1e-12)
    slow = search_parameters(
        QuadraticHingeSVC(tol=1e-8, solver="features"), stacked, y, {"C": Cs}, seed=2, mirrored=True
    )
    assert slow.method == "refit"
    np.testing.assert_allclose([s["score"] for s in slow.scores], reference, atol=1e-12)
    assert fast.best == slow.best == {"C": Cs[int(np.argmax(reference))]}
    # the mirrors do count: scoring without them (or fitting without them) gives other scores
    plain = search_parameters(QuadraticHingeSVC(tol=1e-8), X, y, {"C": Cs}, seed=2)
    assert [s["score"] for s in plain.scores] != [s["score"] for s in fast.scores]
    with pytest.raises(ValueError, match="their mirrors"):
        search_parameters(QuadraticHingeSVC(), X, y, {"C": Cs}, mirrored=True)


class _RowSpy(QuadraticHingeSVC):
    """Records the rows it is fitted on and asked about (rows are identified by their bytes)."""

    fitted: list = []
    scored: list = []

    def fit(self, X, y):
        _RowSpy.fitted.append(np.array(X))
        return super().fit(X, y)

    def decision_function(self, X):
        _RowSpy.scored.append(np.array(X))
        return super().decision_function(X)


def test_an_image_and_its_mirror_are_always_in_the_same_fold(monkeypatch):
    """Tagged rows: every row of the search's fits and scores is traced back to its image and
    whether it is the mirror; no fold trains on an image (or mirror) whose image it holds out."""
    from classify_images.classifiers import model_selection

    X, mirrors, y = _mirrored_problem(n_per_class=9, d=60)
    n = y.size
    stacked = np.concatenate([X, mirrors])
    tag = {row.tobytes(): (i % n, i >= n) for i, row in enumerate(stacked)}  # row -> (image, is mirror)
    assert len(tag) == 2 * n

    def images(rows):
        return [tag[row.tobytes()] for row in rows]

    _RowSpy.fitted.clear(), _RowSpy.scored.clear()
    search_parameters(_RowSpy(solver="features"), stacked, y, {"C": [0.1, 1.0]}, mirrored=True)
    fits = [images(rows) for rows in _RowSpy.fitted]
    scores = [images(rows) for rows in _RowSpy.scored]
    assert len(fits) == len(scores) == 2 * 3
    held_out_sets = []
    for fitted, scored in zip(fits, scores):
        trained = {image for image, _ in fitted}
        held = {image for image, _ in scored}
        assert not trained & held  # no image (nor its mirror) on both sides
        assert set(fitted) == {(i, m) for i in trained for m in (False, True)}  # each training image with its mirror
        assert set(scored) == {(i, m) for i in held for m in (False, True)}  # each held-out image with its mirror
        assert len(trained) + len(held) == n
        held_out_sets.append(frozenset(held))
    assert len(set(held_out_sets)) == 3 and set().union(*held_out_sets) == set(range(n))  # 3 folds cover the images

    # the Gram path: the rows of every fold's decomposition
    seen = []
    original = model_selection._fold_coordinates

    def spy(K, train, held_out, d, precision=np.float64):
        seen.append((train.copy(), held_out.copy()))
        return original(K, train, held_out, d, precision)

    monkeypatch.setattr(model_selection, "_fold_coordinates", spy)
    search_parameters(QuadraticHingeSVC(), stacked, y, {"C": [0.1, 1.0]}, mirrored=True)
    assert len(seen) == 3
    for train, held_out in seen:
        assert not set(train % n) & set(held_out % n)
        assert sorted(train) == sorted(np.r_[train[train < n], train[train < n] + n])
        assert sorted(held_out) == sorted(np.r_[held_out[held_out < n], held_out[held_out < n] + n])


def test_the_final_fit_reuses_the_searchs_gram_matrix_and_gives_the_same_model(monkeypatch):
    from classify_images.classifiers import eigenbasis, model_selection
    from classify_images.pipeline.training.evaluation import train_classifier

    images, mirrors, y = _mirrored_problem()
    X = np.concatenate([images, mirrors])
    calls = []
    counted = eigenbasis.gram_matrix
    for module in (eigenbasis, model_selection):  # every Gram matrix of all the rows, counted
        monkeypatch.setattr(module, "gram_matrix", lambda M: calls.append(M.shape) or counted(M))
    searched = train_classifier("linear", {}, X, y, seed=0, search={"C": [0.1, 1.0, 10.0]}, mirrored=True)
    assert searched.search["method"] == "gram" and calls.count(X.shape) == 1  # the search's: none for the fit
    calls.clear()
    plain = train_classifier("linear", {"C": searched.params["C"]}, X, y, seed=0, mirrored=True)
    assert calls.count(X.shape) == 1  # computed by the fit itself
    np.testing.assert_array_equal(searched.estimator.coef_, plain.estimator.coef_)
    np.testing.assert_array_equal(searched.estimator.intercept_, plain.estimator.intercept_)


def test_a_reused_gram_matrix_serves_only_the_same_rows():
    from classify_images.classifiers.eigenbasis import EigenBasis, gram_matrix, reused_gram

    X, y = _problem(d=200)
    wrong = gram_matrix(X) * 2.0  # a Gram matrix the rows do not have, to see which one is used
    reference = EigenBasis(X).Z
    with reused_gram(X, wrong):
        assert not np.allclose(np.abs(EigenBasis(X).Z), np.abs(reference))  # these rows: the given matrix
        np.testing.assert_array_equal(EigenBasis(X.copy()).Z, reference)  # other rows (a copy): computed
        np.testing.assert_array_equal(EigenBasis(X[:-1]).Z, EigenBasis(X[:-1].copy()).Z)
    np.testing.assert_array_equal(EigenBasis(X).Z, reference)  # after the block: computed again
    with pytest.raises(ValueError, match="reused_gram"):
        with reused_gram(X, wrong[:-1]):
            pass


# ---------------------------------------------------------------- the default search and the mirrors' use
def _flip_reference(X, mirrors, y, Cs, seed=0):
    """Every (flip_train, flip_test) variant and C fitted on each fold's own rows (copies)."""
    splitter = StratifiedKFold(n_splits=3, shuffle=True, random_state=seed)
    table = {}
    for train_mirrors in (False, True):
        for C in Cs:
            per_fold = {"none": [], "average": []}
            for tr, va in splitter.split(X, y):
                rows = np.concatenate([X[tr], mirrors[tr]]) if train_mirrors else X[tr]
                labels = np.concatenate([y[tr], y[tr]]) if train_mirrors else y[tr]
                model = QuadraticHingeSVC(C=C, tol=1e-8).fit(rows, labels)
                plain = model.decision_function(X[va])
                averaged = 0.5 * (plain + model.decision_function(mirrors[va]))
                for test, values in (("none", plain), ("average", averaged)):
                    per_fold[test].append(balanced_accuracy_score(y[va], model.classes_[np.argmax(values, axis=1)]))
            for test in ("none", "average"):
                table[(train_mirrors, test, C)] = np.mean(per_fold[test])
    return table


def test_the_fold_fits_run_on_one_blas_thread_in_the_rows_precision(monkeypatch):
    """The Gram path's fold fits: one BLAS thread each (small matrices; threads that wait for each
    other cost more than they save on a shared machine), the folds' coordinates in the rows'
    precision (float32 rows: float32, as the span solver's); the scores stay
    those of refitting each fold on its rows, in the grid's own order; the caller's threads after."""
    from threadpoolctl import threadpool_info

    def blas_threads():
        return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}

    seen = []
    original = QuadraticHingeSVC.fit

    def spy(self, Z, labels, *args, **kwargs):
        seen.append((Z.dtype, blas_threads()))
        return original(self, Z, labels, *args, **kwargs)

    X, y = _problem()
    Cs = [1e-2, 1e-4, 1.0, 1e-3, 1e-1]  # not sorted
    before = blas_threads()
    monkeypatch.setattr(QuadraticHingeSVC, "fit", spy)
    result = search_parameters(QuadraticHingeSVC(tol=1e-8), X, y, {"C": Cs}, seed=3)
    monkeypatch.undo()
    assert blas_threads() == before
    assert seen == 3 * len(Cs) * [(np.dtype(np.float32), {1})]
    assert [s["params"]["C"] for s in result.scores] == Cs
    np.testing.assert_allclose([s["score"] for s in result.scores], _reference_scores(X, y, Cs, seed=3), atol=1e-12)
    seen.clear()
    monkeypatch.setattr(QuadraticHingeSVC, "fit", spy)
    search_parameters(QuadraticHingeSVC(tol=1e-8), X.astype(np.float64), y, {"C": Cs[:2]}, seed=3)
    assert {dtype for dtype, _ in seen} == {np.dtype(np.float64)}


def test_choosing_the_mirrors_scores_every_variant_as_refitting_each_fold():
    X, mirrors, y = _mirrored_problem()
    Cs = [1e-3, 1e-2, 1e-1]
    reference = _flip_reference(X, mirrors, y, Cs, seed=1)
    stacked = np.concatenate([X, mirrors])
    for estimator, method in (
        (QuadraticHingeSVC(tol=1e-8), "gram"),
        (QuadraticHingeSVC(tol=1e-8, solver="features"), "refit"),
    ):
        result = search_parameters(estimator, stacked, y, {"C": Cs}, seed=1, mirrored=True, choose_flips=True)
        assert result.method == method
        got = {(s["flip_train"], s["flip_test"], s["params"]["C"]): s["score"] for s in result.scores}
        assert got.keys() == reference.keys()
        np.testing.assert_allclose([got[k] for k in reference], list(reference.values()), atol=1e-12)
        best = max(reference.values())
        chosen = (result.flips["flip_train"], result.flips["flip_test"], result.best["C"])
        assert reference[chosen] == best
        # ties go to the fewest mirrors
        order = [(t, f) for t, f in ((False, "none"), (False, "average"), (True, "none"), (True, "average"))]
        first = min(order.index(k[:2]) for k, v in reference.items() if v == best)
        assert order.index(chosen[:2]) == first
    with pytest.raises(ValueError, match="mirrored"):
        search_parameters(QuadraticHingeSVC(), X, y, {"C": Cs}, choose_flips=True)


def test_mirrors_that_change_the_class_are_not_used():
    """A pose-aligned dataset: the mirror of an image of class 0 looks like class 1 (the class *is*
    the orientation), so training on mirrors or averaging with them hurts; the search keeps neither."""
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], 15)
    d = 200
    X = rng.normal(scale=0.3, size=(y.size, d))
    X[:, 0] += np.where(y == 0, 2.0, np.where(y == 1, -2.0, 0.0))  # left-facing vs right-facing
    X[:, 1] += np.where(y == 2, 2.0, 0.0)
    mirrors = X.copy()
    mirrors[:, 0] *= -1  # a mirror turns left into right
    stacked = np.concatenate([X, mirrors]).astype(np.float32)
    result = search_parameters(
        QuadraticHingeSVC(tol=1e-8), stacked, y, {"C": [0.1, 1.0, 10.0]}, mirrored=True, choose_flips=True
    )
    assert result.flips == {"flip_train": False, "flip_test": "none"}
    assert result.to_dict()["flips"] == result.flips


def test_default_grid_follows_the_scale_of_the_rows():
    from classify_images.classifiers.model_selection import DEFAULT_C_FACTORS, default_grid

    X = np.full((4, 25), 0.2, dtype=np.float32)  # ||x||^2 = 1
    assert default_grid(X) == {"C": list(DEFAULT_C_FACTORS)}
    assert default_grid(3 * X)["C"] == [float(f"{f / 9:.3g}") for f in DEFAULT_C_FACTORS]
    # only the first n rows (the images, not their mirrors)
    assert default_grid(np.concatenate([X, 10 * X]), 4) == default_grid(X)


def test_default_grid_reads_float16_and_float32_rows_as_their_float64_values():
    from classify_images.classifiers.model_selection import default_grid

    rows = np.random.default_rng(0).normal(size=(7, 300)).astype(np.float16)
    for X in (rows, rows.astype(np.float32)):
        assert default_grid(X) == default_grid(rows.astype(np.float64))


def test_train_without_C_chooses_it_by_cross_validation_and_records_it(tmp_path, capsys):
    fs = build_fixture_feature_set(tmp_path)
    model = tmp_path / "m.npz"
    assert main(["train", str(fs), "--classifier", "linear", "--out", str(model)]) == 0
    out = capsys.readouterr().out
    assert "chosen by 3-fold stratified cross-validation" in out
    _, meta = load_model(model)
    assert meta["search"]["method"] == "gram" and len(meta["search"]["grid"]["C"]) == 5
    assert meta["params"]["C"] == meta["search"]["best"]["C"]
    # --param C= still overrides: no search
    fixed = tmp_path / "fixed.npz"
    assert main(["train", str(fs), "--classifier", "linear", "--param", "C=0.5", "--out", str(fixed), "-q"]) == 0
    _, meta = load_model(fixed)
    assert "search" not in meta and meta["params"]["C"] == 0.5


def test_fold_tasks_on_threads_give_the_scores_of_one_thread(monkeypatch):
    """The Gram path's fold tasks run on the caller's BLAS pool size in threads; the scores
    (every variant and grid point) are those of the same search on one thread."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from classify_images.classifiers import QuadraticHingeSVC, model_selection
    from classify_images.classifiers.model_selection import search_parameters

    assert [info for info in threadpool_info() if info.get("user_api") == "blas"]  # numpy's OpenBLAS
    used = []
    original = model_selection.map_tasks

    def spy(solve, n_tasks, threads, done=None):
        used.append(threads)
        return original(solve, n_tasks, threads, done)

    monkeypatch.setattr(model_selection, "map_tasks", spy)
    rng = np.random.default_rng(3)
    n, d = 48, 300
    y = np.repeat(np.arange(3), n // 3)
    X = rng.standard_normal((n, d)).astype(np.float32) + y[:, None] * 0.3
    mirrors = X + 0.1 * rng.standard_normal((n, d)).astype(np.float32)
    rows = np.concatenate([X, mirrors])
    grid = {"C": [0.01, 0.1, 1.0]}
    results = {}
    for threads in (1, 2):
        with threadpool_limits(threads, user_api="blas"):
            results[threads] = search_parameters(
                QuadraticHingeSVC(), rows, y, grid, mirrored=True, choose_flips=True
            ).to_dict()
        assert results[threads]["method"] == "gram"
    assert used == [1, 2]  # the fold tasks ran on one thread, then on two
    assert results[1]["scores"] == results[2]["scores"]
    assert results[1]["best"] == results[2]["best"] and results[1]["flips"] == results[2]["flips"]


@pytest.mark.parametrize("precision", [np.float64, np.float32])
def test_fold_coordinates_reproduce_the_gram_matrix_and_drop_null_directions(precision):
    """``Z_T Z_Tᵀ = K_TT`` and ``Z_H Z_Tᵀ = K_HT`` to the precision's rounding; a repeated training
    row adds no coordinate (its null direction is below the rank rule, float32's included)."""
    from classify_images.classifiers.model_selection import _fold_coordinates

    rng = np.random.default_rng(11)
    X = rng.standard_normal((40, 500))
    X[7] = X[3]  # a duplicate: K is singular
    K = X @ X.T
    train, held_out = np.arange(0, 30), np.arange(30, 40)
    Z_train, Z_held = _fold_coordinates(K, train, held_out, X.shape[1], precision)
    assert Z_train.dtype == precision and Z_held.dtype == precision
    assert Z_train.shape[1] == 29  # 30 rows, one repeated
    scale = np.abs(K).max()
    tolerance = 1e-10 if precision == np.float64 else 1e-5
    np.testing.assert_allclose(
        Z_train.astype(float) @ Z_train.T.astype(float), K[np.ix_(train, train)], atol=tolerance * scale
    )
    np.testing.assert_allclose(
        Z_held.astype(float) @ Z_train.T.astype(float), K[np.ix_(held_out, train)], atol=tolerance * scale
    )


def test_the_default_grid_from_the_gram_diagonal_is_the_grid_from_the_rows():
    from classify_images.classifiers.eigenbasis import gram_matrix
    from classify_images.classifiers.model_selection import default_grid

    rng = np.random.default_rng(2)
    X = (rng.standard_normal((30, 700)) * rng.uniform(0.1, 3.0, (30, 1))).astype(np.float16)
    assert default_grid(X, 20, gram=gram_matrix(X)) == default_grid(X, 20)
    assert default_grid(X, gram=gram_matrix(X)) == default_grid(X)
