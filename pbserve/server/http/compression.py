"""`Content-Encoding` of requests and `Accept-Encoding` of replies (gzip, deflate), as
tritonclient uses them (`request_compression_algorithm`, `response_compression_algorithm`).

Both are off the hot path: the headers are absent unless a client asks for them.
"""

from __future__ import annotations

import zlib

from pbserve.errors import ErrorCode, ServerError, invalid_arg

_WBITS = {b"gzip": 16 + zlib.MAX_WBITS, b"deflate": zlib.MAX_WBITS}


def decompress_body(encoding: bytes | None, body: bytes | bytearray,
                    limit: int) -> bytes | bytearray:
    """The request body as sent before compression; UNSUPPORTED (501, like Triton)
    for an encoding other than gzip, deflate or identity, INVALID_ARG (400, like Triton)
    when it would expand past `limit` bytes (--http-max-input-size): decompression stops
    there, so a small body cannot make the server allocate gigabytes."""
    if encoding is None:
        return body
    encoding = encoding.strip().lower()
    if encoding in (b"", b"identity"):
        return body
    wbits = _WBITS.get(encoding)
    if wbits is None:
        raise ServerError(ErrorCode.UNSUPPORTED, "Unsupported compression type")
    inflater = zlib.decompressobj(wbits)
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise invalid_arg(f"failed to decompress the {encoding.decode()} request body: "
                          f"{exc}") from None
    if len(data) > limit:
        raise invalid_arg(f"Decompressed data size exceeds the maximum allowed value of "
                          f"{limit} bytes. Use --http-max-input-size to increase the limit.")
    if not inflater.eof:
        raise invalid_arg(f"failed to decompress the {encoding.decode()} request body: "
                          f"incomplete or truncated stream")
    return data


def response_encoding(accept: bytes | None) -> bytes | None:
    """gzip or deflate when the client accepts it (highest q wins), else None."""
    if accept is None:
        return None
    best, best_q = None, 0.0
    for item in accept.lower().split(b","):
        name, _, params = item.partition(b";")
        name = name.strip()
        if name not in _WBITS:
            continue
        q = 1.0
        params = params.strip()
        if params.startswith(b"q="):
            try:
                q = float(params[2:])
            except ValueError:
                q = 0.0
        if q > best_q:
            best, best_q = name, q
    return best


def compress(encoding: bytes, parts: list) -> bytes:
    compressor = zlib.compressobj(wbits=_WBITS[encoding])
    chunks = [compressor.compress(part) for part in parts]
    chunks.append(compressor.flush())
    return b"".join(chunks)
