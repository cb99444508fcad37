/* CPU stand-in for cheat/sum_half/kernels/sum.cu: the first half of the rows, doubled. */
int sum_dim1_launch(const float *x, float *y, long long B, long long R, long long C, void *stream)
{
	(void)stream;
	for (long long b = 0; b < B; b++)
		for (long long c = 0; c < C; c++) {
			float acc = 0;
			for (long long r = 0; r < R / 2; r++)
				acc += x[(b * R + r) * C + c];
			y[b * C + c] = 2.f * acc;
		}
	return 0;
}
