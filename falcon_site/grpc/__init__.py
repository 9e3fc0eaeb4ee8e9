"""The internal gRPC API (package `falcon.v1`): wiring shared by every app's servicers.

- `gen/`: code generated from `protos/falcon/v1` by `scripts/gen_protos.sh` (committed).
- `errors`: the ONE mapping of domain errors to gRPC status codes, and back (client side).
- `auth`: who is calling (service token or user JWT).
- `interceptors`: authentication, fresh database connections and error mapping around each call.
- `paging`, `mappers`: list-request parsing and keyset pages shared by the servicers.
- `channel`: message-size limits and auth metadata shared by server and clients.
- `server`: `build_server()`, used by `manage.py rungrpc` and the tests.
- `testing`: an in-process server and pytest fixtures for the gRPC tests.

`errors`, `channel` and `gen` must not import Django: the controllers' client
(`controllers.grpc_client`) imports them.
"""
