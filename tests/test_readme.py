"""The README's "From Python" example runs as written, from the repository root."""

from __future__ import annotations

import re

from .conftest import REPO


def test_readme_from_python_example_runs(tmp_path, monkeypatch, capsys):
    readme = (REPO / "README.md").read_text()
    section = readme.split("## From Python", 1)[1]
    example = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("CLASSIFY_IMAGES_CACHE", str(tmp_path / "cache"))
    namespace: dict = {}
    exec(compile(example, "README.md (From Python)", "exec"), namespace)
    scores = namespace["search"].best_score_
    assert 0.5 < scores <= 1.0  # four well-separated classes: far above chance (0.25)
    assert set(namespace["search"].predict(namespace["paths"][:4])) <= set(namespace["labels"])
    assert "[" in capsys.readouterr().out  # the cross-validation scores were printed
