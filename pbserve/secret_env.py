"""Environment variables that hold the server's secrets.

A secret on the command line is shown by `ps` to every user of the machine; in the
environment it is not. The CLI reads these as the defaults of their flags, and the
stubs (model code) are started without them (pbserve.core.instances.stub_process).
"""

PLANE_PASSWORD_ENV = "PBSERVE_REQUEST_PLANE_PASSWORD"
PLANE_TOKEN_ENV = "PBSERVE_REQUEST_PLANE_TOKEN"
# Triton's redis_cache reads its credentials from these (core/cache/redis_settings.py)
REDIS_CACHE_USERNAME_ENV = "TRITONCACHE_REDIS_USERNAME"
REDIS_CACHE_PASSWORD_ENV = "TRITONCACHE_REDIS_PASSWORD"
SECRET_ENV = (PLANE_PASSWORD_ENV, PLANE_TOKEN_ENV, REDIS_CACHE_USERNAME_ENV,
              REDIS_CACHE_PASSWORD_ENV)
