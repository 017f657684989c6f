#!/usr/bin/env bash
# The main job, end to end on this machine, with nothing downloaded:
#   sample corpus (the Python docs) -> WordPiece vocab -> packed TFRecords -> pre-train a
#   tiny ELECTRA on the CPU -> evaluation metrics on held-out documents + TensorBoard logs.
# Usage: bash tools/quickstart.sh [WORKDIR] [STEPS]   (default /tmp/electra_quickstart 600)
set -euo pipefail
cd "$(dirname "$0")/.."
workdir=${1:-/tmp/electra_quickstart}
steps=${2:-600}
mkdir -p "$workdir"

echo "== 1/5 sample corpus: the standard library's documentation (1 in 20 documents held out)"
python tools/build_sample_corpus.py --output="$workdir/corpus.txt" \
  --heldout_output="$workdir/heldout.txt" --overwrite

echo "== 2/5 WordPiece vocabulary (tf.text's BERT vocab learner)"
python tools/build_vocab.py --input="$workdir/corpus.txt" --vocab_size=4096 \
  --output="$workdir/vocab.txt" --overwrite

echo "== 3/5 pre-training TFRecords (FastBertTokenizer, the original ELECTRA's packing)"
for split in corpus heldout; do
  python tools/create_pretraining_data.py --input="$workdir/$split.txt" \
    --vocab_file="$workdir/vocab.txt" --output_dir="$workdir/data_$split" \
    --max_seq_length=128 --overwrite
done

echo "== 4/5 masked batches, as pre-training reads them"
python tools/inspect_data.py --data="$workdir/data_corpus" --vocab_file="$workdir/vocab.txt" \
  --config=configs/electra.py:tiny --num_examples=1

echo "== 5/5 pre-train ELECTRA-tiny for $steps steps (re-running resumes from the checkpoint)"
python -m electra_tf.train --config=configs/electra.py:tiny --workdir="$workdir/run" \
  --config.data.train_files="$workdir/data_corpus" \
  --config.data.eval_files="$workdir/data_heldout" \
  --config.data.vocab_file="$workdir/vocab.txt" \
  --config.train.steps="$steps" --config.train.eval_every="$steps"
python tools/plot_run.py --workdir="$workdir/run" --output="$workdir/curves.png"

cat <<MSG

Done. The evaluation above is on held-out documents: disc_auc above 0.5 means the
discriminator tells replaced tokens from original ones. A tiny model learns little: about
0.55 after 600 steps, and no more after 3,000 (its generator improves too, so the
replacements get harder). For real results pre-train small or larger on your own corpus.
  Curves:       $workdir/curves.png (tools/plot_run.py; several --workdir compare runs)
  TensorBoard:  tensorboard --logdir=$workdir/run   (Text: "predictions", what the
                model does to held-out sequences; HParams: the config and the metrics)
  Look at it:   python tools/show_predictions.py --workdir=$workdir/run --text="Your sentence."
  Your corpus:  the same steps with --input='your/*.txt' (or --tfds=NAME) and a bigger
                --vocab_size (30522 as in the paper), then
                python -m electra_tf.train --config=configs/electra.py:small --workdir=DIR \\
                  --config.data.train_files=DATA_DIR --config.data.vocab_file=vocab.txt
  Serve it:     python tools/export_savedmodel.py --workdir=$workdir/run --output=/tmp/models/electra/1
                (then TF Serving: see docs/serving.md)
  On a TPU:     add --config.runtime.strategy=tpu --config.runtime.tpu=NAME (data and
                workdir on gs://); base and large: configs/electra.py:base|large
MSG
