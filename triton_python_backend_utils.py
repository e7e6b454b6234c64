from backend_utils import *  # noqa: F403  (Triton's `pb_utils`: the same objects as backend_utils)
