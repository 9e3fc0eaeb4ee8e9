#!/usr/bin/env python
"""Django's command-line utility for the Falcon project."""
import os
import sys


def main() -> None:
    """Run a Django management command with `falcon_site.settings`."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "falcon_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
