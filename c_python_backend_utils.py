from backend_utils import *  # noqa: F403  (Triton's C half of pb_utils: the same objects)
