r"""Tokenizes a corpus and packs it into pre-training TFRecords, as the original ELECTRA.

  python tools/create_pretraining_data.py --input='corpus/*.txt' --vocab_file=vocab.txt \
      --output_dir=data/ --max_seq_length=128 [--num_shards=N] [--seed=0]
  python tools/create_pretraining_data.py --tfds=NAME[:split] --tfds_data_dir=DIR ...
  python tools/create_pretraining_data.py ... --beam_pipeline_options=\
      "runner=DirectRunner,direct_num_workers=0,direct_running_mode=multi_processing"

Writes `pretrain_data.tfrecord-XXXXX-of-YYYYY` shards (one per ~64 MB of text unless
--num_shards says otherwise) and, last, `manifest.json`: example count, max_seq_length,
the vocab's hash, the tokenizer settings and the shard list. Deterministic for a --seed.

With --beam_pipeline_options the same job runs as an Apache Beam pipeline
(electra_tf/data/beam.py) on the runner those options name: the same examples, in shards
of at most ~128 MB (--num_shards does not apply).
"""

from electra_tf import cli
if __name__ == "__main__":  # run as a tool, not imported (tests import some tools)
    cli.prepare_process()  # before TensorFlow is imported: TF reads its settings then

from absl import flags

from electra_tf import config_check
from electra_tf import errors
from electra_tf import flags as common_flags

common_flags.define_corpus_flags()
_VOCAB_FILE = flags.DEFINE_string("vocab_file", None, "BERT-format vocab.txt.",
                                  required=True)
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Directory for shards and manifest.",
                                  required=True)
_MAX_SEQ_LENGTH = flags.DEFINE_integer("max_seq_length", 128, "Tokens per example.")
flags.register_validator(
    "max_seq_length", lambda n: n >= config_check.MIN_SEQ_LENGTH,
    f"must be at least {config_check.MIN_SEQ_LENGTH}, room for [CLS] A [SEP] B [SEP] with "
    "a token in each segment")
_NUM_SHARDS = flags.DEFINE_integer("num_shards", None,
                                   "Number of shards (default: one per 64 MB of text).",
                                   lower_bound=1)
_LOWER_CASE = flags.DEFINE_boolean("lower_case", True, "Lower-case and strip accents; "
                                   "must match how the vocab was made.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the packing's random choices.")
_OVERWRITE = flags.DEFINE_boolean("overwrite", False, "Replace a dataset in --output_dir.")
_BEAM_OPTIONS = flags.DEFINE_string(
    "beam_pipeline_options", None, "Run as an Apache Beam pipeline with these options, "
    "comma-separated key=value (TFDS's spelling), e.g. 'runner=DirectRunner,"
    "direct_num_workers=0,direct_running_mode=multi_processing' (all cores), or "
    "Dataflow/Flink/Spark options.")


def main(argv):
    del argv
    common_flags.check_output_path("output_dir", _OUTPUT_DIR.value, directory=True)
    # TensorFlow loads here, once the flags are checked.
    from electra_tf.data import writer  # pylint: disable=g-import-not-at-top
    from electra_tf.text import tokenizer  # pylint: disable=g-import-not-at-top
    vocab = tokenizer.Vocab.load(_VOCAB_FILE.value)  # before reading any text
    source = common_flags.open_corpus_from_flags()
    settings = dict(max_seq_length=_MAX_SEQ_LENGTH.value, lower_case=_LOWER_CASE.value,
                    seed=_SEED.value, overwrite=_OVERWRITE.value)
    if _BEAM_OPTIONS.value:
        if _NUM_SHARDS.value:
            raise errors.UserError("--num_shards: a Beam run sizes its shards itself "
                                   "(~128 MB each); leave it out")
        from electra_tf.data import beam  # pylint: disable=g-import-not-at-top
        result = beam.write_pretraining_data(
            source, vocab, _OUTPUT_DIR.value, beam.pipeline_options(_BEAM_OPTIONS.value),
            **settings)
    else:
        num_shards = _NUM_SHARDS.value or writer.default_num_shards(source.size_estimate)
        result = writer.write_pretraining_data(source, vocab, _OUTPUT_DIR.value,
                                               num_shards=num_shards, **settings)
    for note in source.stats.problems():
        print(f"warning: {note}")
    mb = result.input_bytes / 1e6
    print(f"wrote {result.num_examples:,} examples ({result.num_tokens:,} tokens from "
          f"{result.num_documents:,} documents) in {result.num_shards} shard(s) to "
          f"{_OUTPUT_DIR.value}: {mb:.1f} MB in {result.seconds:.1f}s "
          f"({mb / max(result.seconds, 1e-9):.1f} MB/s)")
    if result.truncated_tokens:
        share = 100 * result.truncated_tokens / (result.num_tokens + result.truncated_tokens)
        print(f"note: {result.truncated_tokens:,} tokens ({share:.1f}% of the text) were cut "
              f"from {result.truncated_examples:,} examples whose sentences overran "
              f"max_seq_length={_MAX_SEQ_LENGTH.value}, as the original ELECTRA's packing "
              "does (recorded in the manifest: truncated_tokens)")
    print(f"manifest: {result.manifest_path}")


if __name__ == "__main__":
    cli.app_run(main)
