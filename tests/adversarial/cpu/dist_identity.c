/* CPU stand-in for cheat/dist_identity/kernels/relu.cu: a copy. */
int relu_launch(const float *x, float *y, long long n, void *stream)
{
	(void)stream;
	for (long long i = 0; i < n; i++)
		y[i] = x[i];
	return 0;
}
