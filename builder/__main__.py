"""``python -m builder`` runs the ``build`` command."""
import sys

from .cli import main

sys.exit(main())
