"""`python -m cluster.assets_cli`: fetch the embedded model, data and claim judge base once (used by `make setup`)."""
import logging

from core.assets import JUDGE_BASE, fetch_asset
from core.config import EMBEDDED_MODEL
from core.data import load_halueval
from core.model_loader import resolve_model_path

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    items = load_halueval("all")
    print(f"HaluEval-QA: {len(items)} items")
    print(f"{EMBEDDED_MODEL}: {resolve_model_path(EMBEDDED_MODEL)}")
    print(f"claim judge base (all-MiniLM-L6-v2): {fetch_asset(JUDGE_BASE)}")
