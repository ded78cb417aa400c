#!/usr/bin/env bash
# headcount's main job: the seeds' cost table (one head of 512 and eight heads of 64 cost the
# same; only the scores held at once grow with h), a timed run of the attention layer
# (reference against streaming), a small model trained on the CPU, sentence embeddings with
# all-MiniLM-L6-v2, its STS-B score when an STS-B file is there, and the report of what its 72
# heads do. Assumes scripts/setup.sh. Runs on a fresh clone: nothing outside the repository is
# needed (the heads report falls back to the committed public-domain text).
#
# Usage: scripts/main.sh [--quick] [--stsb FILE]
#   --quick       the same steps on smaller inputs (about a minute; the fresh-clone test runs it)
#   --stsb FILE   STS-B test file (also $HEADCOUNT_STSB); default ../shared/data/stsb/sts-test.tsv
#   $HEADCOUNT_BIN  an already-built headcount binary to use instead of building build/headcount
#   $HEADCOUNT_OUT  where the outputs go (default build/): main-report.txt, embeddings.npy,
#                   head-sweep-quick.html, heads-report.html
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
quick=0
stsb=${HEADCOUNT_STSB:-}
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    --stsb) stsb=${2:?--stsb needs a file}; shift ;;
    --stsb=*) stsb=${1#--stsb=} ;;
    *) echo "main: unknown argument $1 (usage: scripts/main.sh [--quick] [--stsb FILE])" >&2; exit 2 ;;
  esac
  shift
done
default_stsb=$(realpath -m "$root/../shared/data/stsb/sts-test.tsv")
if [[ -n $stsb && ! -f $stsb ]]; then
  echo "main: STS-B file $stsb not found" >&2
  exit 2
fi
stsb=${stsb:-$default_stsb}

if [[ -n ${HEADCOUNT_BIN:-} ]]; then
  hc=$HEADCOUNT_BIN
else
  HEADCOUNT_TARGET=headcount_cli "$root/scripts/build.sh" "$root/build"
  hc="$root/build/headcount"
fi
out=${HEADCOUNT_OUT:-$root/build}
mkdir -p "$out"
threads=$(nproc)
report="$out/main-report.txt"

steps() {
  "$hc" --version
  for heads in 1 8; do
    "$hc" cost --d-model 512 --heads "$heads" --seq-len 1000
    echo
  done
  if ((quick)); then seq_len=256; else seq_len=1000; fi
  "$hc" layer --d-model 512 --heads 8 --seq-len "$seq_len" --threads "$threads"
  echo
  # Training on the CPU: a 2-layer model learns the copy (induction) task in about a second, then a
  # quick run of one experiment of "what the split buys" (full runs: docs/what-the-split-buys.md).
  echo "training: a small model learns to copy a sequence (exact streaming attention backward):"
  "$hc" train --preset copy --threads "$threads" --quiet --json | python3 -c \
    'import json,sys; v=json.load(sys.stdin)["validation"][-1]; print("  step %d: validation accuracy %.3f, loss %.4f" % (v["step"], v["accuracy"], v["loss"]))'
  "$hc" experiment head-sweep --quick --threads "$threads" --quiet --out "$out/head-sweep-quick.html"
  echo "  head-sweep --quick page: $out/head-sweep-quick.html"
  echo

  # Sentence embeddings of the opening sentences of the committed public-domain novel.
  sentences="$out/main-sentences.txt"
  awk -v n=$((quick ? 16 : 256)) 'NF && n-- > 0' "$root/data/pride-and-prejudice.txt" > "$sentences"
  "$hc" embed --format npy --out "$out/embeddings.npy" --threads "$threads" "$sentences"
  echo "embeddings: $(wc -l < "$sentences") lines of data/pride-and-prejudice.txt -> $out/embeddings.npy"
  "$hc" similarity --threads "$threads" "A girl is styling her hair." "A girl is brushing her hair."
  echo

  if [[ -f $stsb ]]; then
    echo "all-MiniLM-L6-v2 on STS-B test ($stsb), every attention layer on headcount's streaming kernel:"
    "$hc" sts "$stsb" --threads "$threads"
    echo
  else
    echo "main: no STS-B file, skipping the STS-B score: put sts-test.tsv in $(dirname "$default_stsb")/ or pass --stsb FILE (or HEADCOUNT_STSB=FILE)"
  fi
  # The heads report runs on any clone: over ../shared/data when it is beside this checkout, else
  # over the committed public-domain text data/pride-and-prejudice.txt.
  corpus=()
  if [[ ! -d $root/../shared/data/corpus ]]; then corpus=(--corpus "$root/data/pride-and-prejudice.txt"); fi
  if ((quick)); then corpus+=(--max-sentences 200); fi
  echo "what the 72 heads do (add --ablate for the STS-B importance of each head, ~7 min, needs STS-B):"
  "$hc" heads --threads "$threads" "${corpus[@]}" --out "$out/heads-report.html"
  echo "open $out/heads-report.html in a browser"
}
# Everything printed also goes to the report file.
steps 2>&1 | tee "$report"
echo "main: report in $report"
