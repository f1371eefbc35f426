// A syntax error on line 4.
extern "C" __device__ float user_transform(float x)
{
    return x +* 2.0f;
}
