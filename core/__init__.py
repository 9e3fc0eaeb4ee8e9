"""The shared kernel below every app: domain errors, the guarded transition engine, the status
vocabulary, model fields, and the DRF and gRPC glue every app's interfaces use.

`core.statuses`, `core.errors`, `core.grpc.errors` and `core.grpc.channel` import no Django:
the controllers and the CLI use them too.
"""
