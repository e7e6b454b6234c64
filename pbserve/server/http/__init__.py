"""Triton's HTTP/REST API (KServe v2 and Triton's extensions) on an asyncio Protocol over
httptools: server.py starts it (and the metrics endpoint), protocol.py runs one
connection, connections.py and limits.py bound what a client may hold, routes.py maps
the URL space, messages.py holds the request and reply objects, infer.py and
generate.py answer inference (codec.py turns tensors into the backend's requests and
back, compression.py the Content-Encoding), repository.py, shm.py, stats.py,
logging.py and trace.py serve those extensions."""
