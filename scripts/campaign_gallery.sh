#!/usr/bin/env bash
# The gallery's campaign (docs/gallery.md): a small GPT on this CPU, a baseline on seeds 1-3, 10 A/A arms (the
# baseline's config under another name, on fresh seeds) and 10 real changes, each run, recorded and tested with
# scripts/campaign.py alone; every claimed win is then re-run on fresh seeds. Prints the campaign as JSON at the end.
#   OMP_NUM_THREADS=1 nohup bash scripts/campaign_gallery.sh > outputs/campaign_gallery.log 2>&1 &
# STEPS=2 ARMS=1 ROOT=/tmp/smoke bash scripts/campaign_gallery.sh runs it as a smoke test.
set -euo pipefail
export PYTHONPATH=src
NAME=${NAME:-gallery}
ROOT=${ROOT:-outputs/campaign_gallery}
STEPS=${STEPS:-40}
ARMS=${ARMS:-10}  # A/A arms, and real changes (of the 10 below)
export GPTLAB_TRACKING_URI="sqlite:///$ROOT/mlflow.db"
C="python scripts/campaign.py"
SMALL="model.n_layer=2 model.n_embd=64 model.n_head=4 model.block_size=64 data.batch_size=16
  trainer.max_steps=$STEPS trainer.val_check_interval=$STEPS trainer.limit_val_batches=4 trainer.accelerator=cpu
  callbacks.text_samples=null callbacks.progress_bar=null trainer.enable_model_summary=false"
# shellcheck disable=SC2086
python src/train.py -m $SMALL seed=1,2,3 hydra.sweep.dir="$ROOT/baseline"
$C init "$NAME" --baseline-sweep "$ROOT/baseline" --label baseline --budget tokens
for i in $(seq -w 1 "$ARMS"); do  # nulls: the baseline under another name, on seeds the campaign never used
  $C run "$NAME" --label "aa$i" --fresh --out "$ROOT/runs" > /dev/null
done
CHANGES=("model.norm=post scheduler.warmup_steps=0" model.pos_emb=none model.pos_emb=sinusoidal model.pos_emb=rope
  model.pos_emb=alibi optimizer.lr=1e-2 optimizer.lr=1e-3 scheduler.warmup_steps=0 model.n_embd=96
  optimizer.weight_decay=0.0)
for change in "${CHANGES[@]:0:$ARMS}"; do
  # shellcheck disable=SC2086
  $C run "$NAME" $change --out "$ROOT/runs" > /dev/null
done
$C list "$NAME" --json > "$ROOT/explored.json"
python - "$ROOT/explored.json" > "$ROOT/claimed.txt" <<'PY'
import json, sys
for row in json.load(open(sys.argv[1]))["variants"]:
    if row["status"] == "claimed":
        print(row["variant"])
PY
while read -r variant; do
  $C confirm "$NAME" --variant "$variant" --seeds 3 --out "$ROOT/runs" > /dev/null
done < "$ROOT/claimed.txt"
$C list "$NAME"
$C list "$NAME" --json | tee "$ROOT/campaign.json"
