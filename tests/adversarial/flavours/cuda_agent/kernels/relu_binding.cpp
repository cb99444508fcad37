#include "../binding_registry.h"
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

void relu_launch(const float *x, float *y, long long n, cudaStream_t stream);

static torch::Tensor relu_forward(torch::Tensor x)
{
	TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "relu_forward: a float32 CUDA tensor");
	auto xc = x.contiguous();
	auto y = torch::empty_like(xc);
	relu_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(), c10::cuda::getCurrentCUDAStream());
	return y;
}

static void register_relu(pybind11::module &m)
{
	m.def("relu_forward", &relu_forward, "ReLU (CUDA)");
}

REGISTER_BINDING(relu, register_relu);
