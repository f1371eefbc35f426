# The default formula written in Python: numba-cuda compiles it to PTX or LTO-IR with the C ABI,
# and it links into the CUDA C++ library like default.cu. float32() keeps the arithmetic in single
# precision: a bare 3.0 is a Python float (double precision), which would make the GPU compute in
# float64. The helper is inlined (inline="always"): numba-cuda compiles such a helper even where
# there is no CUDA driver (--compile-only), and numba.vectorize's CPU build (the reference) calls
# it.
from numba import njit
from numpy import float32


@njit(inline="always")
def clamp_at_zero(y):
    return y if y > float32(0.0) else float32(0.0)


def user_transform(x):
    return clamp_at_zero(x * x + float32(3.0) * x - float32(1.0))
