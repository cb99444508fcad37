/* device: see device.h. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device.h"
#include "err.h"
#include "opt.h"

enum ca_device ca_device_parse(const char *option, const char *text)
{
	if (strcmp(text, "cpu") == 0)
		return CA_DEVICE_CPU;
	if (strcmp(text, "cuda") == 0)
		return CA_DEVICE_CUDA;
	ca_err_warn("%s: '%s' is not a device (cpu or cuda)", option, text);
	ca_opt_bad_usage();
	return CA_DEVICE_CPU;
}

static struct ca_cuda_api api;
static int opened;

/* dlsym into a function pointer without the object-to-function cast warning. */
#define LOOK_UP(handle, field, name) memcpy(&(field), &(void *){dlsym(handle, name)}, sizeof(field))

const struct ca_cuda_api *ca_device_cuda(char why[CA_MODEL_WHY])
{
	if (opened)
		return &api;
	static char path[PATH_MAX + 64];
	const char *env = getenv("CA_MODEL_CUDA_LIB");
	if (env && *env) {
		snprintf(path, sizeof path, "%s", env);
	} else {
		char exe[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
		if (n <= 0) {
			snprintf(why, CA_MODEL_WHY, "cannot find the running executable to look beside it; set CA_MODEL_CUDA_LIB");
			return NULL;
		}
		exe[n] = 0;
		char *slash = strrchr(exe, '/');
		if (slash)
			*slash = 0;
		snprintf(path, sizeof path, "%s/libca-model-cuda.so", slash ? exe : ".");
	}
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(why, CA_MODEL_WHY, "the CUDA backend is not available (make model-cuda builds it): %s", dlerror());
		return NULL;
	}
	api.path = path;
	LOOK_UP(h, api.model_upload, "ca_cuda_model_upload");
	LOOK_UP(h, api.model_free, "ca_cuda_model_free");
	LOOK_UP(h, api.model_forward, "ca_cuda_model_forward");
	LOOK_UP(h, api.sampler_new, "ca_cuda_sampler_new");
	LOOK_UP(h, api.sampler_free, "ca_cuda_sampler_free");
	LOOK_UP(h, api.sampler_generate, "ca_cuda_sampler_generate");
	LOOK_UP(h, api.sampler_counts, "ca_cuda_sampler_counts");
	LOOK_UP(h, api.model_forward_train, "ca_cuda_model_forward_train");
	LOOK_UP(h, api.model_backward, "ca_cuda_model_backward");
	LOOK_UP(h, api.model_zero_grad, "ca_cuda_model_zero_grad");
	LOOK_UP(h, api.model_adamw_step, "ca_cuda_model_adamw_step");
	LOOK_UP(h, api.model_download, "ca_cuda_model_download");
	LOOK_UP(h, api.model_grad_buffer, "ca_cuda_model_grad_buffer");
	LOOK_UP(h, api.peak_bytes, "ca_cuda_model_peak_bytes");
	opened = 1;
	return &api;
}

const struct ca_cuda_api *ca_device_open(enum ca_device device, enum ca_device_use use)
{
	char why[CA_MODEL_WHY];
	if (device != CA_DEVICE_CUDA)
		return NULL;
	const struct ca_cuda_api *cuda = ca_device_cuda(why);
	if (!cuda)
		ca_err_die(CA_EXIT_SYSTEM, "%s", why);
	if (use == CA_DEVICE_FORWARD && (!cuda->model_upload || !cuda->model_forward || !cuda->model_free))
		ca_err_die(CA_EXIT_SYSTEM, "%s has no forward pass (rebuild with make model-cuda)", cuda->path);
	if (use == CA_DEVICE_SAMPLER && (!cuda->sampler_new || !cuda->sampler_generate || !cuda->sampler_free))
		ca_err_die(CA_EXIT_SYSTEM, "%s has no sampler (rebuild with make model-cuda)", cuda->path);
	return cuda;
}
