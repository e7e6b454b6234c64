"""Triton's gRPC API (inference.GRPCInferenceService). server.py starts it on one of two
transports (`--grpc-transport`): zttp's HTTP/2 (h2/, pbserve's own layer and the
default) or grpcio (`grpc.aio`, the alternative); both serve the same servicer.
service.py answers each RPC (ModelInfer over the unary request path shared with HTTP,
server/inference.py), stream.py runs ModelStreamInfer, wire.py and codec.py turn
messages into the core's requests and back, handlers.py registers the methods (raw
bytes for ModelInfer), shm.py, logging.py and trace.py serve those extensions. Nothing
here imports the HTTP frontend: what both use is in pbserve/server/."""
