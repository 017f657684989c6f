"""Serving: SavedModels for TF Serving (raw text or token ids in; checkpoint conversion
is electra_tf.convert)."""
