/*
 * nvcc: one nvcc compile of a .cu file to an object, its phases run side
 * by side (owner: B1; the command is ca-nvcc, see ca-nvcc(1)).
 *
 * nvcc runs its phases one after another: the host preprocessor and
 * cudafe++ (the host side); for each architecture the device preprocessor,
 * cicc and ptxas (the device side); then fatbinary and the host compiler,
 * which need both sides. On a unit that includes torch's headers cudafe++
 * and cicc take some 20 s each. The two sides share one file, the module
 * id, which cudafe++ writes and cicc reads, and cicc can make the id
 * itself. So ca_nvcc_compile asks nvcc for its plan (--dryrun), runs the
 * two sides at once, each cicc making the id into a file of its own, and
 * goes on only when every id equals cudafe++'s. What the commands print is
 * held back and shown in the plan's order, up to the first that failed,
 * as nvcc would have shown it; the exit status is that command's.
 */
#ifndef CA_NVCC_H
#define CA_NVCC_H

/*
 * The nvcc to run: $CA_NVCC_REAL, else $CUDA_HOME/bin/nvcc, else nvcc in
 * PATH, and never the running program itself. malloc'd, or NULL when
 * there is none.
 */
char *ca_nvcc_find_real(void);

/*
 * Do what `real args...` would do (args: nvcc's arguments, NULL-terminated)
 * and return its exit status; -1 when this is not a compile it runs
 * (another mode, a plan it does not recognise, module ids that differ, a
 * failure of its own): then it has shown nothing and left nothing behind,
 * *why (why may be NULL) says why, and the caller runs real. Its temporary files live in a directory of
 * its own below $TMPDIR, removed before it returns. SIGINT, SIGTERM and
 * SIGHUP kill the commands, remove that directory and then kill us.
 */
int ca_nvcc_compile(const char *real, char *const *args, const char **why);

#endif
