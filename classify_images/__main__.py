"""``python -m classify_images``: the ``classify-images`` command line."""

from classify_images.pipeline.interfaces.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
