#!/usr/bin/env bash
# headcount's main job on the bundled default: the seeds' cost table (one head of 512 and
# eight heads of 64 cost the same; only the scores held at once grow with h), then a
# timed run of the attention layer, reference against streaming. Assumes scripts/setup.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
HEADCOUNT_TARGET=headcount_cli "$root/scripts/build.sh" "$root/build"
hc="$root/build/headcount"
for heads in 1 8; do
  "$hc" cost --d-model 512 --heads "$heads" --seq-len 1000
  echo
done
"$hc" layer --d-model 512 --heads 8 --seq-len 1000 --threads "$(nproc)"
echo
# Training on the CPU: a 2-layer model learns the copy (induction) task in about a second, then a
# quick run of one experiment of "what the split buys" (full runs: docs/what-the-split-buys.md).
echo "training: a small model learns to copy a sequence (exact streaming attention backward):"
"$hc" train --preset copy --threads "$(nproc)" --quiet --json | python3 -c \
  'import json,sys; v=json.load(sys.stdin)["validation"][-1]; print("  step %d: validation accuracy %.3f, loss %.4f" % (v["step"], v["accuracy"], v["loss"]))'
"$hc" experiment head-sweep --quick --threads "$(nproc)" --quiet --out "$root/build/head-sweep-quick.html"
echo "  head-sweep --quick page: $root/build/head-sweep-quick.html"
echo
stsb="$root/../shared/data/stsb/sts-test.tsv"
if [[ -f "$stsb" ]]; then
  echo "all-MiniLM-L6-v2 on STS-B test, every attention layer on headcount's streaming kernel:"
  "$hc" sts "$stsb" --threads "$(nproc)"
  echo
else
  echo "main: $stsb not found (a clone without ../shared): skipping the STS-B score" >&2
fi
# The heads report runs on any clone: over ../shared/data when present, else over the committed
# public-domain text data/pride-and-prejudice.txt.
echo "what the 72 heads do (add --ablate for the STS-B importance of each head, ~7 min, needs STS-B):"
"$hc" heads --threads "$(nproc)" --out "$root/build/heads-report.html"
echo "open $root/build/heads-report.html in a browser"
