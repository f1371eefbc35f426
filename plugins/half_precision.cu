// Half precision through cuda_fp16.h: CUDA's own header, found in the wheels
// that pip installed (no CUDA Toolkit needed). The math runs in __half and
// the result goes back to float.
#include <cuda_fp16.h>

extern "C" __device__ float user_transform(float x)
{
    const __half h = __float2half(x);
    const __half y = __hfma(h, h, __hmul(__float2half(3.0f), h));
    return __half2float(__hsub(y, __float2half(1.0f)));
}
