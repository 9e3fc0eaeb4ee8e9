"""The analyzer controller: queues, offline discovery, runs, recovery; serves AnalyzerService.

The design is docs/analyzer.md ("Controller", "Runs on the local backend", "Recovery"). Records
are read and written only through the API server's AnalysisRecordService (`contract`,
`grpc_client`), never the database.
"""
