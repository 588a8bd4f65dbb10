"""What to compute: pipeline configs read from TOML, command defaults, train/test protocols, the dataset and its split."""
