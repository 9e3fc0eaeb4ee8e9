"""Built-in analysis plugins of the Data Analyzer (docs/plugins.md)."""
