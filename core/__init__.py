"""The shared kernel below every app: domain errors, the guarded transition engine, the status
vocabulary (`statuses`), the abstract stateful models (`models`), the configured clusters
(`cluster_settings`), the FilterSet base (`filters`), the read-only admin (`admin`), and the DRF
and gRPC glue every app's interfaces use (`drf`, `grpc`).

`core.domain.statuses`, `core.errors`, `core.grpc.errors` and `core.grpc.channel` import no Django:
the controllers and the CLI use them too.
"""
