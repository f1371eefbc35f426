// A plug-in that uses what real plug-ins use: CUDA math functions,
// __constant__ data, a file-local helper and a template, all behind the
// extern "C" hook the library calls.
__constant__ float kCoefficients[3] = {0.25f, -1.5f, 2.0f};

static __device__ float horner(float x)
{
    return (kCoefficients[0] * x + kCoefficients[1]) * x + kCoefficients[2];
}

template <typename T>
__device__ T soft_clip(T x, T limit)
{
    return limit * tanhf(x / limit);
}

extern "C" __device__ float user_transform(float x)
{
    return soft_clip(horner(x), 4.0f) + expf(-x * x) * sinf(x);
}
