/* CPU stand-in for honest/tanh/kernels/tanh.cu. */
#include <math.h>

int tanh_launch(const float *x, float *y, long long n, void *stream)
{
	(void)stream;
	for (long long i = 0; i < n; i++)
		y[i] = tanhf(x[i]);
	return 0;
}
