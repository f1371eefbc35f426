# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The helpers NVIDIA's CUDA Python samples share, with their names and behaviour: a check that the
packages are installed, a check of a result against the expected one, the GPU's name and compute
capability. Nothing of this sample's own is here."""


def check_cuda_requirements() -> bool:
    """Whether CuPy and cuda.core can be imported; if not, say what to install."""
    try:
        import cupy  # noqa: F401
        from cuda.core import Device  # noqa: F401
    except ImportError as exc:
        print(f"Error: Required package not found: {exc}")
        print("Please install from requirements.txt:")
        print("  pip install -r requirements.txt")
        return False
    return True


def verify_array_result(result, expected, rtol: float = 1e-5, atol: float = 1e-8,
                        verbose: bool = True) -> bool:
    """Whether two NumPy (or two CuPy) arrays match within tolerance; prints PASSED or FAILED."""
    import numpy as xp

    if not (isinstance(result, xp.ndarray) and isinstance(expected, xp.ndarray)):
        import cupy as xp

        if not (isinstance(result, xp.ndarray) and isinstance(expected, xp.ndarray)):
            raise TypeError("verify_array_result expects both arrays to be either numpy.ndarray "
                            "or cupy.ndarray")
    if xp.allclose(result, expected, rtol=rtol, atol=atol):
        if verbose:
            print("Test PASSED")
        return True
    if verbose:
        print(f"Test FAILED - Max error: {xp.max(xp.abs(result - expected))}")
    return False


def print_gpu_info(device) -> None:
    """Print a cuda.core Device's name and compute capability."""
    print(f"Device: {device.name}")
    capability = device.compute_capability
    print(f"Compute Capability: {capability.major}.{capability.minor}")
