#!/bin/sh
# The measurements behind the choice of the `ig` recipe for deep BatchNorm networks (docs/attack.md, "Recipes"):
# resnet20, embedded photo 0 (3x32x32), unsketched, BatchNorm in train mode, 300 steps each.
#
#   [OUT=DIR] scripts/recipe_choice.sh      (OUT: results/runs/recipe_choice unless given)
case "${1:-}" in -h|--help) sed -n "2,/^[^#]/p" "$0" | sed "/^[^#]/d; s/^# \{0,1\}//"; exit 0;; esac
set -e
OUT=${OUT:-results/runs/recipe_choice}
R="python -m leakattack.cli run --model resnet20 --sketch none --image-index 0 --iterations 300 --bn train --no-lpips --quiet"
$R --out $OUT/dlg --recipe dlg
$R --out $OUT/ig-lr0.1 --lr 0.1
$R --out $OUT/ig-lr0.01-unsigned --lr 0.01 --no-signed
$R --out $OUT/ig-lr0.03-unsigned --lr 0.03 --no-signed
$R --out $OUT/ig-lr0.01-unsigned-tv1e-2 --lr 0.01 --no-signed --tv 1e-2
$R --out $OUT/ig --lr 0.01
$R --out $OUT/ig-lr0.1-bn-eval --lr 0.1 --bn eval
for f in $OUT/*/metrics.json; do
  python -c "import json,sys; m=json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-2], round(m['psnr'], 2), round(m['ssim'], 3), round(m['wall_s']), 's')" $f
done
