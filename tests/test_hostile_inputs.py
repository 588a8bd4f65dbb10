"""Issue 26, "Hangs and memory" and "Tracebacks and misleading messages": files a user received.

Each test is one case of docs/reliability.md section 11.  Cases that used to hang run the
command in a subprocess with a timeout (a regression fails, it does not hang the suite); cases
that used to allocate gigabytes run under ``resource.setrlimit(RLIMIT_AS)``.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import stat
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from classify_images.pipeline.interfaces.cli import main

from .conftest import write_config_toml

DATA = Path(__file__).parent / "data"
#: Seconds a command that used to hang gets before the test fails.
HANG_TIMEOUT = 600  # a hang guard only: a loaded machine runs these far slower than an idle one


def _cli(*argv: str, timeout: float = HANG_TIMEOUT, memory: int | None = None, cwd=None) -> subprocess.CompletedProcess:
    """``classify-images argv`` in a fresh process (at most ``memory`` bytes of address space)."""

    def limit() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    code = "import sys; from classify_images.pipeline.interfaces.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=timeout, preexec_fn=limit, cwd=cwd
    )


def _one_line_exit_2(result: subprocess.CompletedProcess, *needles: str) -> str:
    err = result.stderr.strip()
    assert result.returncode == 2, (result.returncode, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    line = [entry for entry in err.splitlines() if ": error: " in entry]
    assert len(line) == 1, err
    for needle in needles:
        assert needle in line[0], line[0]
    return line[0]


def _one_line_error(capsys, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    lines = err.splitlines()  # (the steps done before the error are logged on lines of their own)
    assert [line for line in lines if ": error: " in line] == lines[-1:], err
    err = lines[-1]
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A small dataset, its feature set and a linear model (copied before any change)."""
    root = tmp_path_factory.mktemp("hostile")
    for name in ("china", "digit_1", "flower"):
        shutil.copytree(DATA / "images" / name, root / "data" / name)
    config = write_config_toml(root / "small.toml")
    assert (
        main(
            [
                "build-features",
                str(root / "data"),
                "--out",
                str(root / "fs"),
                "--config",
                str(config),
                "--cache-dir",
                str(root / "cache"),
                "-q",
            ]
        )
        == 0
    )
    assert main(["train", str(root / "fs"), "--classifier", "linear", "--out", str(root / "model.npz")]) == 0
    return root


@pytest.fixture
def copy(built, tmp_path) -> Path:
    """A private copy of the dataset, the feature set (whose manifest names the copied dataset) and the model."""
    for name in ("data", "fs", "cache"):
        shutil.copytree(built / name, tmp_path / name, symlinks=True)
    shutil.copy(built / "model.npz", tmp_path / "model.npz")
    shutil.copy(built / "small.toml", tmp_path / "small.toml")
    manifest = json.loads((tmp_path / "fs" / "manifest.json").read_text())
    manifest["dataset"]["root"] = str(tmp_path / "data")
    (tmp_path / "fs" / "manifest.json").write_text(json.dumps(manifest))
    return tmp_path


# --- hangs: FIFOs -----------------------------------------------------------------------------


def test_fifo_as_x_train_is_one_line_and_does_not_hang(copy):
    (copy / "fs" / "X_train.npy").unlink()
    os.mkfifo(copy / "fs" / "X_train.npy")
    result = _cli("train", str(copy / "fs"), "--classifier", "linear", "--out", str(copy / "m.npz"))
    _one_line_exit_2(result, "X_train.npy", "named pipe (FIFO)")


