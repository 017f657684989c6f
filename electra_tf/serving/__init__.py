"""Serving and interchange: SavedModels for TF Serving, checkpoint conversion."""
