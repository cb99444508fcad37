"""ca_kernels: the fast-path loader a candidate's model_new.py imports.

A workspace of flavour "ca" keeps its CUDA in kernels/*.cu with extern "C"
launchers and no torch headers; ca-build compiles them with nvcc into one
shared library. This module opens that library with ctypes and calls a
launcher with tensors turned into raw pointers, so no torch extension has to
be compiled (about 1.6 s for nvcc against about 53 s for load_inline).

    import ca_kernels
    lib = ca_kernels.load()                    # path from $CA_KERNELS_LIB
    ca_kernels.launch(lib.my_launcher, x, out, n)

launch() converts each argument:
    torch.Tensor   -> its data pointer (void *); it must be contiguous
    bool / int     -> int64 (C long long)
    float          -> C float
    None           -> NULL pointer
    ctypes values  -> passed as they are (use ctypes.c_double for a double)
and appends the current CUDA stream (cudaStream_t) as the last argument
(NULL for CPU tensors). The launcher returns an int (a cudaError_t, 0 for
success); a nonzero return raises RuntimeError naming the launcher and code.

    extern "C" int my_launcher(const float *x, float *out, long long n,
                               cudaStream_t stream);

Where the library is found, first match wins: the path given to load(),
$CA_KERNELS_LIB (set by ca-verify and ca-profile to what ca-build made),
then build/libkernels.so and kernels/libkernels.so under the current
directory (for a workspace built by hand).
"""

import ctypes
import os

__all__ = ["load", "launch", "library_path"]

_loaded = {}

# Names of CUDA runtime errors a launcher is likely to return; anything else
# is shown by number.
_CUDA_ERRORS = {
    1: "cudaErrorInvalidValue",
    2: "cudaErrorMemoryAllocation",
    9: "cudaErrorInvalidConfiguration",
    98: "cudaErrorInvalidDeviceFunction",
    200: "cudaErrorInvalidKernelImage",
    209: "cudaErrorNoKernelImageForDevice",
    700: "cudaErrorIllegalAddress",
    701: "cudaErrorLaunchOutOfResources",
    702: "cudaErrorLaunchTimeout",
    716: "cudaErrorMisalignedAddress",
    719: "cudaErrorLaunchFailure",
}


def library_path(path=None):
    """The shared library load() would open, or None when there is none."""
    candidates = []
    if path:
        candidates.append(path)
    env = os.environ.get("CA_KERNELS_LIB")
    if env:
        candidates.append(env)
    candidates += [os.path.join("build", "libkernels.so"),
                   os.path.join("kernels", "libkernels.so")]
    for c in candidates:
        if os.path.isfile(c):
            return os.path.abspath(c)
    return None


def load(path=None):
    """Open the workspace's kernel library and return its ctypes handle.

    Every exported function is declared to return int; arguments are
    converted by launch(), so calling a launcher directly is possible but
    then the caller must pass ctypes values and the stream itself.
    """
    found = library_path(path)
    if found is None:
        raise RuntimeError(
            "ca_kernels: no kernel library: set CA_KERNELS_LIB or build the "
            "workspace with ca-build (looked for %s)"
            % (path or os.environ.get("CA_KERNELS_LIB") or "build/libkernels.so"))
    lib = _loaded.get(found)
    if lib is None:
        lib = _Library(ctypes.CDLL(found, mode=ctypes.RTLD_LOCAL))
        _loaded[found] = lib
    return lib


class _Library:
    """A CDLL wrapper whose functions return int and remember their names."""

    def __init__(self, cdll):
        self._cdll = cdll

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            fn = getattr(self._cdll, name)
        except AttributeError:
            raise AttributeError(
                "ca_kernels: the kernel library has no launcher named %r "
                "(is it declared extern \"C\"?)" % name) from None
        fn.restype = ctypes.c_int
        setattr(self, name, fn)
        return fn


def _is_tensor(value):
    t = type(value)
    return t.__module__.startswith("torch") and hasattr(value, "data_ptr")


def _convert(value, index):
    if value is None:
        return ctypes.c_void_p(None), None
    if isinstance(value, bool):
        return ctypes.c_longlong(int(value)), None
    if isinstance(value, int):
        return ctypes.c_longlong(value), None
    if isinstance(value, float):
        return ctypes.c_float(value), None
    if isinstance(value, (ctypes._SimpleCData, ctypes._Pointer, ctypes.Array)):
        return value, None
    if _is_tensor(value):
        if not value.is_contiguous():
            raise ValueError(
                "ca_kernels.launch: argument %d is a non-contiguous tensor "
                "(shape %s, stride %s); pass x.contiguous()"
                % (index, tuple(value.shape), tuple(value.stride())))
        return ctypes.c_void_p(value.data_ptr()), value.device
    raise TypeError("ca_kernels.launch: argument %d has unsupported type %s"
                    % (index, type(value).__name__))


def _stream_for(device):
    if device is None or device.type != "cuda":
        return ctypes.c_void_p(None)
    import torch
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)


def launch(fn, *args):
    """Call launcher fn with converted args plus the current CUDA stream."""
    converted = []
    device = None
    for i, a in enumerate(args):
        c, dev = _convert(a, i)
        converted.append(c)
        if dev is not None and device is None:
            device = dev
    converted.append(_stream_for(device))
    if getattr(fn, "restype", None) is not ctypes.c_int:
        fn.restype = ctypes.c_int
    code = fn(*converted)
    if code != 0:
        name = getattr(fn, "__name__", "launcher")
        raise RuntimeError("ca_kernels: %s returned %d (%s)"
                           % (name, code, _CUDA_ERRORS.get(code, "CUDA error")))
    return code
