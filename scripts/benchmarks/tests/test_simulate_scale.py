"""Tests of the scaling scripts (benchmarks/simulate_scale.py, benchmarks/_cluster_metrics.py):
the synthetic images, the process-tree monitor and the projection arithmetic."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
import simulate_scale


def test_synthetic_images_are_deterministic_and_differ_by_index():
    label, pixels = simulate_scale.synthetic_image(7, n_classes=5, seed=3, min_side=64, max_side=128)
    again = simulate_scale.synthetic_image(7, n_classes=5, seed=3, min_side=64, max_side=128)
    other = simulate_scale.synthetic_image(8, n_classes=5, seed=3, min_side=64, max_side=128)
    assert label == 7 % 5 and np.array_equal(pixels, again[1])
    assert pixels.dtype == np.uint8 and 64 <= min(pixels.shape) and max(pixels.shape) <= 128
    assert other[0] == 8 % 5 and (other[1].shape != pixels.shape or not np.array_equal(other[1], pixels))
    assert pixels.std() > 10  # a texture, not a flat image


def test_generate_writes_the_same_bytes_and_skips_a_complete_folder(tmp_path, capsys):
    first, second = tmp_path / "a", tmp_path / "b"
    simulate_scale.generate(first, 12, 3, 0, 64, 96, 90)
    simulate_scale.generate(second, 12, 3, 0, 64, 96, 90)
    files = sorted(p.relative_to(first) for p in first.rglob("*.jpg"))
    assert len(files) == 12 and {p.parent.name for p in files} == {"class_00", "class_01", "class_02"}
    assert all((first / p).read_bytes() == (second / p).read_bytes() for p in files)
    capsys.readouterr()
    simulate_scale.generate(first, 12, 3, 0, 64, 96, 90)
    assert "already there" in capsys.readouterr().out


def _burn_cpu_in_child(seconds: float) -> None:
    code = (
        f"import time\nstart = time.process_time()\nwhile time.process_time() - start < {seconds!r}: pass\n"
        "time.sleep(0.3)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_monitor_counts_the_cpu_of_child_processes_per_stage():
    def results():  # the work happens while the progress bar waits for a result, as in a build
        _burn_cpu_in_child(0.4)
        yield 1

    with simulate_scale.ProcessTreeMonitor(interval=0.05) as monitor:
        for _ in monitor.progress(results(), "check images", 1):
            time.sleep(0.1)
    assert monitor.stage_cpu["check images"] >= 0.3
    assert monitor.stage_cpu.get("split", 0.0) < 0.2  # the stage after the progress bar
    assert monitor.memory()["worker_processes_seen"] >= 1


def _report(n_images, n_train, walls, cpus, cache_per_image, store_total):
    return {
        "n_images": n_images,
        "rows": n_images,
        "n_train": n_train,
        "wall_seconds": sum(walls.values()) + 1.0,
        "stage_wall_seconds": walls,
        "stage_cpu_seconds": cpus,
        "cache_bytes_per_image": cache_per_image,
        "cache_bytes_total": sum(cache_per_image.values()) * n_images,
        "store_bytes_total": store_total,
        "memory": {"worker_peak_mib": 200.0},
    }


def test_check_projection_scales_each_step_by_what_it_counts():
    walls = {"discover": 1.0, "check": 2.0, "sample": 4.0, "codebook": 10.0, "encode+pool": 6.0, "normalise+write": 0.5}
    cpus = {"check images": 1.0, "sample descriptors": 2.0, "encode + pool": 3.0, "codebook": 5.0}
    small = _report(
        100, 50, walls, cpus, {"check_image": 1000, "descriptor_sample": 200, "learn_codebook": 10}, store_total=10_000
    )
    large = _report(1000, 50, walls, cpus, {}, store_total=0)
    check = simulate_scale.check_projection(small, large)
    stages = check["stages"]
    assert stages["check"]["projected_s"] == pytest.approx(20.0)  # per image: × 10
    assert stages["sample"]["projected_s"] == pytest.approx(4.0)  # same training images
    assert stages["codebook"]["projected_s"] == pytest.approx(10.0)  # fixed
    assert stages["encode+pool"]["projected_cpu_s"] == pytest.approx(30.0)
    # train/test aware: sample 0.08 s per training image; mean encode 0.06 s over half training
    # images -> a training image 0.02 s, a test image 0.10 s; 50 + 950 of them
    assert stages["encode+pool, train/test aware"]["projected_s"] == pytest.approx(50 * 0.02 + 950 * 0.10)
    # cache: check entries grow with the images, the sample with the training images, the codebook is one
    assert check["cache_bytes"]["projected"] == pytest.approx(1000 * 1000 + 200 * 100 + 10 * 100)
    assert check["store_bytes"]["projected"] == pytest.approx(100_000)


def test_encode_split_recovers_the_two_costs():
    cached, fresh = simulate_scale._encode_split(sample=4.0, encode=1.0 / 3 * 2.0 + 2.0 / 3 * 6.0, train_share=1.0 / 3)
    assert (cached, fresh) == pytest.approx((2.0, 6.0))


def test_train_projection_scales_by_non_zeros_and_classes():
    costs = {
        "classifiers": {
            "nsvm": {"all": {"cpu_ns_per_class_per_nnz": 100.0}, "half": {"cpu_ns_per_class_per_nnz": 100.0}}
        }
    }
    projected = simulate_scale.train_projection(
        costs, n_train=1_000_000, nnz_per_row=1000, n_classes=1000, cores=[10, 2000]
    )
    nsvm = projected["nsvm"]
    assert nsvm["cpu_s_per_class"] == 100  # 1e9 non-zeros × 100 ns
    assert nsvm["hours"][10] == pytest.approx(100 * 1000 / 10 / 3600, abs=0.01)
    assert nsvm["hours"][2000] == pytest.approx(100 / 3600, abs=0.01)  # never fewer than one class per core
    assert nsvm["per_nnz_growth_when_rows_double"] == 1.0


def test_cluster_metrics_task_names():
    pytest.importorskip("distributed")
    import _cluster_metrics

    assert _cluster_metrics._prefix("encode-pool-1a2b3c4d-17") == "encode-pool"
    assert _cluster_metrics._prefix(("check-images-deadbeef", 3)) == "check-images"
    assert _cluster_metrics._prefix("f") == "f"


def _pq_build(
    n_images,
    n_train,
    fixed=3.0,
    per_image=0.01,
    pq_fit_per_row=0.1,
    fresh=0.02,
    cached=0.002,
    wall_extra=2.0,
    n_features=64,
):
    """A build report whose stages cost ``fixed`` + a cost per item of what they count: the
    encode step ``fresh`` per row computed there and ``cached`` per row the sample pass computed."""
    counts = simulate_scale._counts({"n_images": n_images, "n_train": n_train, "rows": n_images})
    per = {"pq_sample": pq_fit_per_row, "fresh_rows": fresh, "pq_sample_images": cached}
    cpu = {
        stage: fixed + sum(per.get(k, per_image) * counts[k] for k in keys)
        for stage, keys in simulate_scale._PQ_STAGE_COUNTS.items()
    }
    cpu["pool (codebook sample)"] = fixed + fresh * counts["pq_sample_images"]
    codebooks = 4 * n_features * min(n_train, 256)
    return {
        "n_images": n_images,
        "n_train": n_train,
        "rows": n_images,
        "n_features": n_features,
        "stage_cpu_seconds": cpu,
        "monitor_stage_wall_seconds": {k: 2 * v for k, v in cpu.items()},
        "wall_seconds": 2 * sum(cpu.values()) + wall_extra,
        "cpu_seconds": sum(cpu.values()),
        "cache_bytes_per_image": {"check_image": 1000, "learn_codebook": 5000 / n_images},
        "cache_bytes_total": 1000 * n_images + 5000,
        "store_bytes_total": codebooks + 10 * n_images,
    }


def test_pq_sample_images_are_every_image_of_the_picked_training_shards():
    from classify_images.pipeline.extraction.build_steps import PQ_SAMPLE_SHARDS, pq_sample_shards

    for n_train, shard in [
        (1, 64),
        (100, 64),
        (1000, 64),
        (200, 64),
        (25_000, 64),
        (16_384, 64),
        (16_385, 64),
        (50_000, 100),
        (7, 3),
    ]:
        shards = [list(range(start, min(start + shard, n_train))) for start in range(0, n_train, shard)]
        picked = set(pq_sample_shards(len(shards)).tolist())
        assert len(picked) == min(len(shards), PQ_SAMPLE_SHARDS)
        expected = sum(len(images) for k, images in enumerate(shards) if k in picked)  # the slow obvious count
        assert simulate_scale.pq_sample_images(n_train, shard) == expected
    assert simulate_scale.pq_sample_images(25_000, 64) == 255 * 64 + 40  # 256 shards, the last (short) one among them
    assert simulate_scale.pq_sample_images(0, 64) == 0


def test_run_projection_separates_fixed_costs_fresh_and_cached_rows_and_the_pq_sample():
    runs = [_pq_build(200, 100), _pq_build(2000, 1000), _pq_build(2000, 200)]
    large = _pq_build(50_000, 25_000)
    target = {"n_images": 50_000, "n_train": 25_000, "rows": 50_000}
    projection = simulate_scale.project_from_runs(runs, target)
    stages = projection["build"]["stages"]
    assert projection["target_counts"]["pq_sample_images"] == 16_360
    assert projection["target_counts"]["fresh_rows"] == 50_000 - 16_360
    assert stages["check images"]["cpu_fixed_s"] == pytest.approx(3.0, abs=1e-6)
    assert stages["check images"]["projected_cpu_s"] == pytest.approx(3.0 + 500.0, abs=0.1)
    # the encode step's two costs come apart only because the third run has another training share
    encode = stages["encode + pool"]["cpu_per_item_ms"]
    assert encode["fresh_rows"] == pytest.approx(20.0, abs=1e-3) and encode["pq_sample_images"] == pytest.approx(
        2.0, abs=1e-3
    )
    # the sample pass encodes 16 384 images at 50 000, not the 1 024-row sample
    assert stages["pool (codebook sample)"]["projected_cpu_s"] == pytest.approx(3.0 + 0.02 * 16_360, abs=0.1)
    # the PQ codebooks stop growing at 1 024 rows
    assert stages["after pool (codebook sample)"]["projected_cpu_s"] == pytest.approx(3.0 + 102.4, abs=0.1)
    assert stages["codebook"]["projected_cpu_s"] == pytest.approx(3.0)
    assert projection["build"]["projected_cpu_s"] == pytest.approx(large["cpu_seconds"], rel=1e-3)
    assert projection["build"]["projected_wall_s"] == pytest.approx(large["wall_seconds"], rel=1e-3)
    # the codebooks of the 200-image run (100 centroids) are not read as bytes per row
    assert projection["build"]["projected_store_bytes"] == pytest.approx(large["store_bytes_total"])
    # two runs of one training share cannot tell a cached row from a fresh one: the error is the model's
    two = simulate_scale.project_from_runs(runs[:2], target)
    assert abs(two["build"]["projected_cpu_s"] - large["cpu_seconds"]) > 10


def test_training_projection_separates_the_fixed_part_rows_and_iterations():
    def train(rows, iterations, fixed=9.0, per_row=1e-3, per_row_iteration=1e-4):
        seconds = fixed + per_row * rows + per_row_iteration * rows * iterations
        return {
            "n_train": rows,
            "n_iter": iterations,
            "params": {"max_iter": iterations},
            "cpu_seconds": seconds,
            "wall_seconds": 2 * seconds,
        }

    trains = [train(10, 40), train(1000, 40), train(1000, 400)]
    projection = simulate_scale.project_from_runs(
        [_pq_build(200, 100), _pq_build(2000, 1000)], {"n_images": 50_000, "n_train": 25_000, "rows": 50_000}, trains
    )
    model = projection["train"]
    assert model["cpu_fixed_s"] == pytest.approx(9.0, abs=1e-6) and model["cpu_per_row_ms"] == pytest.approx(
        1.0, abs=1e-6
    )
    assert model["cpu_per_row_iteration_us"] == pytest.approx(100.0, abs=1e-4)
    assert model["projected_cpu_s"] == pytest.approx(train(25_000, 40)["cpu_seconds"], abs=0.1)
    assert model["projected_wall_s"] == pytest.approx(train(25_000, 40)["wall_seconds"], abs=0.1)
    # a training stopped before max_iter counts the iterations it made
    assert simulate_scale._train_terms({"n_train": 10, "n_iter": 7, "params": {"max_iter": 40}}) == [10, 70]
    large = _pq_build(50_000, 25_000)
    check = simulate_scale.compare_with_large(projection, large, train(25_000, 40))
    assert check["train_cpu_s"]["error_percent"] == pytest.approx(0.0, abs=0.1)
    assert check["total_cpu_s"]["measured"] == pytest.approx(
        large["cpu_seconds"] + train(25_000, 40)["cpu_seconds"], abs=0.1
    )


def test_fisher_projection_arithmetic():
    stage = {
        "imagenet_like_decode": {"cpu_ms_per_image": 1.0, "file_bytes": 50_000},
        "configs": {
            "fisher": {
                "n_features": 1000,
                "cache_bytes_per_image": {"codes_or_vector": 4000},
                "cpu_ms_per_image": {"fingerprint": 0.1, "decode": 0.4, "total": 10.0},
            }
        },
    }
    codec = {
        "codecs": {
            "float16": {"bytes_per_row": 2000, "encode_ms_per_row": 0.1, "decode_ms_per_row": 0.1},
            "pq8": {
                "bytes_per_row": 125,
                "codebook_bytes": 1_024_000,
                "fit_ms_per_row_iteration": 1.0,
                "encode_ms_per_row": 2.0,
                "decode_ms_per_row": 0.5,
            },
            "pq16": {
                "bytes_per_row": 63,
                "codebook_bytes": 1_024_000,
                "fit_ms_per_row_iteration": 1.0,
                "encode_ms_per_row": 1.0,
                "decode_ms_per_row": 0.25,
            },
        }
    }
    linear = {"solvers": {"sgd": {"cpu_ns_per_row_class_pass": 1000.0, "passes": 10}}}
    report = simulate_scale.project_fisher_imagenet(
        stage,
        codec,
        linear,
        n_train=9000,
        n_test=1000,
        cores=[10, 1000],
        image_bytes=100_000,
        overhead_ms=5.0,
        gmm_seconds=100.0,
        task_seconds=0.001,
        batch_size=100,
        fs_gb_per_s=1.0,
        classes=100,
        pq_sample_rows=1000,
        pq_iterations=10,
    )
    pq8 = report["formats"]["pq8"]
    # 10 compute + 2 x (2 - 0.5) larger JPEGs + 5 overhead + 2 PQ encoding
    assert pq8["worker_ms_per_image"] == pytest.approx(20.0)
    assert pq8["pq_fit_s"] == pytest.approx(10.0)
    assert pq8["build"][0]["cpu_bound_hours"] == pytest.approx((100 + 10 + 20e-3 * 10_000 / 10) / 3600, abs=0.01)
    # training on 10 cores: 10 classes each, 10 passes x 9 000 rows x (0.5 ms decode + 10 x 1 us)
    sgd = pq8["training"]["sgd"]["on"]
    assert sgd[0]["hours"] == pytest.approx(round(10 * 9000 * (0.5e-3 + 10 * 1e-6) / 3600, 1))
    assert sgd[1]["decode_share"] == pytest.approx(0.5e-3 / (0.5e-3 + 1e-6), abs=1e-3)  # 100 workers of 1 class
    assert report["formats"]["float32"]["bytes_per_image_stored"] == 4000


def test_cluster_startup_measures_a_tiny_training_on_a_local_cluster():
    import argparse

    report = simulate_scale.cluster_startup(argparse.Namespace(cluster="local:1", classes=3, repeats=1))
    assert len(report["runs"]) == 1 and report["wall_seconds"] > 0 and report["cpu_seconds"] > 0


def test_training_projection_at_the_target_iterations_is_fixed_plus_per_row():
    """Trainings all at the target's 40 iterations: rows and rows x iterations are proportional, so
    the model is a fixed part plus a cost per row at 40 iterations (no per-iteration cost reported);
    a long training whose iterations cost more (another regime) is what the fit then leaves out."""

    def train(rows, iterations, fixed=9.0, per_row=1e-3, per_row_iteration=1e-4):
        seconds = fixed + per_row * rows + per_row_iteration * rows * iterations
        return {
            "n_train": rows,
            "n_iter": iterations,
            "params": {"max_iter": iterations},
            "cpu_seconds": seconds,
            "wall_seconds": 2 * seconds,
        }

    builds = [_pq_build(200, 100), _pq_build(2000, 1000)]
    target = {"n_images": 50_000, "n_train": 25_000, "rows": 50_000}
    trains = [train(100, 40), train(1000, 40), train(5000, 40)]
    model = simulate_scale.project_from_runs(builds, target, trains)["train"]
    assert model["model"].startswith("fixed + per_row x rows (every training at 40")
    assert "cpu_per_row_iteration_us" not in model
    assert model["cpu_fixed_s"] == pytest.approx(9.0, abs=1e-6)
    assert model["cpu_per_row_ms"] == pytest.approx(1.0 + 40 * 0.1, abs=1e-6)
    assert model["projected_cpu_s"] == pytest.approx(train(25_000, 40)["cpu_seconds"], abs=0.1)
    assert model["projected_wall_s"] == pytest.approx(train(25_000, 40)["wall_seconds"], abs=0.1)
    # a 400-iteration run whose late iterations cost twice as much biases the three-term model at 40 iterations
    slow = train(1000, 400, per_row_iteration=2e-4)
    mixed = simulate_scale.project_from_runs(builds, target, trains + [slow])["train"]
    assert "cpu_per_row_iteration_us" in mixed
    assert abs(mixed["projected_cpu_s"] - train(25_000, 40)["cpu_seconds"]) > 1.0


def test_counted_training_projection_recovers_an_active_margin_cost_model():
    """Trainings generated by the active-margin model (fixed + per row outside the evaluations,
    CPU per row read by the margins and by the gradients, a share of active rows falling as a
    power of the rows): the projection recovers each term and the target's CPU; a few-row training
    of another regime (five times the evaluations) is left out of the fit."""

    def train(rows, evaluations=92, fixed=5.0, per_row=3e-4, margin=4e-6, gradient=2e-5):
        share = min(1.0, 0.5 * (rows / 10_000) ** -0.5)
        margin_rows = evaluations * rows
        gradient_rows = share * margin_rows
        inside = margin * margin_rows + gradient * gradient_rows
        cpu = fixed + per_row * rows + inside
        counts = {
            "float32": {
                "evaluations": evaluations,
                "row_evaluations": margin_rows,
                "gradient_rows": gradient_rows,
                "cpu_seconds": inside,
            }
        }
        return {
            "n_train": rows,
            "n_iter": 40,
            "params": {"max_iter": 40},
            "cpu_seconds": cpu,
            "wall_seconds": cpu / 2,
            "evaluations": {"total": counts},
        }

    builds = [_pq_build(200, 100), _pq_build(2000, 1000)]
    target = {"n_images": 50_000, "n_train": 25_000, "rows": 50_000}
    trains = [train(100, evaluations=470), train(1000), train(5000), train(10_000)]
    model = simulate_scale.project_from_runs(builds, target, trains)["train"]
    assert model["model"].startswith("active-margin")
    assert model["fitted_on_rows"] == [1000, 5000, 10_000]
    assert model["active_share_exponent"] == pytest.approx(-0.5, abs=1e-4)
    assert model["projected_active_share"] == pytest.approx(0.5 * 2.5**-0.5, abs=1e-4)
    assert model["margin_us_per_row"] == pytest.approx(4.0, abs=1e-3)
    assert model["gradient_us_per_row"] == pytest.approx(20.0, abs=1e-3)
    assert model["cpu_fixed_s"] == pytest.approx(5.0, abs=1e-3) and model["cpu_per_row_ms"] == pytest.approx(0.3)
    assert model["projected_cpu_s"] == pytest.approx(train(25_000)["cpu_seconds"], abs=0.1)
    assert model["projected_wall_s"] == pytest.approx(train(25_000)["wall_seconds"], abs=0.1)
    # without counts the same trainings fall back to fixed + per row, which misses the falling share
    plain = [{key: value for key, value in run.items() if key != "evaluations"} for run in trains[1:]]
    fallback = simulate_scale.project_from_runs(builds, target, plain)["train"]
    assert fallback["model"].startswith("fixed + per_row")
    assert fallback["projected_cpu_s"] > 1.05 * train(25_000)["cpu_seconds"]


def test_evaluation_counter_counts_every_objective_evaluation_by_precision(tmp_path, monkeypatch):
    """``_lbfgs_counts`` (the workers' preload of ``train --count-evaluations``) against the obvious
    count: every call L-BFGS-B makes of ``_Stop.fun``, with its problem's rows and precision."""
    import _lbfgs_counts

    from classify_images.classifiers import QuadraticHingeSVC
    from classify_images.classifiers import _quadratic_hinge_objective as objective

    original = objective.QuadraticHingeObjective.value_and_grad
    monkeypatch.setattr(objective.QuadraticHingeObjective, "value_and_grad", original)  # restored after the test
    _lbfgs_counts.install()
    _lbfgs_counts.install()  # once only
    monkeypatch.setenv(_lbfgs_counts.FOLDER_VARIABLE, str(tmp_path))
    seen = {"float32": [0, 0], "float64": [0, 0]}
    stop_fun = objective._Stop.fun

    def counted(self, theta):
        entry = seen["float64" if self.problem.exact else "float32"]
        entry[0] += 1
        entry[1] += self.problem.n_samples
        return stop_fun(self, theta)

    monkeypatch.setattr(objective._Stop, "fun", counted)
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 20)
    X = (rng.normal(size=(60, 8)) + y[:, None]).astype(np.float32)
    QuadraticHingeSVC(solver="features", max_iter=15, tol=1e-12).fit(X, y)
    QuadraticHingeSVC(solver="features", max_iter=5, tol=1e-12).fit(X.astype(np.float64), y)  # float64 products
    total = _lbfgs_counts.read_counts(tmp_path)["total"]
    assert seen["float32"][0] > 15 and seen["float64"][0] > 0
    for precision, (evaluations, rows) in seen.items():
        assert total[precision]["evaluations"] == evaluations
        assert total[precision]["row_evaluations"] == rows
        assert 0 < total[precision]["gradient_rows"] <= rows
        assert total[precision]["cpu_seconds"] >= 0
