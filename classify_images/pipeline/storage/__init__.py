"""What is written to disk: atomic writes, what a command may write over, the stage cache, feature sets and their row layouts, provenance."""
