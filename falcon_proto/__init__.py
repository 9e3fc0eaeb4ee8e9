"""Generated code of the Falcon gRPC API (scripts/gen_protos.sh); do not edit."""
