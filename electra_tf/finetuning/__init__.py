"""Fine-tuning on downstream tasks: the loop, the task interface, and one package per
task family (glue/, squad/)."""
