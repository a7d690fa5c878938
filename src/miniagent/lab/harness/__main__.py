"""``python -m miniagent.lab.harness --timeout S -- COMMAND``: see :func:`miniagent.lab.harness.run.main`."""

import sys

from .run import main

sys.exit(main())
