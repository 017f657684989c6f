#!/usr/bin/env bash
# The main job, end to end on this machine, with nothing downloaded:
#   sample corpus (the Python docs) -> WordPiece vocab -> packed TFRecords -> masked batches.
# Usage: bash tools/quickstart.sh [WORKDIR]   (default /tmp/electra_quickstart)
set -euo pipefail
cd "$(dirname "$0")/.."
workdir=${1:-/tmp/electra_quickstart}
mkdir -p "$workdir"

echo "== 1/4 sample corpus: the standard library's documentation"
python tools/build_sample_corpus.py --output="$workdir/corpus.txt"

echo "== 2/4 WordPiece vocabulary (tf.text's BERT vocab learner)"
python tools/build_vocab.py --input="$workdir/corpus.txt" --vocab_size=4096 \
  --output="$workdir/vocab.txt"

echo "== 3/4 pre-training TFRecords (FastBertTokenizer, the original ELECTRA's packing)"
python tools/create_pretraining_data.py --input="$workdir/corpus.txt" \
  --vocab_file="$workdir/vocab.txt" --output_dir="$workdir/data" --max_seq_length=128 \
  --overwrite

echo "== 4/4 masked batches, as pre-training will read them"
python tools/inspect_data.py --data="$workdir/data" --vocab_file="$workdir/vocab.txt"

cat <<MSG

Done: corpus, vocab and data are in $workdir.
Next: pre-training (python -m electra_tf.train) is the next piece of this project and is
not in this version yet; the data above is already in the format it reads.
MSG
