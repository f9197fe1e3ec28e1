"""`python -m shipyard` runs the `shipyard` command."""

import sys

from shipyard.cli.main import main

sys.exit(main())
