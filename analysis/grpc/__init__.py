"""AnalysisRecordService (falcon.v1), served by the API server for the analyzer controller."""
