"""What tools/benchmark.py measures, one module per mode, each returning its figures as
a dict (the tool adds the host's and prints them as one JSON line):

- `training`: training steps/s, model FLOPs and MFU, memory by stage; with
  `compare_data`, the input pipeline alone against synthetic and real steps.
- `input_pipeline`: masked batches/s from real TFRecords, and masking alone.
- `create_data`: create_pretraining_data's MB/s against the tokenizer's alone.
- `resume`: what resuming costs in the data at forged steps.

`host` probes the process and the machine (device, versions, allocator settings, resident
memory, the matmul peak); `sample` makes the cached sample corpus, vocab and TFRecords
the input modes read; `synthetic` makes batches of the pipeline's structure; `settings`
checks the tool's own numbers without TensorFlow (the tool before TF loads, each mode
again).
Importing any of them changes nothing about the process.
"""
