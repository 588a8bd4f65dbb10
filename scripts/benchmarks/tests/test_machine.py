"""Every benchmark says where it ran (issue 27): ``_bench_utils.machine()`` names the processor
model and its instruction set, and every script calls ``announce_machine()`` (the first line
of its output) and stores the record under ``"machine"`` in the JSON it writes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import _bench_utils as U
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(
    p for pattern in ("bench_*.py", "profile_*.py", "simulate_*.py", "compare_*.py") for p in BENCHMARKS.glob(pattern)
)
#: How a script writes its results as JSON.
_WRITES_JSON = re.compile(r"write_json\(|json\.dumps\(|json\.dump\(")


def test_the_script_list_is_not_empty():
    assert len(SCRIPTS) >= 30 and BENCHMARKS / "profile_build.py" in SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_benchmark_announces_its_machine_and_stores_it(script):
    source = script.read_text(encoding="utf-8")
    assert "announce_machine()" in source, f"{script.name}: no announce_machine() call"
    if _WRITES_JSON.search(source):
        assert re.search(r"[\"']machine[\"']\]?\s*[:=]|machine\s*=", source), f"{script.name}: JSON without 'machine'"


def test_machine_names_model_instruction_set_and_numba_target():
    info = U.machine()
    assert info["model"] and info["isa"] in ("AVX-512", "AVX2", "SSE", "unknown") and info["cores"] >= 1
    assert info["numba_cpu"]  # numba is a dependency: LLVM names its target
    assert all({"internal_api", "num_threads", "architecture"} <= set(pool) for pool in info["blas"])
    json.dumps(info)  # stored in the scripts' JSON as it is


@pytest.mark.parametrize(
    ("flags", "isa"),
    [
        ({"sse2", "avx", "avx2", "avx512f", "avx512bw"}, "AVX-512"),
        ({"sse2", "avx", "avx2", "fma"}, "AVX2"),
        ({"sse2", "sse4_2", "avx"}, "SSE"),
        (set(), "unknown"),
    ],
)
def test_instruction_set_is_the_widest_vector_extension(flags, isa):
    assert U.instruction_set(flags) == isa


def test_emulation_variables_are_recorded_and_printed(monkeypatch, capsys):
    monkeypatch.setenv("NUMBA_CPU_NAME", "haswell")
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    info = U.announce_machine()
    line = capsys.readouterr().out
    assert info["numba_cpu"] == "haswell"
    assert info["emulation"] == {"NUMBA_CPU_NAME": "haswell", "OPENBLAS_CORETYPE": "Haswell"}
    assert line.startswith(f"machine: {info['model']} ({info['isa']}), {info['cores']} cores; numba target haswell")
    assert line.rstrip().endswith("emulating: NUMBA_CPU_NAME=haswell OPENBLAS_CORETYPE=Haswell")


def test_without_emulation_numba_targets_this_processor(monkeypatch):
    for name in U.EMULATION_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    import llvmlite.binding as llvm

    info = U.machine()
    assert info["emulation"] == {} and info["numba_cpu"] == llvm.get_host_cpu_name()
    assert "emulating" not in U.machine_line(info)
