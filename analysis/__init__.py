"""The Data Analyzer's records: one `AnalysisRecord` per analysis of an experiment's artifact.

The API server owns these rows (services, selectors, the AnalysisRecordService gRPC servicer,
the HTTP API under /api/v1/analyses and the admin); the analyzer controller
(`controllers.analyzer`) runs the analyses and reaches the rows only over gRPC.
"""
