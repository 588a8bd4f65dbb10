"""The parent's warm-up compiles every numba kernel a stage's workers call (classify_images/pipeline/execution/warm_up.py)."""

import subprocess
import sys

import numpy as np
import pytest
from numba.core.registry import CPUDispatcher

from classify_images.coding.codebook import learn_sparse_dictionary
from classify_images.coding.encoders import make_encoder
from classify_images.features.dsift import dequantize_descriptors
from classify_images.pipeline.execution.warm_up import (
    _LEARNER_READY,
    AsideCompilation,
    _compile_encoder,
    compile_learner,
    encoder_compiled_aside,
    learns_in_parent_with_numba,
    synthetic_image,
    warm_descriptors,
    warm_encoding,
)
from classify_images.pipeline.extraction.extractor import FeatureExtractor
from classify_images.pipeline.extraction.stages import compute_descriptors
from classify_images.pipeline.settings.config import load_config
from classify_images.pipeline.settings.dataset import file_fingerprint

from .conftest import FIXTURE_PHOTO

CODEBOOKS = {
    "kmeans": {"kind": "kmeans", "size": 8, "n_iter": 5},
    "soft": {"kind": "kmeans", "size": 8, "n_iter": 5, "assignment": "soft", "soft_beta": 10.0},
    "sparse": {"kind": "sparse", "size": 8, "n_iter": 5, "lambda": 0.15},
    "llc": {"kind": "llc", "size": 8, "n_iter": 5, "n_neighbors": 3},
    "vlad": {"kind": "vlad", "size": 4, "n_iter": 5},
    "fisher": {"kind": "fisher", "size": 4, "n_iter": 5, "pca_dims": 8},
}


def _compiled_signatures() -> dict[str, int]:
    """How many signatures every numba kernel of the package has compiled (or loaded) in this process."""
    counts = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("classify_images.") or module is None:
            continue
        for attribute, value in vars(module).items():
            if isinstance(value, CPUDispatcher):
                counts[f"{name}.{attribute}"] = len(value.signatures)
    return counts


def _extractor(codebook: dict, max_side: int) -> FeatureExtractor:
    config = load_config(
        None,
        {
            "codebook": codebook,
            "image": {"max_side": max_side},
            "sift": {"patch_sizes": [16], "step": 6},
            "pooling": {"levels": [1, 2]},
        },
    )
    sample = compute_descriptors(str(FIXTURE_PHOTO), 160, config.sift_params())["descriptors"]
    state = make_encoder(config.codebook_params(learning=True)).learn(dequantize_descriptors(sample))
    return FeatureExtractor(config, state)


def test_synthetic_image_is_textured_float32_and_seeded():
    image = synthetic_image(16)
    assert image.dtype == np.float32 and image.flags.c_contiguous and image.shape == (40, 40)
    assert 0.0 <= image.min() and image.max() <= 1.0 and image.std() > 0.05
    np.testing.assert_array_equal(image, synthetic_image(16))


@pytest.mark.filterwarnings("ignore:Fisher-vector GMM")
@pytest.mark.parametrize("name", sorted(CODEBOOKS))
def test_a_real_image_compiles_nothing_the_warm_up_did_not(name):
    extractor = _extractor(CODEBOOKS[name], max_side=200)
    warm_encoding(extractor)
    warmed = _compiled_signatures()
    assert any("_dsift_kernels" in kernel and count for kernel, count in warmed.items())
    row = extractor.pooled(str(FIXTURE_PHOTO), file_fingerprint(FIXTURE_PHOTO))
    assert row.shape == (extractor.n_features,) and np.isfinite(row).all()
    assert _compiled_signatures() == warmed


def test_warm_descriptors_covers_the_sampling_stage():
    sift = load_config("fisher").sift_params()
    warm_descriptors(sift)
    warmed = _compiled_signatures()
    compute_descriptors(str(FIXTURE_PHOTO), 300, sift)
    assert _compiled_signatures() == warmed


@pytest.mark.filterwarnings("ignore:Fisher-vector GMM")
@pytest.mark.parametrize("name", sorted(CODEBOOKS))
def test_a_synthetic_state_compiles_what_the_learnt_one_does(name):
    extractor = _extractor(CODEBOOKS[name], max_side=200)
    config = extractor.config
    _compile_encoder(config.sift_params(), config.codebook_params(), list(config.pooling.levels), config.pooling.method)
    warmed = _compiled_signatures()
    warm_encoding(extractor)
    assert _compiled_signatures() == warmed


