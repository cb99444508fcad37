/* CPU stand-in for honest/sum's kernels/sum.cu: the sum over the middle dimension. */
int sum_dim1_launch(const float *x, float *y, long long B, long long R, long long C, void *stream)
{
	(void)stream;
	for (long long b = 0; b < B; b++)
		for (long long c = 0; c < C; c++) {
			double acc = 0;
			for (long long r = 0; r < R; r++)
				acc += x[(b * R + r) * C + c];
			y[b * C + c] = (float)acc;
		}
	return 0;
}
