#!/usr/bin/env bash
# The gallery's campaign (docs/gallery.md): a small GPT on this CPU, a baseline on seeds 1-SEEDS, 10 A/A arms (the
# baseline's config under another name, on fresh seeds) and 10 real changes, each run, recorded and tested with
# scripts/campaign.py alone, PARALLEL at a time (the ledger takes concurrent writers); every claimed win is then
# re-run on fresh seeds. Run again, it skips what the ledger already holds. Prints the campaign at the end.
#   OMP_NUM_THREADS=1 nohup bash scripts/campaign_gallery.sh > outputs/campaign_gallery.log 2>&1 &
# STEPS=2 ARMS=1 SEEDS=3 ROOT=/tmp/smoke bash scripts/campaign_gallery.sh runs it as a smoke test.
set -euo pipefail
export PYTHONPATH=src
NAME=${NAME:-gallery}
ROOT=${ROOT:-outputs/campaign_gallery}
STEPS=${STEPS:-100}
SEEDS=${SEEDS:-10}  # per arm: at 3, a paired t-test has 2 degrees of freedom and claims nothing at LORD++'s levels
ARMS=${ARMS:-10}  # A/A arms, and real changes (of the 10 below)
PARALLEL=${PARALLEL:-3}
export GPTLAB_TRACKING_URI="sqlite:///$ROOT/mlflow.db"
C="python scripts/campaign.py"
SMALL="model.n_layer=2 model.n_embd=64 model.n_head=4 model.block_size=64 data.batch_size=16
  trainer.max_steps=$STEPS trainer.val_check_interval=$STEPS trainer.limit_val_batches=4 trainer.accelerator=cpu
  callbacks.text_samples=null callbacks.progress_bar=null trainer.enable_model_summary=false"
if ! $C list "$NAME" > /dev/null 2>&1; then
  # shellcheck disable=SC2086
  python src/train.py -m $SMALL seed="$(seq -s, 1 "$SEEDS")" hydra.sweep.dir="$ROOT/baseline"
  $C init "$NAME" --baseline-sweep "$ROOT/baseline" --label baseline --budget tokens
fi
$C list "$NAME" --json > "$ROOT/before.json"
known() {  # whether the ledger holds the variant already
  python -c "import json,sys; sys.exit(0 if sys.argv[2] in [v['variant'] for v in json.load(open(sys.argv[1]))['variants']] else 1)" "$ROOT/before.json" "$1"
}
CHANGES=("model.norm=post scheduler.warmup_steps=0" model.pos_emb=none model.pos_emb=sinusoidal model.pos_emb=rope
  model.pos_emb=alibi optimizer.lr=1e-2 optimizer.lr=1e-3 scheduler.warmup_steps=0 model.n_embd=96
  optimizer.weight_decay=0.0)
: > "$ROOT/todo.txt"
for i in $(seq -w 1 "$ARMS"); do  # nulls: the baseline under another name, on seeds the campaign never used
  known "aa$i" || echo "--label aa$i --fresh" >> "$ROOT/todo.txt"
done
for change in "${CHANGES[@]:0:$ARMS}"; do
  known "$(tr ' ' '\n' <<< "$change" | sort | tr '\n' ' ' | sed 's/ $//')" || echo "$change" >> "$ROOT/todo.txt"
done
# --fresh seeds are taken above the ledger's at launch, so the A/A arms go one after another; beside them the
# changes (on the baseline's seeds) go PARALLEL - 1 at once
(grep -- "--fresh" "$ROOT/todo.txt" || true) | while read -r args; do
  # shellcheck disable=SC2086
  $C run "$NAME" $args --out "$ROOT/runs" > /dev/null
done &
(grep -v -- "--fresh" "$ROOT/todo.txt" || true) | \
  xargs -P "$((PARALLEL > 1 ? PARALLEL - 1 : 1))" -I{} sh -c "$C run $NAME {} --out $ROOT/runs > /dev/null"
wait
$C judge "$NAME" --json > "$ROOT/explored.json"
python - "$ROOT/explored.json" > "$ROOT/claimed.txt" <<'PY'
import json, sys
for row in json.load(open(sys.argv[1]))["variants"]:
    if row["status"] == "claimed":
        print(row["variant"])
PY
while read -r variant; do
  $C confirm "$NAME" --variant "$variant" --seeds "$SEEDS" --out "$ROOT/runs" > /dev/null
done < "$ROOT/claimed.txt"
$C list "$NAME"
$C list "$NAME" --json | tee "$ROOT/campaign.json"
