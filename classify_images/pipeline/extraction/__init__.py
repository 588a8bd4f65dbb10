"""Images to feature rows: the cached per-image stages, the fitted extractor, the codebook fit, channels, flips and the build of a feature set."""
