"""`python -m cli`: the same as the `falcon` console script."""
from .main import main

main()
