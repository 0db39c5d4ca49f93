#!/usr/bin/env python
"""Write docs/CONFIG.md from core/config.py (or check that it is current).

    .venv/bin/python scripts/gen_config_doc.py          # write docs/CONFIG.md
    .venv/bin/python scripts/gen_config_doc.py --check  # exit 1 when docs/CONFIG.md differs from core/config.py

The text is :func:`core.config.config_markdown` (also ``rlfh config --format markdown``): the settings' defaults,
never the current environment's values. tests/test_config.py runs the check.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DOC = ROOT / "docs" / "CONFIG.md"


def main(argv: list[str] | None = None) -> int:
    from core.config import config_markdown
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="only compare; exit 1 when docs/CONFIG.md is stale")
    args = p.parse_args(argv)
    text = config_markdown()
    current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    if args.check:
        if current != text:
            print(f"{DOC.relative_to(ROOT)} is stale: run `.venv/bin/python scripts/gen_config_doc.py`",
                  file=sys.stderr)
            return 1
        return 0
    if current != text:
        DOC.write_text(text, encoding="utf-8")
        print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
