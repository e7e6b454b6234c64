"""pbserve: run Triton Python-backend models unmodified, without the C++ server."""

__version__ = "0.1.0"
