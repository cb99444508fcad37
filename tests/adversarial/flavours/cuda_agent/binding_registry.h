// CUDA-Agent's agent_workdir registry: each kernels/*_binding.cpp registers
// its functions; binding.cpp applies them all to the cuda_extension module.
#pragma once
#include <torch/extension.h>
#include <functional>
#include <string>
#include <utility>
#include <vector>

class BindingRegistry {
public:
	using BindingFunction = std::function<void(pybind11::module &)>;
	static BindingRegistry &getInstance()
	{
		static BindingRegistry registry;
		return registry;
	}
	void registerBinding(const std::string &name, BindingFunction func)
	{
		bindings_.emplace_back(name, std::move(func));
	}
	void applyBindings(pybind11::module &m)
	{
		for (auto &b : bindings_)
			b.second(m);
	}

private:
	std::vector<std::pair<std::string, BindingFunction>> bindings_;
};

#define REGISTER_BINDING(name, func) \
	static bool _registered_##name = []() { \
		BindingRegistry::getInstance().registerBinding(#name, func); \
		return true; \
	}()
