"""The demo (classify_images/pipeline/interfaces/demo.py): its shipped config, its commands, no import of the command line.

The demo itself (about a minute) is run by hand: ``classify-images demo --workdir DIR``.
"""

import subprocess
import sys
from pathlib import Path

from classify_images.pipeline.interfaces.demo import DEMO_CONFIG, demo_commands
from classify_images.pipeline.settings.config import load_config, validate_config

#: The demo's pipeline as it was written in Python before it shipped as configs/digits.toml.
DIGITS = {
    "dataset": {"train_per_class": 50, "test_per_class": 0, "seed": 0},
    "image": {"max_side": 64},
    "sift": {"patch_sizes": [16], "step": 4},
    "codebook": {"kind": "kmeans", "size": 128, "n_samples": 20000, "n_iter": 50},
    "pooling": {"method": "average", "levels": [1, 2]},
    "normalization": {"method": "l1"},
}


def test_shipped_digits_config():
    assert load_config(DEMO_CONFIG) == validate_config(DIGITS)


def test_demo_commands_parse_with_the_command_line(tmp_path):
    from classify_images.pipeline.interfaces.cli import build_parser

    commands = demo_commands(tmp_path, n_jobs=3, quiet=True)
    assert [argv[0] for argv in commands] == ["build-features", "train", "evaluate"]
    for argv in commands:
        build_parser().parse_args(argv)
    assert commands[0][commands[0].index("--config") + 1] == "digits" and commands[0][-1] == "-q"


def test_demo_does_not_import_the_command_line():
    code = "import sys, classify_images.pipeline.interfaces.demo; print('classify_images.pipeline.interfaces.cli' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
    )
    assert out.stdout.strip() == "False"
