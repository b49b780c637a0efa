"""The bounds on recipes: :mod:`core.limits`, where every limit lives (``runtime`` and ``builder`` share them),
under the name this package has always given them."""
from core.limits import *  # noqa: F401,F403
