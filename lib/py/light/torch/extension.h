/*
 * ca's lighter torch/extension.h, for the torch extensions that a
 * candidate builds when it is imported (load_inline, cpp_extension.load:
 * the runner puts this directory in CPATH, which the compilers search
 * before torch's -isystem directories) and for ca-build's units of
 * CUDA-Agent's layout (an -I before torch's). Each builds again without
 * it when a build fails, so that a unit needing what is left out compiles,
 * or fails, as it would have.
 *
 * torch/extension.h is torch/all.h (the whole C++ frontend: nn, optim,
 * data, serialize, jit) and torch/python.h (pybind11 and Python.h). A
 * CUDA unit gets torch/types.h (tensors and ATen's operators, what
 * load_inline itself puts before CUDA sources); any other unit
 * torch/python.h, what torch/extension.h is when torch builds its own
 * wrappers (TORCH_INDUCTOR_CPP_WRAPPER). In gcc, parsing torch/types.h
 * takes about a third of torch/extension.h, torch/python.h about 60%.
 */
#pragma once
#if defined(__CUDACC__)
#include <torch/types.h>
#else
#include <torch/python.h>
#endif
