"""The gRPC server's frame scanner (grpc/h2/frames.py FrameScanner) as it splits reads:
large DATA payloads taken past zttp, every other byte handed to zttp in wire order,
whatever the reads."""

from __future__ import annotations

import random

import pytest

from h2_raw import raw_frame as frame
from pbserve.server.grpc.h2.frames import (
    BYPASS_MIN_BYTES, FrameScanner, empty_data, window_update)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
BIG = bytes(range(256)) * 40  # 10 KiB
TAIL = b"x" * BYPASS_MIN_BYTES


FRAMES = [
    frame(0x4, 0, 0, b"\x00\x04\x00\x01\x00\x00"),  # SETTINGS
    frame(0x1, 0x4, 1, b"hdrs"),  # HEADERS
    frame(0x0, 0, 1, b"small"),  # DATA under the bypass size: zttp's
    frame(0x0, 0, 1, BIG),  # taken past zttp
    frame(0x0, 0x1, 1, TAIL),  # taken past zttp, END_STREAM
    frame(0x8, 0, 0, b"\x00\x00\x01\x00"),  # WINDOW_UPDATE
    frame(0x0, 0x8, 3, b"\x02" + b"y" * 5000 + b"\x00\x00"),  # PADDED: zttp's
]
WIRE = PREFACE + b"".join(FRAMES)


def replay(cuts: list[int]) -> tuple[bytes, dict[int, bytes], list[tuple[int, int]]]:
    """What zttp would read (the emptied frames placed where the server feeds them),
    the payloads taken past it by stream, and the frames ended (stream, flags)."""
    scanner = FrameScanner()
    zttp, taken, ended, last = b"", {}, [], 0
    for cut in [*cuts, len(WIRE)]:
        read = WIRE[last:cut]
        pieces = scanner.feed(read)
        for piece in pieces if pieces is not None else [("zttp", read)]:
            if piece[0] == "zttp":
                zttp += piece[1]
                continue
            _, stream, view, flags, done = piece
            taken[stream] = taken.get(stream, b"") + bytes(view)
            if done:
                zttp += empty_data(stream, flags)
                ended.append((stream, flags))
        last = cut
    return zttp, taken, ended


@pytest.mark.parametrize("seed", range(40))
def test_reads_cut_anywhere_split_the_same(seed):
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(WIRE)), rng.randrange(0, 16)))
    zttp, taken, ended = replay(cuts)
    assert zttp == (PREFACE + b"".join(FRAMES[:3]) + empty_data(1, 0) + empty_data(1, 1)
                    + FRAMES[5] + FRAMES[6])
    assert taken == {1: BIG + TAIL}
    assert ended == [(1, 0), (1, 1)]


def test_a_read_of_small_frames_is_zttps_whole():
    scanner = FrameScanner()
    assert scanner.feed(PREFACE + b"".join(FRAMES[:3])) is None
    assert scanner.feed(FRAMES[5]) is None


def test_the_frames_the_server_writes():
    assert empty_data(5, 0x1 | 0x20) == b"\x00\x00\x00\x00\x01\x00\x00\x00\x05"
    assert window_update(0, 70_000) == b"\x00\x00\x04\x08\x00" + bytes(4) + \
        (70_000).to_bytes(4, "big")
