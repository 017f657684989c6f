"""Pre-training: strategies, optimizer, metrics, checkpoints and the loop."""
