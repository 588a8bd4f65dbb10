"""Count where the pipeline reads ``codebook.kind`` and where ``C`` travels, command line to model file.

Runs ``classify-images build-features`` (the fixture images, ``tests/data/small.toml``, a cold stage
cache, one process) and ``classify-images train --classifier linear --param C=5`` in this process,
with two probes:

* **reads of ``codebook.kind``**: a *stop* is a product function that reads the kind out of the
  configuration — the ``kind`` attribute of a ``CodebookConfig``, the plain ``[codebook]`` table
  (``PipelineConfig.codebook_params()``), or the registry turning that table or kind into an encoder
  (``make_encoder``, ``encoder_class``).  Each read is attributed to the nearest product frame
  (dataclass-generated code is skipped).
* **passes of ``C``**: a *stop* is a product function entered with the value among its arguments —
  in a parameter dict (key ``"C"``), an estimator whose ``C`` is the value, or a dict/dataclass
  holding such a dict (the training result, the model header).  Found with ``sys.setprofile``.

For each probe it prints the walk (stops in the order first reached, with their module) and:
``stops`` (distinct functions), ``modules`` (distinct modules), ``returns`` (times the walk, in
the order of the events, comes back into a module it had left), and for the kind the re-entries
into ``settings/config.py``.  Run it on two trees to compare them (the same fixture, the same
commands)::

    PYTHONPATH=/path/to/tree python scripts/studies/config_walk.py [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import pkgutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURE_IMAGES = REPO / "tests" / "data" / "images"
SMALL_CONFIG = REPO / "tests" / "data" / "small.toml"
C_VALUE = 5.0


def _import_everything():
    import classify_images

    for module in pkgutil.walk_packages(classify_images.__path__, "classify_images."):
        if ".tests" in module.name:
            continue
        try:
            importlib.import_module(module.name)
        except ImportError:  # optional extras (dask, spams)
            pass
    return classify_images


def _product_frame(frame, package_root: str):
    """The nearest frame (from ``frame`` up) whose code lives in the product package, not generated."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(package_root) and not filename.endswith("config_walk.py"):
            return frame
        frame = frame.f_back
    return None


def _where(frame, package_root: str) -> tuple[str, str]:
    module = os.path.relpath(frame.f_code.co_filename, package_root)
    function = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
    return module, function.split(".<locals>")[0]  # a comprehension or closure counts as its function


class Probe:
    def __init__(self, package_root: str) -> None:
        self.package_root = package_root
        self.events: list[tuple[str, str]] = []
        self.active = False
        self.inside = False  # a probed registry call is running: its own reads are its caller's

    def record(self, frame) -> None:
        if not self.active or self.inside:
            return
        found = _product_frame(frame, self.package_root)
        if found is not None:
            self.events.append(_where(found, self.package_root))
            if os.environ.get("CONFIG_WALK_DEBUG") and found is not frame:
                print("via", frame.f_code.co_filename, frame.f_code.co_name, "->", self.events[-1])

    def summary(self, walk_of: str) -> dict:
        stops: dict[tuple[str, str], int] = {}
        for event in self.events:
            stops[event] = stops.get(event, 0) + 1
        modules = list(dict.fromkeys(module for module, _ in self.events))
        returns, seen, previous = 0, set(), None
        config_reentries = 0
        for module, _ in self.events:
            if module != previous:
                if module in seen:
                    returns += 1
                    if module.endswith("settings/config.py"):
                        config_reentries += 1
                seen.add(module)
                previous = module
        return {
            "value": walk_of,
            "stops": len(stops),
            "modules": len(modules),
            "returns": returns,
            "config_py_reentries": config_reentries,
            "events": len(self.events),
            "walk": [{"module": m, "function": f, "times": n} for (m, f), n in stops.items()],
        }


