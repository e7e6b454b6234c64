"""Environment variables that hold the server's secrets.

A secret on the command line is shown by `ps` to every user of the machine; in the
environment it is not. The CLI reads these as the defaults of their flags, and the
stubs (model code) are started without them (pbserve.core.instances.stub_process).
"""

PLANE_PASSWORD_ENV = "PBSERVE_REQUEST_PLANE_PASSWORD"
PLANE_TOKEN_ENV = "PBSERVE_REQUEST_PLANE_TOKEN"
SECRET_ENV = (PLANE_PASSWORD_ENV, PLANE_TOKEN_ENV)
