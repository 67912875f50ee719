"""Stream executors, one per file (RisingWave's layout)."""
