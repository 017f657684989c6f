"""Fine-tuning on downstream tasks: GLUE data and metrics, the classifier model."""
