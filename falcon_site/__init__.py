"""Falcon: the experiment platform's Django project package."""
