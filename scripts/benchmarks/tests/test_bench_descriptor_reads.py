"""benchmarks/bench_descriptor_reads.py: the three settings on a small feature set of the fixture images."""

import bench_descriptor_reads

from tests.conftest import build_fixture_feature_set


def test_three_settings_per_repeat_and_the_fastest(tmp_path, capsys):
    features = build_fixture_feature_set(tmp_path)
    capsys.readouterr()  # (the build's own lines)
    result = bench_descriptor_reads.measure(features, n_images=4, repeats=2, scratch=tmp_path / "scratch")
    assert result["n_images"] == 4 and len(result["repeats"]) == 2
    for key in ("no_cache", "computed", "read"):
        assert result["per_image_ms"][key] == min(run[key] for run in result["repeats"]) > 0
    assert bench_descriptor_reads.main(["--feature-set", str(features), "--n-images", "2", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("machine: ") and "saved per image read" in out