def _install_kind_probe(probe: Probe):
    """Patch the readers of the kind; returns the function that undoes every patch."""
    from classify_images.coding import encoders
    from classify_images.pipeline.settings import config as config_module

    codebook_cls = config_module.CodebookConfig
    plain_getattribute = object.__getattribute__

    def getattribute(self, name):
        if name == "kind" and not sys._getframe(1).f_code.co_filename.endswith("config_walk.py"):
            probe.record(sys._getframe(1))
        return plain_getattribute(self, name)

    codebook_cls.__getattribute__ = getattribute
    undo = [lambda: delattr(codebook_cls, "__getattribute__")]

    def wrap(function):
        def wrapped(*args, **kwargs):
            probe.record(sys._getframe(1))
            outer, probe.inside = probe.inside, True
            try:
                return function(*args, **kwargs)
            finally:
                probe.inside = outer

        wrapped.__wrapped__ = function
        return wrapped

    # codebook_params is a method (patched on the class); the registry functions are bound by name in
    # many modules: patch every binding.
    pipeline_cls = config_module.PipelineConfig
    plain_codebook_params = pipeline_cls.codebook_params
    pipeline_cls.codebook_params = wrap(plain_codebook_params)
    undo.append(lambda: setattr(pipeline_cls, "codebook_params", plain_codebook_params))
    originals = [(encoders.make_encoder, wrap(encoders.make_encoder))]
    originals.append((encoders.encoder_class, wrap(encoders.encoder_class)))
    for name, module in list(sys.modules.items()):
        if not name.startswith("classify_images") or module is None:
            continue
        for attribute, value in list(vars(module).items()):
            for original, wrapped in originals:
                if value is original:
                    setattr(module, attribute, wrapped)
                    undo.append(lambda m=module, a=attribute, o=original: setattr(m, a, o))

    def undo_all() -> None:
        for step in reversed(undo):
            step()

    return undo_all


def _carries_c(value, depth: int = 0) -> bool:
    if depth > 2:
        return False
    if isinstance(value, dict):
        if value.get("C") == C_VALUE:
            return True
        return any(_carries_c(v, depth + 1) for v in value.values() if isinstance(v, (dict, list)) or _is_holder(v))
    if isinstance(value, (list, tuple)):
        return any(_carries_c(v, depth + 1) for v in value[:8])
    if _is_holder(value):
        if getattr(value, "C", None) == C_VALUE and hasattr(value, "get_params"):
            return True
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return any(_carries_c(getattr(value, f.name, None), depth + 1) for f in dataclasses.fields(value))
    return False


def _is_holder(value) -> bool:
    return hasattr(value, "get_params") or (dataclasses.is_dataclass(value) and not isinstance(value, type))


def _install_c_probe(probe: Probe):
    root = probe.package_root

    def profile(frame, event, arg):
        if event != "call" or not probe.active:
            return
        code = frame.f_code
        if not code.co_filename.startswith(root) or code.co_name.startswith("<"):
            return
        n_args = code.co_argcount + code.co_kwonlyargcount
        names = list(code.co_varnames[:n_args])
        if code.co_flags & 0x04:  # *args
            names.append(code.co_varnames[n_args])
            n_args += 1
        if code.co_flags & 0x08:  # **kwargs
            names.append(code.co_varnames[n_args])
        local = frame.f_locals
        for name in names:
            if name == "self":
                continue
            if _carries_c(local.get(name)):
                probe.events.append(_where(frame, root))
                return

    return profile


def walk() -> list[dict]:
    """Run the two commands under both probes (module docstring); the summaries, kind first."""
    package = _import_everything()
    package_root = str(Path(package.__file__).resolve().parent) + os.sep
    print(f"tree: {package_root}")
    from classify_images.pipeline.interfaces.cli import main as cli

    kind, c = Probe(package_root), Probe(package_root)
    undo = _install_kind_probe(kind)
    profile = _install_c_probe(c)
    with tempfile.TemporaryDirectory() as tmp:
        out, model = Path(tmp) / "fs", Path(tmp) / "model.npz"
        kind.active = c.active = True
        sys.setprofile(profile)
        try:
            assert cli(["build-features", str(FIXTURE_IMAGES), "--config", str(SMALL_CONFIG), "--out", str(out),
                        "--cache-dir", str(Path(tmp) / "cache"), "-q"]) == 0  # fmt: skip
            assert cli(["train", str(out), "--classifier", "linear", "--param", f"C={C_VALUE}", "--out", str(model),
                        "-q"]) == 0  # fmt: skip
        finally:
            sys.setprofile(None)
            kind.active = c.active = False
            undo()
    return [kind.summary("codebook.kind (reads)"), c.summary("C (passes)")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write both summaries to this file")
    args = parser.parse_args(argv)
    summaries = walk()
    for summary in summaries:
        print(
            f"\n{summary['value']}: {summary['stops']} stops in {summary['modules']} modules, "
            f"{summary['returns']} returns ({summary['config_py_reentries']} into settings/config.py), "
            f"{summary['events']} events"
        )
        for stop in summary["walk"]:
            print(f"  {stop['module']:<45} {stop['function']}  ×{stop['times']}")
    if args.json:
        Path(args.json).write_text(json.dumps(summaries, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
