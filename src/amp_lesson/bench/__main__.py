"""``python -m amp_lesson.bench``: see :func:`amp_lesson.bench.cli.main`."""

import sys

from amp_lesson.bench.cli import main

sys.exit(main())
