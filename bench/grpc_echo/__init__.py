"""Bare echoes of Triton's GRPCInferenceService, one per HTTP/2 transport (bench only).

Every echo answers the same RPCs with the same bytes (`echo.answer`); only the transport
differs. `serve.py TRANSPORT PORT` runs one; `../grpc_transports.py` measures them.
"""
