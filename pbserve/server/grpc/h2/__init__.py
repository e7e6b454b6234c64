"""Triton's gRPC API on zttp's sans-IO HTTP/2 (`--grpc-transport zttp`)."""
