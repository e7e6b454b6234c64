"""Frontend processes (`--frontend-processes N`, docs/frontend_processes.md): HTTP and gRPC
answered by N processes in front of the core, over shared memory.

The core's side: `start.py` (wiring), `processes.py` (start, restart, stop), `link.py`
(one frontend's requests run against the core), `calls.py` (what else a frontend asks).
The frontend's side: `linked_core.py` (its InferenceCore), `placer.py` (its pool, where
large requests are gathered), run by
pbserve/cli/frontend_process.py. Both: `channel.py` (the queues and doorbells) and
`protocol.py` (the messages).
"""
