"""``python -m rlfh ARGS``: the ``rlfh`` command without the console script."""
import sys

from rlfh.cli import main

sys.exit(main())
