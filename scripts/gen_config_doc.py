#!/usr/bin/env python
"""Write docs/CONFIG.md from the settings in core/settings/ (or check that it is current).

    .venv/bin/python scripts/gen_config_doc.py          # write docs/CONFIG.md
    .venv/bin/python scripts/gen_config_doc.py --check  # exit 1 when docs/CONFIG.md differs from the settings

The text is :func:`rlfh.config_doc.config_markdown` (also ``rlfh config --format markdown``): the settings' defaults,
never the current environment's values. tests/test_config.py runs the check.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rlfh.config_doc import CONFIG_DOC_COMMAND, config_markdown  # noqa: E402 (after the sys.path line above)

DOC = ROOT / "docs" / "CONFIG.md"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="only compare; exit 1 when docs/CONFIG.md is stale")
    args = p.parse_args(argv)
    text = config_markdown()
    current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    if args.check:
        if current != text:
            print(f"{DOC.relative_to(ROOT)} is stale: run `{CONFIG_DOC_COMMAND}`",
                  file=sys.stderr)
            return 1
        return 0
    if current != text:
        DOC.write_text(text, encoding="utf-8")
        print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
