// A polynomial of degree 8 by Horner's rule: a chain of 8 fused multiply-adds.
// Called through PTX linking, each of the kernel's calls keeps its own
// registers alive across the call; after LTO the four lanes of a float4 run
// their chains side by side.
extern "C" __device__ float user_transform(float x)
{
    float y = 0.0039f;
    y = fmaf(y, x, -0.0078f);
    y = fmaf(y, x, 0.0156f);
    y = fmaf(y, x, -0.0313f);
    y = fmaf(y, x, 0.0625f);
    y = fmaf(y, x, -0.125f);
    y = fmaf(y, x, 0.25f);
    y = fmaf(y, x, -0.5f);
    return fmaf(y, x, 1.0f);
}
