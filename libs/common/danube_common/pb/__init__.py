"""Generated protobuf and gRPC modules (scripts/gen_protos.py)."""
