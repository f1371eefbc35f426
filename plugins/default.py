# The default formula written in Python: numba-cuda compiles it to PTX or LTO-IR with the C ABI,
# and it links into the CUDA C++ library like default.cu. Its helper is compiled with it and
# inlined. float32() keeps the arithmetic in single precision: a bare 3.0 is a Python float
# (double precision), which would make the GPU compute in float64.
from numpy import float32


def clamp_at_zero(y):
    return y if y > float32(0.0) else float32(0.0)


def user_transform(x):
    return clamp_at_zero(x * x + float32(3.0) * x - float32(1.0))
