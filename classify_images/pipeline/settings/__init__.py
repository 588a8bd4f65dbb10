"""What to compute: pipeline configs read from TOML and turned once into the pipeline's objects, command defaults, train/test protocols, the dataset and its split."""