def test_the_kernels_compiled_aside_land_in_numba_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    with encoder_compiled_aside(load_config("bof-spm")):  # the lightest set of kernels
        pass  # the block waits for the process at its end
    assert list((tmp_path / "numba").rglob("_dsift_kernels.*.nbi"))


def test_an_error_in_the_block_stops_the_process_and_propagates(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    with pytest.raises(KeyboardInterrupt):
        with encoder_compiled_aside(load_config("scspm")):
            raise KeyboardInterrupt


def test_parameters_json_cannot_hold_start_no_process_and_the_block_runs(monkeypatch):
    config = load_config(None)
    monkeypatch.setattr(type(config), "sift_params", lambda self: {"patch_sizes": [16], "odd": object()})
    started = []
    monkeypatch.setattr("subprocess.Popen", lambda *a, **k: started.append(a))
    ran = []
    with encoder_compiled_aside(config):
        ran.append(True)
    assert ran == [True] and started == []


# ------------------------------------------------- the online dictionary learner, compiled aside

ONLINE = {"kind": "sparse", "size": 8, "n_iter": 5, "lambda": 0.15, "dictionary_solver": "online"}


def test_only_the_online_dictionary_learner_is_compiled_for_the_parent():
    assert learns_in_parent_with_numba(make_encoder(load_config(None, {"codebook": ONLINE}).codebook_params()))
    for codebook in ({**ONLINE, "dictionary_solver": "spams"}, CODEBOOKS["kmeans"], CODEBOOKS["fisher"]):
        assert not learns_in_parent_with_numba(
            make_encoder(load_config(None, {"codebook": codebook}).codebook_params())
        )


def test_compile_learner_covers_a_real_dictionary():
    compile_learner(128)
    warmed = _compiled_signatures()
    assert warmed["classify_images.coding._dictionary_kernels.update_atoms"] >= 1
    sift = load_config("scspm").sift_params()
    sample = dequantize_descriptors(compute_descriptors(str(FIXTURE_PHOTO), 300, sift)["descriptors"])
    learn_sparse_dictionary(sample, 16, n_iter=4, batch_size=64, solver="online", n_threads=2)
    assert _compiled_signatures() == warmed


def test_the_compiling_process_announces_the_learner_before_the_encoder(capsys):
    config = load_config(None, {"codebook": ONLINE, "sift": {"patch_sizes": [16], "step": 6}})
    _compile_encoder(config.sift_params(), config.codebook_params(), [1, 2], "max")
    assert capsys.readouterr().out.splitlines() == [_LEARNER_READY]
    config = load_config(None, {"codebook": {**ONLINE, "dictionary_solver": "spams"}})
    _compile_encoder(config.sift_params(), config.codebook_params(), [1], "max")
    assert capsys.readouterr().out == ""


def test_wait_for_learner_returns_at_the_line_while_the_process_still_runs():
    process = subprocess.Popen(
        [sys.executable, "-c", f"print({_LEARNER_READY!r}, flush=True); import time; time.sleep(60)"],
        stdout=subprocess.PIPE,
    )
    try:
        # (the timeout guards against a hang only: the wait returns at the line, however busy the machine)
        assert AsideCompilation(process, learner_first=True).wait_for_learner(timeout=600)
        assert process.poll() is None  # the line, not the end of the process
    finally:
        process.kill()
        process.wait()


def test_wait_for_learner_returns_when_the_process_ends_silently_or_is_not_needed():
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(1)"], stdout=subprocess.PIPE)
    assert AsideCompilation(process, learner_first=True).wait_for_learner(timeout=600)  # (a hang guard only)
    process.wait()
    silent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdout=subprocess.PIPE)
    try:
        assert not AsideCompilation(silent, learner_first=True).wait_for_learner(timeout=0.5)
        assert AsideCompilation(silent, learner_first=False).wait_for_learner(timeout=0)
        assert AsideCompilation(None, learner_first=True).wait_for_learner(timeout=0)
    finally:
        silent.kill()
        silent.wait()
