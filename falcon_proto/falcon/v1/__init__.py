"""Generated package `falcon.v1` (protos/falcon/v1); do not edit."""
