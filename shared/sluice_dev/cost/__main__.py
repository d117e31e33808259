"""``python -m sluice_dev.cost [docs/cost.md]`` (``make cost``): rewrite the doc's generated regions."""

import sys

from sluice_dev.cost.doc import main

sys.exit(main(sys.argv[1:]))
