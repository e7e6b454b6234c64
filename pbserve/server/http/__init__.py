"""Triton's HTTP/REST API (KServe v2 and Triton's extensions) on an asyncio Protocol over
httptools: server.py starts it (and the metrics endpoint), protocol.py runs one
connection, limits.py bounds what a client may hold (with server/connections.py, the
connection cap and timeouts' sweeper shared with gRPC), routes.py maps the URL space,
messages.py holds the request and reply objects, infer.py (over the unary request path
shared with gRPC, server/inference.py) and generate.py answer inference (codec.py turns
tensors into the core's requests and back, compression.py the Content-Encoding),
repository.py, shm.py, logging.py and trace.py serve those extensions (statistics:
server/statistics.py). Nothing here imports the gRPC frontend."""
