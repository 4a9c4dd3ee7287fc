"""Training: dataset builders, the loop (``run_train``), checkpoints and run artifacts."""
