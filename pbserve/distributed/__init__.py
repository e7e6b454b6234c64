"""Several machines: pbserve workers and frontends joined by a NATS request plane.

Imported only when `--request-plane` is given: without it nothing here is loaded.
One concept a module: `codec` (the wire encoding), `request_plane` (the NATS
connection, subjects and the request stream), `registry` (models in JetStream KV),
`worker` (serving a ModelManager's models from the plane), `frontend` (an
InferenceCore backed by the plane), `nats_server` (finding the server binary).
"""
