"""benchmarks/profile_build.py: its dataset subset, strace parsing and table."""

import profile_build


def test_subset_links_the_first_images_of_every_class(tmp_path):
    for name in ("a", "b"):
        (tmp_path / "data" / name).mkdir(parents=True)
        for k in range(3):
            (tmp_path / "data" / name / f"{k}.jpg").write_bytes(b"x")
    out = profile_build.subset(tmp_path / "data", 2, tmp_path / "sub")
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*.jpg")) == ["a/0.jpg", "a/1.jpg", "b/0.jpg", "b/1.jpg"]
    assert (out / "a" / "0.jpg").resolve() == (tmp_path / "data" / "a" / "0.jpg").resolve()


def test_sync_calls_reads_strace_summaries_with_and_without_errors():
    summary = """% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
100.00    0.040043        4449         9           fsync
  0.00    0.000000           0         2         1 msync
------ ----------- ----------- --------- --------- ----------------
100.00    0.040043        3640        11         1 total
"""
    assert profile_build.sync_calls(summary) == {"fsync": 9, "msync": 2}


def test_table_has_one_line_per_stage_and_the_totals():
    stage = {
        "wall_s": 1.0,
        "cpu_s": 2.0,
        "parent_cpu_s": 0.5,
        "workers_cpu_s": 1.5,
        "kernel_cpu_s": 1.2,
        "overhead_cpu_s": 0.8,
        "overhead_percent": 40,
    }
    report = {
        "label": "x",
        "images": 3,
        "train": 2,
        "dimensions": 8,
        "wall_s": 5.0,
        "load_average": [1, 1, 1],
        "stages": {
            name: {**stage, "compile_aside_cpu_s": 0.5, "descriptors_aside_cpu_s": 0.7} for name in profile_build.STAGES
        },
        "kernel_cpu_ms_per_image": {"decode": 1.0},
        "numba": {"compiled_and_saved": 4, "loaded": 2, "cache_entries": 5},
        "cache_bytes": {"check_image": 2**20},
        "feature_set_bytes": 2**21,
        "sync_calls": {"fsync": 3},
    }
    text = profile_build.table(report)
    assert all(f"\n{name} " in text for name in profile_build.STAGES)
    assert "SIFT aside" in text and "0.7\n" in text
    assert "4 compiled+saved" in text and "check_image 1.0 MiB" in text and "'fsync': 3" in text
