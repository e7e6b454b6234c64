"""Bare echoes of Triton's GRPCInferenceService on grpcio and zttp (bench only).

Every echo answers the same RPCs with the same bytes (`echo.py`); only the transport
differs. `serve.py TRANSPORT PORT` runs one; `../grpc_transports.py` measures them,
`features.py` checks what each gives, `vs_server.py` puts one beside pbserve in vs.py.
See README.md.
"""
