"""Triton's gRPC API (inference.GRPCInferenceService) on grpcio: server.py starts it,
service.py answers each RPC, stream.py runs ModelStreamInfer, wire.py and codec.py turn
messages into the backend's requests and back, handlers.py registers the methods (raw
bytes for ModelInfer), shm.py, logging.py and trace.py serve those extensions."""
