"""`python -m cli`: the same as the `falcon` console script."""
from .start import main

main()
