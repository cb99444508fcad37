/* A CPU stand-in for kernels/relu.cu with the same extern "C" launcher, so
 * the adversarial candidates run in the CPU test suite (make check):
 * cc -shared -fPIC -o DIR/build/libkernels.so relu_cpu.c
 * -DRELU_PASSES=N does the work N times a call: a call longer than the
 * CPU loop's own work around it, where a patched clock must be caught
 * with a margin (tests/t0152-ca-profile-cpu.sh). */
#ifndef RELU_PASSES
#define RELU_PASSES 1
#endif

int relu_launch(const float *x, float *y, long long n, void *stream)
{
	(void)stream;
	for (int pass = 0; pass < RELU_PASSES; pass++) {
		for (long long i = 0; i < n; i++)
			y[i] = x[i] > 0 ? x[i] : 0;
		__asm__ volatile("" : : : "memory");  /* each pass is done, not folded into one */
	}
	return 0;
}
