"""Ready-made pipeline configurations (TOML), one per paper setting."""
