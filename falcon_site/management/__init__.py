"""Management commands of the Falcon project package."""
