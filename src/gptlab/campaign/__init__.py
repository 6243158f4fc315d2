"""A campaign: many sweeps against one baseline, kept honest as a whole. Every run, verdict, confirmation and
baseline change is a run in an MLflow tracking store (ledger), each new comparison is tested at the level an online
FDR procedure grants (fdr), a claimed win is re-run on fresh seeds before it is called one (confirm), and the CLI
(scripts/campaign.py) prints the ledger as markdown or versioned JSON (view). Above report/: it judges with the
ablation report's tests."""
