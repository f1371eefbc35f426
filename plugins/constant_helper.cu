// __constant__ data and a helper function: a small lookup table in constant
// memory, read by a static helper. The library sees only user_transform; the
// host can write the table after linking (write_parameters), as it is not static.
__constant__ float kSteps[4] = {-1.0f, 0.0f, 0.5f, 2.0f};

static __device__ float nearest_step(float x)
{
    float best = kSteps[0];
    for (int i = 1; i < 4; ++i) {
        if (fabsf(x - kSteps[i]) < fabsf(x - best)) best = kSteps[i];
    }
    return best;
}

extern "C" __device__ float user_transform(float x)
{
    return 0.75f * x + 0.25f * nearest_step(x);
}
