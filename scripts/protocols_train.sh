#!/bin/sh
# Reference training runs of results/protocols/ (LeNet-tanh, default init, embedded digits, 10 clients, iid).
set -e
OUT=${OUT:-results/protocols/train}
L="python -m leakattack.cli train --quiet --out $OUT --seed 0"
$L --protocol fedavg --rounds 100 --no-checkpoints
$L --protocol sketched --sketch srht --sketch-ratio 0.1 --rounds 1000 --name sketched-srht-0.1
$L --protocol fedsketch-privix --sketch-rows 50 --sketch-buckets 100 --rounds 260 --no-checkpoints --name fedsketch-privix-50x100
$L --protocol fedsketch-heaprix --sketch-rows 50 --sketch-buckets 100 --rounds 250 --no-checkpoints --name fedsketch-heaprix-50x100
$L --protocol sketched-dp --sketch srht --sketch-ratio 0.1 --rounds 200 --no-checkpoints --name sketched-dp-srht-0.1
