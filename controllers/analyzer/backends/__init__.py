"""Where analysis runs execute: `base.AnalysisBackend` and its local implementation."""
