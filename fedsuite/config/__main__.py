"""`python -m fedsuite.config --write-pyproject` (or `--check`): pyproject.toml's generated run-config table."""

import sys

from fedsuite.config.run_config import main

sys.exit(main())