def test_fifo_as_a_test_image_does_not_hang_the_reports_thumbnails(copy):
    manifest = json.loads((copy / "fs" / "manifest.json").read_text())
    for relative in manifest["split"]["test"]:  # every test image (the misclassified ones get thumbnails)
        (copy / "data" / relative).unlink()
        os.mkfifo(copy / "data" / relative)
    result = _cli("evaluate", str(copy / "fs"), str(copy / "model.npz"), "--out", str(copy / "ev"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert (copy / "ev" / "report.html").is_file()


def test_fifo_planted_in_the_stage_cache_is_a_miss_not_a_hang(copy):
    for name in ("output.npz", "func_code.py", "metadata.json"):  # every entry and joblib's own files
        for path in list((copy / "cache").rglob(name)):
            path.unlink()
            os.mkfifo(path)
    result = _cli(
        "build-features",
        str(copy / "data"),
        "--out",
        str(copy / "fs2"),
        "--config",
        str(copy / "small.toml"),
        "--cache-dir",
        str(copy / "cache"),
        "-q",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (copy / "fs2" / "manifest.json").is_file()


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_dataset_image_that_is_a_fifo_or_a_device_is_skipped_and_listed(copy, kind):
    planted = copy / "data" / "flower" / "planted.jpg"
    if kind == "fifo":
        os.mkfifo(planted)
    else:
        planted.symlink_to("/dev/zero")
    result = _cli(
        "build-features",
        str(copy / "data"),
        "--out",
        str(copy / "fs2"),
        "--config",
        str(copy / "small.toml"),
        "--cache-dir",
        str(copy / "cache"),
        "-q",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    skipped = json.loads((copy / "fs2" / "manifest.json").read_text())["skipped"]
    reasons = {entry["path"]: entry["reason"] for entry in skipped}
    assert "flower/planted.jpg" in reasons, skipped
    assert ("named pipe (FIFO)" if kind == "fifo" else "character device") in reasons["flower/planted.jpg"]


def test_open_regular_file_refuses_fifos_and_devices_without_waiting(tmp_path):
    from classify_images.files import NotRegularFileError, open_regular_file, read_regular_bytes

    os.mkfifo(tmp_path / "pipe")
    signal.alarm(20)  # a regression fails here instead of hanging
    try:
        with pytest.raises(NotRegularFileError, match=r"named pipe \(FIFO\)"):
            open_regular_file(tmp_path / "pipe")
        with pytest.raises(NotRegularFileError, match="character device"):
            read_regular_bytes("/dev/zero")
        with pytest.raises(NotRegularFileError, match="folder"):
            open_regular_file(tmp_path)
    finally:
        signal.alarm(0)
    (tmp_path / "f").write_bytes(b"abc")
    assert read_regular_bytes(tmp_path / "f", max_bytes=3) == b"abc"


# --- memory: pixels ----------------------------------------------------------------------------


def _png_announcing(width: int, height: int) -> bytes:
    import zlib

    import cv2

    data = bytearray(cv2.imencode(".png", np.zeros((20, 20, 3), np.uint8))[1].tobytes())
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(data[12:29]))
    return bytes(data)


def test_report_thumbnails_decode_through_the_pixel_guard(tmp_path, monkeypatch):
    import cv2

    from classify_images.pipeline.interfaces import report_html

    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(_png_announcing(30000, 30000))
    decoded = []
    monkeypatch.setattr(cv2, "imread", lambda *a, **k: decoded.append(a) or None)
    real_imdecode = cv2.imdecode
    monkeypatch.setattr(cv2, "imdecode", lambda *a, **k: decoded.append(a) or real_imdecode(*a, **k))
    assert report_html.thumbnail_data_uri(str(bomb)) is None
    assert decoded == []  # refused from the header, never handed to OpenCV
    good = tmp_path / "good.png"
    good.write_bytes(cv2.imencode(".png", np.full((40, 60, 3), 128, np.uint8))[1].tobytes())
    assert report_html.thumbnail_data_uri(str(good)).startswith("data:image/jpeg;base64,")


def test_a_model_raising_max_pixels_is_capped_with_one_warning(built, tmp_path):
    from classify_images.features.preprocess import DEFAULT_MAX_PIXELS
    from classify_images.pipeline.training.model_file import load_model_parts

    crafted = _rewrite_meta(
        built / "model.npz",
        tmp_path / "m.npz",
        lambda meta: meta["extractor"]["config"].setdefault("image", {}).update(max_pixels=10**12),
    )
    with pytest.warns(UserWarning, match="raises image.max_pixels to 1000000000000; the default") as record:
        _, extractor, _ = load_model_parts(crafted)
    assert len(record) == 1 and "\n" not in str(record[0].message)
    assert extractor.config.image.max_pixels == DEFAULT_MAX_PIXELS


def test_opencv_pixel_limit_is_set_before_opencv_decodes():
    code = (
        "import os; import classify_images.features.preprocess as p; "
        "print(os.environ['OPENCV_IO_MAX_IMAGE_PIXELS'], p.OPENCV_MAX_PIXELS)"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENCV_IO_MAX_IMAGE_PIXELS"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=1800
    ).stdout.split()
    assert out[0] == out[1] == str(2**30)


def test_max_pixels_above_opencvs_ceiling_is_refused_in_a_config(tmp_path, capsys):
    from classify_images.pipeline.settings.config import ConfigError, validate_config

    with pytest.raises(ConfigError, match="max_pixels"):
        validate_config({"image": {"max_pixels": 2**30 + 1}})


# --- memory: array headers ---------------------------------------------------------------------


def _rewrite_meta(source: Path, out: Path, change) -> Path:
    """A copy of a model file whose JSON header ``change(meta)`` edited (arrays kept)."""
    with np.load(source, allow_pickle=False) as archive:
        arrays = {key: archive[key] for key in archive.files}
    meta = json.loads(str(arrays.pop("__meta__")[()]))
    change(meta)
    with open(out, "wb") as handle:
        np.savez(handle, __meta__=np.array(json.dumps(meta)), **arrays)
    return out


def _model_announcing(source: Path, out: Path, n_bytes: int = 4_000_000_000) -> Path:
    """The model file with ``model/coef_`` replaced by a 64-byte member whose ``.npy`` header and zip
    directory (local header and central directory) both announce ``n_bytes``."""
    import io

    with zipfile.ZipFile(source) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (n_bytes // 8,)})
    payload = header.getvalue() + bytes(64)
    announced = len(header.getvalue()) + n_bytes
    name = "model/coef_.npy"
    members[name] = payload
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for key, data in members.items():
            archive.writestr(key, data)
    data = bytearray(buffer.getvalue())
    encoded = name.encode()
    local = data.find(b"PK\x03\x04")
    while local >= 0:  # local file headers: sizes at 18 (compressed) and 22 (uncompressed)
        if data[local + 30 : local + 30 + len(encoded)] == encoded:
            data[local + 18 : local + 26] = struct.pack("<II", announced, announced)
        local = data.find(b"PK\x03\x04", local + 4)
    central = data.find(b"PK\x01\x02")
    while central >= 0:  # central directory: sizes at 20 and 24
        if data[central + 46 : central + 46 + len(encoded)] == encoded:
            data[central + 20 : central + 28] = struct.pack("<II", announced, announced)
        central = data.find(b"PK\x01\x02", central + 4)
    out.write_bytes(bytes(data))
    return out


def test_model_announcing_gigabytes_in_64_bytes_is_one_line_before_allocating(built, tmp_path):
    crafted = _model_announcing(built / "model.npz", tmp_path / "crafted.npz")
    assert crafted.stat().st_size < 100_000
    image = next((built / "data" / "china").iterdir())
    result = _cli("predict", str(crafted), str(image), memory=3 * 2**30)
    _one_line_exit_2(result, "crafted.npz", "model/coef_.npy", "GiB")


def test_feature_set_array_whose_header_announces_more_than_it_holds_is_one_line(copy, capsys):
    path = copy / "fs" / "y_train.npy"
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, {"descr": "<i8", "fortran_order": False, "shape": (10**10,)})
        handle.write(bytes(64))
    assert main(["train", str(copy / "fs"), "--classifier", "linear", "--out", str(copy / "m.npz")]) == 2
    _one_line_error(capsys, "y_train.npy", "announces", "GiB")


# --- memory: JSON ------------------------------------------------------------------------------


def test_manifest_nested_200000_levels_is_one_line(copy, capsys):
    manifest = json.loads((copy / "fs" / "manifest.json").read_text())
    text = json.dumps(manifest)[:-1] + ', "deep": ' + "[" * 200_000 + "]" * 200_000 + "}"
    (copy / "fs" / "manifest.json").write_text(text)
    assert main(["train", str(copy / "fs"), "--classifier", "linear", "--out", str(copy / "m.npz")]) == 2
    _one_line_error(capsys, "manifest.json", "200001 levels deep")


def test_model_header_nested_deeply_is_one_line(built, tmp_path, capsys):
    crafted = _rewrite_meta(built / "model.npz", tmp_path / "deep.npz", lambda meta: None)
    with np.load(crafted, allow_pickle=False) as archive:
        arrays = {key: archive[key] for key in archive.files}
    text = str(arrays.pop("__meta__")[()])
    with open(crafted, "wb") as handle:
        np.savez(handle, __meta__=np.array(text[:-1] + ', "deep": ' + "[" * 100_000 + "]" * 100_000 + "}"), **arrays)
    image = next((built / "data" / "china").iterdir())
    assert main(["predict", str(crafted), str(image)]) == 2
    _one_line_error(capsys, "deep.npz", "levels deep")


def test_json_depth_ignores_brackets_inside_strings():
    from classify_images.files import JsonBoundsError, json_depth, loads_bounded_json

    assert json_depth('{"a": [1, {"b": "[[[[\\"]]"}]}') == 3
    assert json_depth("[]") == 1 and json_depth("3") == 0
    with pytest.raises(JsonBoundsError, match="65 levels deep"):
        loads_bounded_json("[" * 65 + "]" * 65, what="x")
    with pytest.raises(JsonBoundsError, match="more than"):
        loads_bounded_json("[1, 2]", what="x", max_bytes=3)
    assert loads_bounded_json("[" * 64 + "]" * 64, what="x") == json.loads("[" * 64 + "]" * 64)


# --- workers die with their parent -------------------------------------------------------------


def _group(pgid: int) -> list[str]:
    out = subprocess.run(["ps", "-ww", "-o", "pid=,args=", "-g", str(pgid)], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.strip()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ps -g and process groups as on Linux")
def test_kill_9_of_build_features_leaves_no_worker_alive(copy):
    for folder in (copy / "data").iterdir():  # enough distinct images for the workers to be seen at work
        originals = sorted(folder.iterdir())
        for k in range(12):
            for original in originals:
                (folder / f"copy{k}-{original.name}").write_bytes(original.read_bytes() + bytes([k]))
    code = "import sys; from classify_images.pipeline.interfaces.cli import main; sys.exit(main(sys.argv[1:]))"
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            code,
            "build-features",
            str(copy / "data"),
            "--out",
            str(copy / "fs2"),
            "--config",
            str(copy / "small.toml"),
            "--cache-dir",
            str(copy / "fresh-cache"),
            "--n-jobs",
            "2",
            "-q",
        ],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 600  # a hang guard only
        while time.monotonic() < deadline and not any("LokyProcess" in line for line in _group(process.pid)):
            assert process.poll() is None, "the build ended before its workers were seen"
            time.sleep(0.2)
        assert any("LokyProcess" in line for line in _group(process.pid)), "no worker started"
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        deadline = time.monotonic() + 600  # a hang guard only: the workers die with the build, however busy the machine
        while time.monotonic() < deadline and _group(process.pid):
            time.sleep(0.5)
        assert _group(process.pid) == []
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # only this test's own process group
        except ProcessLookupError:
            pass


# --- tracebacks: size parameters, --param, --config --------------------------------------------


@pytest.mark.parametrize("classifier, param", [("pmsvm", "lut_bins=10**15"), ("mbkl", "n_stumps=10**15")])
def test_size_parameters_beyond_memory_are_one_line(built, tmp_path, capsys, classifier, param):
    value = param.replace("10**15", str(10**15))
    assert (
        main(
            ["train", str(built / "fs"), "--classifier", classifier, "--param", value, "--out", str(tmp_path / "m.npz")]
        )
        == 2
    )
    _one_line_error(capsys, value.split("=")[0], "GiB", "memory")


@pytest.mark.parametrize("value", ["-" * 100_000 + "1", "+" * 5_000 + "1", "+" * 900 + "1"])
def test_long_or_deep_param_values_are_one_line(built, tmp_path, capsys, value):
    assert (
        main(
            [
                "train",
                str(built / "fs"),
                "--classifier",
                "linear",
                "--param",
                f"C={value}",
                "--out",
                str(tmp_path / "m.npz"),
            ]
        )
        == 2
    )
    _one_line_error(capsys, "C")


def test_config_dev_zero_is_one_line_without_reading_it(built, tmp_path):
    result = _cli(
        "build-features",
        str(built / "data"),
        "--out",
        str(tmp_path / "fs"),
        "--config",
        "/dev/zero",
        "--cache-dir",
        str(tmp_path / "cache"),
        timeout=1800,  # a hang guard only (a loaded machine is far slower)
        memory=3 * 2**30,
    )
    _one_line_exit_2(result, "/dev/zero", "character device")


def test_config_file_larger_than_the_bound_is_one_line(built, tmp_path, capsys):
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * (2**20) + "\n")
    assert main(["build-features", str(built / "data"), "--out", str(tmp_path / "fs"), "--config", str(big)]) == 2
    _one_line_error(capsys, "big.toml", "MiB")


# --- tracebacks: predict on what is not an image file -----------------------------------------


def test_predict_on_a_huge_sparse_jpg_is_skipped_without_reading_it(built, tmp_path, capsys):
    sparse = tmp_path / "huge.jpg"
    with open(sparse, "wb") as handle:
        handle.truncate(2 * 10**9)
    image = next((built / "data" / "china").iterdir())
    assert main(["predict", str(built / "model.npz"), str(sparse), str(image)]) == 1  # 1: an input skipped
    err = capsys.readouterr().err
    assert "skipped" in err and "huge.jpg" in err and "file too large" in err, err


@pytest.mark.parametrize("kind", ["dev_zero", "fifo"])
def test_predict_names_what_a_path_is_and_why_it_is_skipped(built, tmp_path, kind):
    if kind == "fifo":
        path = tmp_path / "pipe.jpg"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    image = next((built / "data" / "china").iterdir())
    result = _cli("predict", str(built / "model.npz"), str(path), str(image))
    assert result.returncode == 1, result.stderr[-2000:]  # 1: an input skipped, the other classified
    assert ("named pipe (FIFO)" if kind == "fifo" else "character device") in result.stderr, result.stderr
    assert "does not exist" not in result.stderr


def test_class_names_that_are_script_tags_are_one_line_in_evaluate(copy, capsys):
    manifest = json.loads((copy / "fs" / "manifest.json").read_text())
    manifest["class_names"] = sorted(f"<script>alert({k})</script>" for k in range(len(manifest["class_names"])))
    (copy / "fs" / "manifest.json").write_text(json.dumps(manifest))
    assert main(["evaluate", str(copy / "fs"), str(copy / "model.npz"), "--out", str(copy / "ev")]) == 2
    _one_line_error(capsys, "classes", "china", "<script>alert(0)</script>")


def test_thread_counts_read_from_a_model_are_capped_to_the_cores(built, tmp_path):
    from classify_images.pipeline.training.model_file import load_model

    assert main(["train", str(built / "fs"), "--classifier", "pmsvm", "--out", str(tmp_path / "pmsvm.npz")]) == 0
    crafted = _rewrite_meta(
        tmp_path / "pmsvm.npz", tmp_path / "jobs.npz", lambda meta: meta["params"].update(n_jobs=100_000)
    )
    estimator, meta = load_model(crafted)
    assert meta["params"]["n_jobs"] == 100_000
    assert estimator.n_jobs == (os.cpu_count() or 1)


@pytest.mark.parametrize("how", ["world_writable", "other_user"])
def test_cache_sub_folders_are_checked_too(built, tmp_path, capsys, how):
    cache = tmp_path / "cache"
    shutil.copytree(built / "cache", cache)
    sub = cache / "joblib" / "classify_images"
    assert sub.is_dir()
    if how == "world_writable":
        sub.chmod(0o777)
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a folder to another user needs root")
        os.chown(sub, 65534, 65534)
    assert (
        main(
            [
                "build-features",
                str(built / "data"),
                "--out",
                str(tmp_path / "fs"),
                "--config",
                str(built / "small.toml"),
                "--cache-dir",
                str(cache),
                "-q",
            ]
        )
        == 2
    )
    _one_line_error(capsys, "classify_images", "writable by other users" if how == "world_writable" else "another user")


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_predict_output_keeps_one_record_per_image_whatever_the_file_name(built, tmp_path, capsys, fmt):
    import csv
    import io

    image = next((built / "data" / "china").iterdir())
    odd = tmp_path / "a\nb.jpg"
    shutil.copy(image, odd)
    assert main(["predict", str(built / "model.npz"), str(odd), "--format", fmt]) == 0
    out = capsys.readouterr().out
    if fmt == "table":
        lines = [line for line in out.splitlines() if not line.startswith("#")]
        assert len(lines) == 1 and "a\\nb.jpg" in lines[0], out
    elif fmt == "csv":
        rows = list(csv.reader(io.StringIO(out)))
        assert {row[0] for row in rows[1:]} == {str(odd)}, rows
    else:
        assert [entry["path"] for entry in json.loads(out)["predictions"]] == [str(odd)]


def _deny(monkeypatch, name: str) -> None:
    """``os.open`` of a file called ``name`` fails with EACCES (as for another user's 0600 file; the
    tests may run as root, whom permissions do not stop)."""
    real_open = os.open

    def denying(path, flags, *args, **kwargs):
        if os.fspath(path).endswith(name):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", denying)


def test_unreadable_x_train_says_permission_denied_not_corrupt(built, tmp_path, capsys, monkeypatch):
    _deny(monkeypatch, "X_train.npy")
    assert main(["train", str(built / "fs"), "--classifier", "linear", "--out", str(tmp_path / "m.npz")]) == 2
    err = _one_line_error(capsys, "permission denied", "X_train.npy")
    assert "corrupt" not in err and "rebuild" not in err


def test_unreadable_model_says_permission_denied_not_tampered(built, capsys, monkeypatch):
    _deny(monkeypatch, "model.npz")
    image = next((built / "data" / "china").iterdir())
    assert main(["predict", str(built / "model.npz"), str(image)]) == 2
    err = _one_line_error(capsys, "permission denied", "model.npz")
    assert "tampered" not in err and "re-train" not in err


def test_stat_module_is_what_describes_file_kinds():
    from classify_images.files import describe_file_kind

    assert describe_file_kind(stat.S_IFIFO) == "a named pipe (FIFO)"
    assert describe_file_kind(stat.S_IFCHR) == "a character device"
    assert describe_file_kind(stat.S_IFSOCK) == "a socket"
