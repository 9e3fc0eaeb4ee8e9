"""JobService over gRPC (falcon.v1): thin servicer and message mappers."""
