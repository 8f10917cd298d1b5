#!/bin/sh
# Reference training runs of results/protocols/ (LeNet-tanh, default init, embedded digits, 10 clients, iid).
#
#   [OUT=DIR] scripts/protocols_train.sh      (OUT: the repository's results/protocols/train unless given)
case "${1:-}" in -h|--help) sed -n "2,/^[^#]/p" "$0" | sed "/^[^#]/d; s/^# \{0,1\}//"; exit 0;; esac
set -e
OUT=${OUT:-$(dirname "$0")/../results/protocols/train}  # the repository's, whatever the working folder
L="python -m leakattack.cli train --quiet --out $OUT --seed 0"
$L --protocol fedavg --rounds 100 --no-checkpoints
$L --protocol sketched --sketch srht --sketch-ratio 0.1 --rounds 1000 --name sketched-srht-0.1
$L --protocol fedsketch-privix --sketch-rows 50 --sketch-buckets 100 --rounds 260 --no-checkpoints --name fedsketch-privix-50x100
$L --protocol fedsketch-heaprix --sketch-rows 50 --sketch-buckets 100 --rounds 250 --no-checkpoints --name fedsketch-heaprix-50x100
$L --protocol sketched-dp --sketch srht --sketch-ratio 0.1 --rounds 200 --no-checkpoints --name sketched-dp-srht-0.1
# SAFL / SACFL at the SAFL paper's b/d (0.1 and 0.01 of d; b = 1343 and 134 here against 4e5..4e6 of 4.2e7 there)
$L --protocol safl --sketch srht --sketch-ratio 0.1 --rounds 500 --no-checkpoints --name safl-adam-srht-0.1
$L --protocol safl --sketch srht --sketch-ratio 0.01 --rounds 500 --no-checkpoints --name safl-adam-srht-0.01
$L --protocol safl --sketch srht --sketch-ratio 0.01 --second-moment desketched --rounds 500 --no-checkpoints --name safl-adam-desk-srht-0.01
$L --protocol sketched --sketch srht --sketch-ratio 0.01 --rounds 500 --no-checkpoints --name sketched-srht-0.01
$L --protocol sacfl --sketch srht --sketch-ratio 0.1 --rounds 500 --no-checkpoints --name sacfl-srht-0.1
# COMPSGD / PRIVSGD at m_i = d_i/10 per layer (the paper's MLP setting); eta = 0.1 as the paper, and eta * d/m = 1.0
$L --protocol compsgd --sketch sparse --sketch-ratio 0.1 --rounds 100 --no-checkpoints --name compsgd-sparse-0.1
$L --protocol compsgd --sketch sparse --sketch-ratio 0.1 --global-lr 10 --rounds 100 --no-checkpoints --name compsgd-sparse-0.1-eta1
$L --protocol compsgd --sketch gaussian --sketch-ratio 0.1 --global-lr 10 --rounds 100 --no-checkpoints --name compsgd-gaussian-0.1-eta1
$L --protocol privsgd --sketch gaussian --sketch-ratio 0.1 --global-lr 10 --rounds 100 --no-checkpoints --name privsgd-gaussian-0.1-eta1-eps0.5
$L --protocol privsgd --sketch gaussian --sketch-ratio 0.1 --global-lr 10 --dp-epsilon 100 --rounds 100 --no-checkpoints --name privsgd-gaussian-0.1-eta1-eps100
