"""Bounded input and output: strict JSON, YAML without aliases, decimal numbers, token sizes, text cut to a column (no Django)."""
