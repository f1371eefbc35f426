// user_transfrom is misspelt: the library cannot find user_transform.
extern "C" __device__ float user_transfrom(float x)
{
    return 2.0f * x;
}
