/*
 * sandbox: see sandbox.h.
 *
 * Process layout. The caller (P) creates one child, the supervisor (I):
 * in the namespace modes I is created by clone() with new PID, mount,
 * IPC (and network, and user) namespaces, so it is PID 1 of its own PID
 * namespace; it builds the mount table, then forks the worker (W) which
 * drops privileges, sets limits, restricts itself and execs the command.
 * I reaps everything, and when W exits I exits, which makes the kernel kill
 * whatever W left behind. P kills I at the wall-clock limit: SIGKILL to a
 * PID namespace's init kills the whole tree, setsid() cannot escape it.
 * In the plain mode I is a child subreaper instead: orphans of W's tree
 * come back to I, which kills them.
 *
 * I and W report to P over a close-on-exec pipe, one line each:
 * "E message" setup failed, "X status message" the program could not be
 * run, "N note" something applied, "S status" W's wait status.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdnoreturn.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "file.h"
#include "paths.h"
#include "proc.h"
#include "sandbox.h"

/* Landlock's kernel ABI, spelled out: system headers lag behind kernels. */
#define LL_CREATE_RULESET_VERSION (1U << 0)
#define LL_RULE_PATH_BENEATH 1
#define LL_FS_EXECUTE (1ULL << 0)
#define LL_FS_WRITE_FILE (1ULL << 1)
#define LL_FS_READ_FILE (1ULL << 2)
#define LL_FS_READ_DIR (1ULL << 3)
#define LL_FS_REMOVE_DIR (1ULL << 4)
#define LL_FS_REMOVE_FILE (1ULL << 5)
#define LL_FS_MAKE_CHAR (1ULL << 6)
#define LL_FS_MAKE_DIR (1ULL << 7)
#define LL_FS_MAKE_REG (1ULL << 8)
#define LL_FS_MAKE_SOCK (1ULL << 9)
#define LL_FS_MAKE_FIFO (1ULL << 10)
#define LL_FS_MAKE_BLOCK (1ULL << 11)
#define LL_FS_MAKE_SYM (1ULL << 12)
#define LL_FS_REFER (1ULL << 13)     /* ABI 2 */
#define LL_FS_TRUNCATE (1ULL << 14)  /* ABI 3 */
#define LL_FS_IOCTL_DEV (1ULL << 15) /* ABI 5 */
#define LL_NET_BIND_TCP (1ULL << 0)  /* ABI 4 */
#define LL_NET_CONNECT_TCP (1ULL << 1)
#define LL_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0) /* ABI 6 */
#define LL_SCOPE_SIGNAL (1ULL << 1)

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif

struct ll_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net;
	uint64_t scoped;
};

struct ll_path_beneath_attr {
	uint64_t allowed_access;
	int32_t parent_fd;
} __attribute__((packed));

#if defined(__x86_64__)
#define SECCOMP_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SECCOMP_ARCH AUDIT_ARCH_AARCH64
#endif

enum mode { MODE_ROOT, MODE_USERNS, MODE_PLAIN };
static const char *const mode_names[] = {"root", "userns", "plain"};

/* Everything the children need, computed before the fork. */
struct plan {
	const struct ca_sandbox *cfg;
	const char *const *argv;
	enum mode mode;
	int netns;
	uid_t uid, outer_uid;
	gid_t gid, outer_gid;
	char dir[PATH_MAX];       /* working directory as P sees it */
	int dir_is_tmp;           /* no --dir: the private /tmp itself */
	char **envp;
	long long fsize_mb, nofile, nproc;
	int landlock_abi;
	int chan;                 /* write end of the report pipe */
	pid_t parent;
	char **hidden;            /* resolved --hide paths that exist */
	size_t nhidden;
	char **readonly;          /* resolved --ro paths, then the --show paths that need putting back */
	size_t nreadonly;
	size_t nstrict;           /* how many of them are --ro */
};

int ca_sandbox_landlock_abi(void)
{
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
	return abi < 0 ? 0 : (int)abi;
}

void ca_sandbox_init(struct ca_sandbox *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	cfg->uid = -1;
}

void ca_sandbox_result_free(struct ca_sandbox_result *res)
{
	jv_free(res->isolation);
	res->isolation = jv_null();
}

/* ---- messages from the children ---- */

static void chan_line(int chan, const char *tag, const char *fmt, va_list ap)
{
	char buf[1024];
	int n = snprintf(buf, sizeof buf, "%s ", tag);
	n += vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
	if (n > (int)sizeof buf - 2)
		n = (int)sizeof buf - 2;
	for (int i = 0; i < n; i++)
		if (buf[i] == '\n')
			buf[i] = ' ';
	buf[n++] = '\n';
	ssize_t w = write(chan, buf, (size_t)n);
	(void)w;
}

__attribute__((format(printf, 2, 3)))
static void note(int chan, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	chan_line(chan, "N", fmt, ap);
	va_end(ap);
}

/* Setup failed: tell P why (with strerror) and exit 125. */
__attribute__((format(printf, 2, 3)))
static noreturn void setup_fail(int chan, const char *fmt, ...)
{
	char msg[800];
	int saved = errno;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	dprintf(chan, "E %s: %s\n", msg, strerror(saved));
	_exit(CA_SANDBOX_SETUP_FAILED);
}

/* ---- mount namespace ---- */

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, text, strlen(text));
	int saved = errno;
	close(fd);
	errno = saved;
	return n == (ssize_t)strlen(text) ? 0 : -1;
}

static void map_ids(const struct plan *pl)
{
	char map[64];
	if (write_file("/proc/self/setgroups", "deny") != 0 && errno != ENOENT)
		setup_fail(pl->chan, "cannot write /proc/self/setgroups");
	snprintf(map, sizeof map, "%u %u 1\n", (unsigned)pl->outer_uid, (unsigned)pl->outer_uid);
	if (write_file("/proc/self/uid_map", map) != 0)
		setup_fail(pl->chan, "cannot write uid_map");
	snprintf(map, sizeof map, "%u %u 1\n", (unsigned)pl->outer_gid, (unsigned)pl->outer_gid);
	if (write_file("/proc/self/gid_map", map) != 0)
		setup_fail(pl->chan, "cannot write gid_map");
}

static int same_file(const char *path, int fd)
{
	struct stat a, b;
	return stat(path, &a) == 0 && fstat(fd, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* mkdir -p inside a freshly mounted tmpfs, so a mount point exists. */
static void make_mount_point(const struct plan *pl, const char *path, int is_dir)
{
	char buf[PATH_MAX];
	snprintf(buf, sizeof buf, "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		mkdir(buf, 0755);
		*p = '/';
	}
	if (is_dir)
		mkdir(buf, 0755);
	else
		close(open(buf, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
}

static void bind_fd(const struct plan *pl, int fd, const char *target, int is_dir)
{
	char source[64];
	snprintf(source, sizeof source, "/proc/self/fd/%d", fd);
	make_mount_point(pl, target, is_dir);
	if (mount(source, target, NULL, MS_BIND | MS_REC, NULL) != 0)
		setup_fail(pl->chan, "cannot bind %s back into place", target);
}

static void mount_tmpfs(const struct plan *pl, const char *where, const char *options, unsigned long flags)
{
	if (mount("tmpfs", where, "tmpfs", MS_NOSUID | MS_NODEV | flags, options) != 0)
		setup_fail(pl->chan, "cannot mount a private tmpfs on %s", where);
}

static void read_only_bind(const struct plan *pl, const char *source, const char *target)
{
	if (mount(source, target, NULL, MS_BIND | MS_REC, NULL) != 0)
		setup_fail(pl->chan, "cannot bind %s on %s", source, target);
	if (mount(NULL, target, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0 &&
			mount(NULL, target, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL) != 0)
		setup_fail(pl->chan, "cannot make %s read-only", target);
}

/* Returns 1 when a directory was covered with a tmpfs (to be made read-only later). */
static int hide_path(const struct plan *pl, const char *path)
{
	struct stat st;
	if (lstat(path, &st) != 0)
		return 0;  /* already gone, for example below the private /tmp */
	if (S_ISDIR(st.st_mode)) {
		mount_tmpfs(pl, path, "size=64k,nr_inodes=256,mode=0755", 0);  /* read-only once --ro paths are back */
		return 1;
	}
	read_only_bind(pl, "/dev/null", path);
	return 0;
}

/*
 * CA_SANDBOX_SKIP (comma list: landlock, ipc, proc, shm, seccomp) turns off
 * single measures, to find which one a program cannot live with. It is read
 * from the caller's environment, which the confined command never controls.
 */
static int skipped(const char *what)
{
	const char *list = getenv("CA_SANDBOX_SKIP");
	size_t n = strlen(what);
	for (const char *p = list; p && *p; ) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		if (len == n && strncmp(p, what, n) == 0)
			return 1;
		p = comma ? comma + 1 : p + len;
	}
	return 0;
}


static void hide_gpu_devices(const struct plan *pl)
{
	DIR *dev = opendir("/dev");
	struct dirent *e;
	char path[PATH_MAX];
	int hidden = 0;
	if (!dev)
		return;
	while ((e = readdir(dev))) {
		if (strncmp(e->d_name, "nvidia", 6) != 0)
			continue;
		snprintf(path, sizeof path, "/dev/%s", e->d_name);
		if (hide_path(pl, path))
			mount(NULL, path, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=64k,nr_inodes=256,mode=0755");
		hidden++;
	}
	closedir(dev);
	if (hidden)
		note(pl->chan, "gpu_devices_hidden");
}

static int below(const char *path, const char *top)
{
	size_t n = strlen(top);
	return strncmp(path, top, n) == 0 && (path[n] == '/' || path[n] == '\0' || (n == 1 && top[0] == '/'));
}

static void setup_mounts(const struct plan *pl)
{
	char options[128];
	struct stat st;
	/* Opened here, in our new mount namespace: a bind source must be a mount of ours. */
	int dir_fd = pl->dir_is_tmp ? -1 : open(pl->dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (!pl->dir_is_tmp && dir_fd < 0)
		setup_fail(pl->chan, "cannot open %s", pl->dir);
	int *ro_fd = ca_xcalloc(pl->nreadonly + 1, sizeof *ro_fd);
	for (size_t i = 0; i < pl->nreadonly; i++)
		if ((ro_fd[i] = open(pl->readonly[i], O_PATH | O_CLOEXEC)) < 0)
			setup_fail(pl->chan, "cannot open %s", pl->readonly[i]);
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		setup_fail(pl->chan, "cannot make the mount tree private");
	snprintf(options, sizeof options, "size=%lldm,nr_inodes=262144,mode=1777", pl->fsize_mb);
	mount_tmpfs(pl, "/tmp", options, 0);
	if (!skipped("shm") && stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode))
		mount_tmpfs(pl, "/dev/shm", options, 0);
	note(pl->chan, "private_tmp");
	char *covered = ca_xcalloc(pl->nhidden + 1, 1);
	for (size_t i = 0; i < pl->nhidden; i++)
		covered[i] = (char)hide_path(pl, pl->hidden[i]);
	if (!pl->cfg->gpu)
		hide_gpu_devices(pl);
	/* The working directory and --ro paths may have been below /tmp: put them back. */
	if (dir_fd >= 0 && !same_file(pl->dir, dir_fd))
		bind_fd(pl, dir_fd, pl->dir, 1);
	for (size_t i = 0; i < pl->nreadonly; i++) {
		int hidden = 0;
		for (size_t j = 0; j < pl->nhidden; j++)
			hidden |= strcmp(pl->readonly[i], pl->hidden[j]) == 0;
		if (hidden) {
			close(ro_fd[i]);
			continue;  /* hiding wins; a path strictly below a hidden one is put back */
		}
		if (fstat(ro_fd[i], &st) != 0)
			setup_fail(pl->chan, "cannot stat %s", pl->readonly[i]);
		if (same_file(pl->readonly[i], ro_fd[i]))
			read_only_bind(pl, pl->readonly[i], pl->readonly[i]);
		else {
			bind_fd(pl, ro_fd[i], pl->readonly[i], S_ISDIR(st.st_mode));
			if (mount(NULL, pl->readonly[i], NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0 &&
					mount(NULL, pl->readonly[i], NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL) != 0)
				setup_fail(pl->chan, "cannot make %s read-only", pl->readonly[i]);
		}
		close(ro_fd[i]);
	}
	free(ro_fd);
	for (size_t i = 0; i < pl->nhidden; i++)
		if (covered[i] &&
				mount(NULL, pl->hidden[i], NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=64k,nr_inodes=256,mode=0755") != 0)
			setup_fail(pl->chan, "cannot make the cover of %s read-only", pl->hidden[i]);
	free(covered);
	if (dir_fd >= 0)
		close(dir_fd);
	if (!skipped("proc") && mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) == 0)
		note(pl->chan, "private_proc");
}

static void loopback_up(const struct plan *pl)
{
	struct ifreq ifr;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		setup_fail(pl->chan, "cannot open a socket to configure loopback");
	memset(&ifr, 0, sizeof ifr);
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) == 0) {
		ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
		if (ioctl(fd, SIOCSIFFLAGS, &ifr) == 0)
			note(pl->chan, "loopback_up");
	}
	close(fd);
}

/* ---- the worker: limits, restrictions, exec ---- */

static void set_limit(const struct plan *pl, int resource, const char *name, rlim_t value)
{
	struct rlimit rl = {value, value};
	if (setrlimit(resource, &rl) != 0)
		setup_fail(pl->chan, "cannot set %s limit", name);
}

static void landlock_allow(const struct plan *pl, int ruleset, const char *path, uint64_t access)
{
	struct ll_path_beneath_attr rule = {.allowed_access = access};
	struct stat st;
	int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return;  /* nothing to allow on a path that is not there */
	if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode))
		rule.allowed_access &= LL_FS_WRITE_FILE | LL_FS_READ_FILE | LL_FS_EXECUTE | LL_FS_TRUNCATE | LL_FS_IOCTL_DEV;
	rule.parent_fd = fd;
	if (syscall(SYS_landlock_add_rule, ruleset, LL_RULE_PATH_BENEATH, &rule, 0) != 0)
		setup_fail(pl->chan, "cannot add a landlock rule for %s", path);
	close(fd);
}

static void apply_landlock(const struct plan *pl)
{
	int abi = pl->landlock_abi;
	struct ll_ruleset_attr attr = {0};
	size_t size = sizeof attr.handled_access_fs;
	if (abi <= 0 || skipped("landlock"))
		return;
	attr.handled_access_fs = LL_FS_WRITE_FILE | LL_FS_REMOVE_DIR | LL_FS_REMOVE_FILE | LL_FS_MAKE_CHAR |
		LL_FS_MAKE_DIR | LL_FS_MAKE_REG | LL_FS_MAKE_SOCK | LL_FS_MAKE_FIFO | LL_FS_MAKE_BLOCK | LL_FS_MAKE_SYM;
	if (abi >= 2)
		attr.handled_access_fs |= LL_FS_REFER;
	if (abi >= 3)
		attr.handled_access_fs |= LL_FS_TRUNCATE;
	if (abi >= 5 && !pl->cfg->gpu)
		attr.handled_access_fs |= LL_FS_IOCTL_DEV;
	if (abi >= 4) {
		size = offsetof(struct ll_ruleset_attr, scoped);
		/* Without a network namespace, TCP is refused here (and other sockets by seccomp). */
		if (!pl->cfg->allow_network && !pl->netns)
			attr.handled_access_net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP;
	}
	if (abi >= 6) {
		size = sizeof attr;
		attr.scoped = LL_SCOPE_ABSTRACT_UNIX_SOCKET | LL_SCOPE_SIGNAL;
	}
	int ruleset = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0U);
	if (ruleset < 0)
		setup_fail(pl->chan, "cannot create a landlock ruleset");
	uint64_t all = attr.handled_access_fs;
	landlock_allow(pl, ruleset, pl->dir, all);
	if (pl->mode != MODE_PLAIN) {
		landlock_allow(pl, ruleset, "/tmp", all);
		landlock_allow(pl, ruleset, "/dev/shm", all);
	}
	/* Devices: /dev/null and friends (and the GPU with --gpu) need write access, never creation. */
	landlock_allow(pl, ruleset, "/dev", all & (LL_FS_WRITE_FILE | LL_FS_TRUNCATE));
	/*
	 * The CUDA driver writes below /proc/self while it starts (seen on the
	 * H200 machine: error 304 from cudaGetDeviceCount without this rule).
	 * The command runs in its own PID namespace as an unprivileged uid, and
	 * Landlock refuses ptrace of processes outside the domain, so this
	 * opens no file of another process.
	 */
	if (pl->cfg->gpu)
		landlock_allow(pl, ruleset, "/proc", all & (LL_FS_WRITE_FILE | LL_FS_TRUNCATE));
	if (attr.handled_access_fs & LL_FS_IOCTL_DEV) {
		landlock_allow(pl, ruleset, "/dev/pts", LL_FS_IOCTL_DEV | LL_FS_WRITE_FILE | LL_FS_TRUNCATE);
		landlock_allow(pl, ruleset, "/dev/tty", LL_FS_IOCTL_DEV | LL_FS_WRITE_FILE | LL_FS_TRUNCATE);
	}
	if (syscall(SYS_landlock_restrict_self, ruleset, 0U) != 0)
		setup_fail(pl->chan, "cannot apply the landlock ruleset");
	close(ruleset);
	note(pl->chan, "landlock_fs");
	if (attr.handled_access_net)
		note(pl->chan, "landlock_net");
	if (attr.scoped)
		note(pl->chan, "landlock_scopes");
}

#ifndef SECCOMP_FILTER_FLAG_SPEC_ALLOW
#define SECCOMP_FILTER_FLAG_SPEC_ALLOW (1UL << 2)
#endif

/*
 * Install prog, the speculation mitigations left as the host's. Where
 * spec_store_bypass_disable or spectre_v2_user is "seccomp" (x86's
 * default before Linux 5.16), a filter installed without
 * SECCOMP_FILTER_FLAG_SPEC_ALLOW also forces Speculative Store Bypass
 * Disable and the indirect-branch barriers on the process for good,
 * which slows an interpreter by up to a half. The candidate, sandboxed,
 * is timed against a reference that is not: it would pay that against
 * the reference, and our clock could take its slower loop for hidden
 * work. Those mitigations guard the filtered process against the
 * others; the sandbox guards the others against it. Kernels before
 * 4.17 know no flags: plain prctl there.
 */
static int install_filter(struct sock_fprog *prog)
{
#ifdef SYS_seccomp
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_SPEC_ALLOW, prog) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -1;
#endif
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog);
}

/* Refuse sockets other than AF_UNIX and AF_NETLINK, and io_uring (which can open sockets too). */
static void apply_seccomp(const struct plan *pl)
{
#ifdef SECCOMP_ARCH
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SECCOMP_ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
#ifdef __x86_64__
		/* x32 system calls would bypass the numbers below. */
		BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
#endif
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_NETLINK, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EACCES),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof filter / sizeof filter[0], .filter = filter};
	if (install_filter(&prog) != 0)
		setup_fail(pl->chan, "cannot install the seccomp filter");
	note(pl->chan, "seccomp");
#else
	(void)pl;
#endif
}

static noreturn void exec_command(const struct plan *pl)
{
	const char *name = pl->argv[0], *path = NULL;
	for (size_t i = 0; pl->envp[i]; i++)
		if (strncmp(pl->envp[i], "PATH=", 5) == 0)
			path = pl->envp[i] + 5;
	int err = ENOENT;
	if (strchr(name, '/')) {
		execve(name, (char *const *)pl->argv, pl->envp);
		err = errno;
	} else {
		char full[PATH_MAX];
		const char *dir = path && *path ? path : "/usr/bin:/bin";
		for (;;) {
			const char *colon = strchr(dir, ':');
			int len = colon ? (int)(colon - dir) : (int)strlen(dir);
			snprintf(full, sizeof full, "%.*s/%s", len, len ? dir : ".", name);
			execve(full, (char *const *)pl->argv, pl->envp);
			if (errno != ENOENT && errno != ENOTDIR)
				err = errno;
			if (!colon)
				break;
			dir = colon + 1;
		}
	}
	dprintf(pl->chan, "X %d cannot run %s: %s\n", err == ENOENT ? 127 : 126, name, strerror(err));
	_exit(err == ENOENT ? 127 : 126);
}

/*
 * Descriptors we were given beyond 0-2 (a directory outside DIR, a socket)
 * would carry past every restriction: none survives the exec.
 */
static void close_inherited_fds(void)
{
	if (syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC, Linux 5.11 */) == 0)
		return;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	if (!d) {
		for (int fd = 3; fd < 65536; fd++)
			fcntl(fd, F_SETFD, FD_CLOEXEC);
		return;
	}
	while ((e = readdir(d))) {
		int fd = atoi(e->d_name);
		if (fd > 2 && fd != dirfd(d))
			fcntl(fd, F_SETFD, FD_CLOEXEC);
	}
	closedir(d);
}

/*
 * The kernel's OOM killer takes the sandboxed command, and whatever it
 * forks, before any process of ours: its score is raised to the most
 * (an unprivileged process may raise it, not lower it back). Memory a
 * command hides from its own score (files in its /tmp or /dev/shm, a
 * memfd) would otherwise make the biggest process on the host, a
 * trusted reference or ca itself, the one that dies; its death frees
 * that memory (the private tmpfs goes with its last process).
 */
static void first_to_go(const struct plan *pl)
{
	int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return;  /* no /proc: no OOM score either */
	if (fd < 0 || write(fd, "1000", 4) != 4)
		setup_fail(pl->chan, "cannot raise the OOM score (/proc/self/oom_score_adj)");
	close(fd);
}

static noreturn void worker_main(const struct plan *pl)
{
	const struct ca_sandbox *cfg = pl->cfg;
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	for (int s = 1; s < NSIG; s++)
		sigaction(s, &dfl, NULL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setsid();  /* its own process group, away from our terminal */
	first_to_go(pl);
	if (pl->outer_uid == 0) {
		if (setgroups(0, NULL) != 0)
			setup_fail(pl->chan, "cannot clear supplementary groups");
		if (setresgid(pl->gid, pl->gid, pl->gid) != 0)
			setup_fail(pl->chan, "cannot change to gid %u", (unsigned)pl->gid);
		if (setresuid(pl->uid, pl->uid, pl->uid) != 0)
			setup_fail(pl->chan, "cannot change to uid %u", (unsigned)pl->uid);
	}
	if (chdir(pl->dir) != 0)
		setup_fail(pl->chan, "cannot enter %s as uid %u (its parents must be searchable)", pl->dir, (unsigned)getuid());
	set_limit(pl, RLIMIT_CORE, "core", 0);
	set_limit(pl, RLIMIT_NOFILE, "nofile", (rlim_t)pl->nofile);
	set_limit(pl, RLIMIT_NPROC, "nproc", (rlim_t)pl->nproc);
	set_limit(pl, RLIMIT_FSIZE, "fsize", (rlim_t)pl->fsize_mb << 20);
	if (cfg->cpu_s > 0) {
		/* SIGXCPU (status 152) at the limit, SIGKILL a second later if it is caught. */
		struct rlimit rl = {(rlim_t)cfg->cpu_s, (rlim_t)cfg->cpu_s + 1};
		if (setrlimit(RLIMIT_CPU, &rl) != 0)
			setup_fail(pl->chan, "cannot set cpu limit");
	}
	if (cfg->mem_mb > 0)
		set_limit(pl, RLIMIT_AS, "address space", (rlim_t)cfg->mem_mb << 20);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		setup_fail(pl->chan, "cannot set no_new_privs");
	apply_landlock(pl);
	if (!cfg->allow_network && !skipped("seccomp"))
		apply_seccomp(pl);
	/* Die with the supervisor (set after the uid change, which clears it). */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	close_inherited_fds();
	exec_command(pl);
}

/* ---- the supervisor ---- */

static volatile sig_atomic_t supervisor_stop;
static void on_stop(int sig) { supervisor_stop = sig; }

/* Plain mode: kill every process that came back to us as subreaper. */
static void kill_descendants(void)
{
	char path[64], buf[4096];
	snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
	for (int round = 0; round < 200; round++) {
		int any = 0, fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			ssize_t n = read(fd, buf, sizeof buf - 1);
			close(fd);
			buf[n > 0 ? n : 0] = '\0';
			for (char *p = buf, *end; *p; p = end) {
				long pid = strtol(p, &end, 10);
				if (end == p)
					break;
				kill((pid_t)pid, SIGKILL);
				any = 1;
			}
		}
		while (waitpid(-1, NULL, WNOHANG) > 0)
			any = 1;
		if (!any)
			return;
		struct timespec ts = {0, 5000000};
		nanosleep(&ts, NULL);
	}
}

static noreturn void supervisor_main(const struct plan *pl)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* In a new PID namespace our parent is outside it and shows as 0. */
	if (getppid() != pl->parent && getppid() != 0)
		_exit(CA_SANDBOX_SETUP_FAILED);
	if (pl->mode == MODE_USERNS)
		map_ids(pl);
	if (pl->mode != MODE_PLAIN) {
		setup_mounts(pl);
		if (pl->netns)
			loopback_up(pl);
	} else {
		prctl(PR_SET_CHILD_SUBREAPER, 1);
	}
	struct sigaction sa = {.sa_handler = on_stop};
	sigaction(SIGTERM, &sa, NULL);
	pid_t w = fork();
	if (w < 0)
		setup_fail(pl->chan, "cannot fork");
	if (w == 0)
		worker_main(pl);
	int st = 0, killed = 0;
	for (;;) {
		pid_t r = wait(&st);
		if (r == w)
			break;
		if (r < 0 && errno == ECHILD)
			_exit(CA_SANDBOX_SETUP_FAILED);
		if (supervisor_stop && !killed) {
			kill(-w, SIGKILL);
			kill(w, SIGKILL);
			killed = 1;
		}
	}
	dprintf(pl->chan, "S %d\n", st);
	if (pl->mode == MODE_PLAIN) {
		kill(-w, SIGKILL);
		kill_descendants();
	}
	_exit(0);
}

/* ---- the caller's side ---- */

static uid_t chown_uid;
static gid_t chown_gid;
static int chown_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	/* A file linked in from elsewhere (ca-build's precompiled header) stays its owner's: read-only here. */
	if (flag == FTW_F && S_ISREG(st->st_mode) && st->st_nlink > 1)
		return 0;
	return lchown(path, chown_uid, chown_gid) == 0 ? 0 : -1;
}

static const char *getenv_or(const char *name, const char *fallback)
{
	const char *v = getenv(name);
	return v && *v ? v : fallback;
}

static char **build_env(const struct ca_sandbox *cfg, const char *home, const char *tmpdir)
{
	size_t cap = cfg->nenv + 8, n = 0;
	char **envp = ca_xcalloc(cap, sizeof *envp);
	char buf[PATH_MAX + 64];
	snprintf(buf, sizeof buf, "PATH=%s", getenv_or("PATH", "/usr/local/bin:/usr/bin:/bin"));
	envp[n++] = ca_xstrdup(buf);
	snprintf(buf, sizeof buf, "HOME=%s", home);
	envp[n++] = ca_xstrdup(buf);
	snprintf(buf, sizeof buf, "LANG=%s", getenv_or("LANG", "C.UTF-8"));
	envp[n++] = ca_xstrdup(buf);
	snprintf(buf, sizeof buf, "TMPDIR=%s", tmpdir);
	envp[n++] = ca_xstrdup(buf);
	if (getenv("CUDA_VISIBLE_DEVICES")) {
		snprintf(buf, sizeof buf, "CUDA_VISIBLE_DEVICES=%s", getenv("CUDA_VISIBLE_DEVICES"));
		envp[n++] = ca_xstrdup(buf);
	}
	for (size_t i = 0; i < cfg->nenv; i++) {
		const char *eq = strchr(cfg->env[i], '=');
		size_t name_len = eq ? (size_t)(eq - cfg->env[i]) + 1 : strlen(cfg->env[i]);
		size_t j;
		for (j = 0; j < n; j++)
			if (strncmp(envp[j], cfg->env[i], name_len) == 0)
				break;
		if (j < n)
			free(envp[j]);
		else
			n++;
		envp[j] = ca_xstrdup(cfg->env[i]);
	}
	envp[n] = NULL;
	return envp;
}

static void free_strings(char **v)
{
	if (!v)
		return;
	for (size_t i = 0; v[i]; i++)
		free(v[i]);
	free(v);
}

static char **resolve_paths(const char **paths, size_t n, size_t *count)
{
	char **out = ca_xcalloc(n + 1, sizeof *out);
	char buf[PATH_MAX];
	*count = 0;
	for (size_t i = 0; i < n; i++)
		if (realpath(paths[i], buf))
			out[(*count)++] = ca_xstrdup(buf);
	return out;
}

static jv string_array(char **v, size_t n)
{
	jv a = jv_array();
	for (size_t i = 0; i < n; i++)
		a = jv_array_append(a, jv_string(v[i]));
	return a;
}

static int has_note(jv notes, const char *name)
{
	int found = 0;
	jv_array_foreach(notes, i, x) {
		if (strcmp(jv_string_value(x), name) == 0)
			found = 1;
		jv_free(x);
	}
	return found;
}

static jv describe(const struct plan *pl, jv notes)
{
	const struct ca_sandbox *cfg = pl->cfg;
	int ns = pl->mode != MODE_PLAIN;
	jv iso = jv_object();
	jv not_applied = jv_array();
	iso = jv_object_set(iso, jv_string("mode"), jv_string(mode_names[pl->mode]));
	iso = jv_object_set(iso, jv_string("uid"), jv_number(pl->uid));
	iso = jv_object_set(iso, jv_string("gid"), jv_number(pl->gid));
	iso = jv_object_set(iso, jv_string("user_namespace"), jv_bool(pl->mode == MODE_USERNS));
	iso = jv_object_set(iso, jv_string("pid_namespace"), jv_bool(ns));
	iso = jv_object_set(iso, jv_string("mount_namespace"), jv_bool(ns));
	iso = jv_object_set(iso, jv_string("ipc_namespace"), jv_bool(ns));
	iso = jv_object_set(iso, jv_string("net_namespace"), jv_bool(pl->netns));
	iso = jv_object_set(iso, jv_string("network"), jv_string(cfg->allow_network ? "host" :
		pl->netns ? "loopback only" : has_note(notes, "seccomp") ? "local sockets only (seccomp, landlock)" : "host"));
	iso = jv_object_set(iso, jv_string("private_tmp"), jv_bool(has_note(notes, "private_tmp")));
	iso = jv_object_set(iso, jv_string("private_proc"), jv_bool(has_note(notes, "private_proc")));
	iso = jv_object_set(iso, jv_string("dir"), jv_string(pl->dir));
	iso = jv_object_set(iso, jv_string("hidden"), string_array(pl->hidden, ns ? pl->nhidden : 0));
	iso = jv_object_set(iso, jv_string("read_only"), string_array(pl->readonly, ns ? pl->nreadonly : pl->nstrict));
	iso = jv_object_set(iso, jv_string("gpu"), jv_bool(cfg->gpu));
	iso = jv_object_set(iso, jv_string("gpu_devices_hidden"), jv_bool(has_note(notes, "gpu_devices_hidden")));
	iso = jv_object_set(iso, jv_string("landlock_abi"), jv_number(pl->landlock_abi));
	iso = jv_object_set(iso, jv_string("landlock_fs"), jv_bool(has_note(notes, "landlock_fs")));
	iso = jv_object_set(iso, jv_string("landlock_net"), jv_bool(has_note(notes, "landlock_net")));
	iso = jv_object_set(iso, jv_string("landlock_scopes"), jv_bool(has_note(notes, "landlock_scopes")));
	iso = jv_object_set(iso, jv_string("seccomp"), jv_bool(has_note(notes, "seccomp")));
	iso = jv_object_set(iso, jv_string("no_new_privs"), jv_true());
	jv lim = jv_object();
	lim = jv_object_set(lim, jv_string("core"), jv_number(0));
	lim = jv_object_set(lim, jv_string("cpu_s"), cfg->cpu_s > 0 ? jv_number((double)cfg->cpu_s) : jv_null());
	lim = jv_object_set(lim, jv_string("fsize_mb"), jv_number((double)pl->fsize_mb));
	lim = jv_object_set(lim, jv_string("as_mb"), cfg->mem_mb > 0 ? jv_number((double)cfg->mem_mb) : jv_null());
	lim = jv_object_set(lim, jv_string("nofile"), jv_number((double)pl->nofile));
	lim = jv_object_set(lim, jv_string("nproc"), jv_number((double)pl->nproc));
	iso = jv_object_set(iso, jv_string("rlimits"), lim);
	iso = jv_object_set(iso, jv_string("tree_kill"), jv_string(ns ? "pid namespace" : "process group and subreaper"));
	if (!ns)
		not_applied = jv_array_append(not_applied, jv_string("namespaces (refused by the kernel, or CA_SANDBOX_NO_NAMESPACES set)"));
	if (!ns && !cfg->gpu)
		not_applied = jv_array_append(not_applied, jv_string("hiding GPU device nodes (needs a mount namespace)"));
	if (ns && !has_note(notes, "private_proc"))
		not_applied = jv_array_append(not_applied, jv_string("private /proc (the kernel refused to mount one)"));
	if (pl->landlock_abi == 0)
		not_applied = jv_array_append(not_applied, jv_string("landlock (not in this kernel)"));
	if (!ns && pl->landlock_abi < 4 && !cfg->allow_network)
		not_applied = jv_array_append(not_applied, jv_string("landlock TCP rules (kernel landlock ABI < 4)"));
	if (pl->outer_uid != 0)
		not_applied = jv_array_append(not_applied, jv_string("separate uid (needs root)"));
	iso = jv_object_set(iso, jv_string("not_applied"), not_applied);
	return iso;
}

/* Wait for pid until deadline (0: none) or a stop signal. 1 exited, 0 deadline, -1 stopped by signal. */
static int wait_child(pid_t pid, int pidfd, double deadline)
{
	for (;;) {
		siginfo_t info;
		memset(&info, 0, sizeof info);
		if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid)
			return 1;
		if (supervisor_stop)
			return -1;
		int ms = 50;
		if (deadline > 0) {
			double left = deadline - ca_proc_now();
			if (left <= 0)
				return 0;
			if (left * 1000 < ms || pidfd >= 0)
				ms = (int)(left * 1000) + 1;
		} else if (pidfd >= 0) {
			ms = -1;
		}
		if (pidfd >= 0) {
			struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
			poll(&pfd, 1, ms);
		} else {
			struct timespec ts = {0, (long)ms * 1000000L};
			nanosleep(&ts, NULL);
		}
	}
}

static int fail_early(struct ca_sandbox_result *res, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(res->error, sizeof res->error, fmt, ap);
	va_end(ap);
	res->status = CA_SANDBOX_SETUP_FAILED;
	return res->status;
}

/* Why a user namespace could be created but not set up (some hosts forbid its mounts). */
static char userns_failed[512];

/* The plan's identity and limits; the command itself is checked before the sandbox user is looked up. */
static void plan_defaults(struct plan *pl, const struct ca_sandbox *cfg, const char *const *argv)
{
	memset(pl, 0, sizeof *pl);
	pl->cfg = cfg;
	pl->argv = argv;
	pl->outer_uid = geteuid();
	pl->outer_gid = getegid();
	pl->fsize_mb = cfg->fsize_mb > 0 ? cfg->fsize_mb : 1024;
	pl->nofile = cfg->nofile > 0 ? cfg->nofile : 4096;
	pl->nproc = cfg->nproc > 0 ? cfg->nproc : 4096;
	pl->landlock_abi = ca_sandbox_landlock_abi();
	pl->parent = getpid();
}

/* Root runs the command as cfg->uid (nobody by default); anyone else as themselves. */
static void plan_user(struct plan *pl, int root)
{
	if (root) {
		pl->uid = (uid_t)(pl->cfg->uid >= 0 ? pl->cfg->uid : 65534);
		struct passwd *pw = getpwuid(pl->uid);
		pl->gid = pw ? pw->pw_gid : (gid_t)pl->uid;
	} else {
		pl->uid = pl->outer_uid;
		pl->gid = pl->outer_gid;
	}
}

/* The clone flags for the namespace modes, and the mode to try first. */
static unsigned long plan_namespaces(struct plan *pl, int root)
{
	const struct ca_sandbox *cfg = pl->cfg;
	unsigned long flags = CLONE_NEWPID | CLONE_NEWNS | (skipped("ipc") ? 0 : CLONE_NEWIPC) | (cfg->allow_network ? 0 : CLONE_NEWNET);
	pl->mode = root ? MODE_ROOT : MODE_USERNS;
	/* For tests, and for hosts where namespaces misbehave: the plain mode on request. */
	const char *force = getenv("CA_SANDBOX_NO_NAMESPACES");
	if ((force && *force && strcmp(force, "0") != 0) || userns_failed[0])
		pl->mode = MODE_PLAIN;
	if (!root)
		flags |= CLONE_NEWUSER;
	pl->netns = !cfg->allow_network;
	return flags;
}

static void close_channel(int chan[2])
{
	close(chan[0]);
	close(chan[1]);
}

/*
 * The --show paths the private /tmp would hide, after the --ro ones: those
 * below /tmp or /dev/shm, neither the working directory's nor above it.
 */
static void add_shown(struct plan *pl)
{
	const struct ca_sandbox *cfg = pl->cfg;
	size_t n;
	char **shown = resolve_paths(cfg->show, cfg->nshow, &n);
	pl->readonly = ca_xrealloc(pl->readonly, (pl->nreadonly + n + 1) * sizeof *pl->readonly);
	for (size_t i = 0; i < n; i++) {
		int hidden = (below(shown[i], "/tmp") || below(shown[i], "/dev/shm")) &&
			strcmp(shown[i], "/tmp") != 0 && strcmp(shown[i], "/dev/shm") != 0;
		if (hidden && !(cfg->dir && (below(shown[i], pl->dir) || below(pl->dir, shown[i]))))
			pl->readonly[pl->nreadonly++] = shown[i];
		else
			free(shown[i]);
	}
	pl->readonly[pl->nreadonly] = NULL;
	free(shown);
}

/*
 * Resolve --dir, --hide, --ro and --show; 0, or the setup-failed status with the
 * report pipe closed (and the resolved paths freed) when they cannot be used.
 */
static int plan_paths(struct plan *pl, int root, int chan[2], struct ca_sandbox_result *res)
{
	const struct ca_sandbox *cfg = pl->cfg;
	if (cfg->dir) {
		struct stat st;
		if (!realpath(cfg->dir, pl->dir) || stat(pl->dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
			close_channel(chan);
			return fail_early(res, "%s: not a directory", cfg->dir);
		}
		if (root && strcmp(pl->dir, "/") == 0) {
			close_channel(chan);
			return fail_early(res, "refusing to give / to the sandbox user");
		}
	}
	pl->hidden = resolve_paths(cfg->hide, cfg->nhide, &pl->nhidden);
	pl->readonly = resolve_paths(cfg->ro, cfg->nro, &pl->nreadonly);
	pl->nstrict = pl->nreadonly;
	add_shown(pl);
	for (size_t i = 0; cfg->dir && i < pl->nhidden; i++) {
		if (below(pl->dir, pl->hidden[i])) {
			close_channel(chan);
			fail_early(res, "%s: the working directory is below hidden %s", cfg->dir, pl->hidden[i]);
			free_strings(pl->hidden);
			free_strings(pl->readonly);
			return res->status;
		}
	}
	return 0;
}

/*
 * Without a mount namespace, --ro still holds through Landlock for
 * paths outside DIR (nothing outside it is writable); --hide cannot.
 */
static int read_only_by_landlock(const struct plan *pl)
{
	int ro_by_landlock = pl->landlock_abi > 0;
	for (size_t i = 0; i < pl->nstrict && pl->cfg->dir; i++)
		if (below(pl->readonly[i], pl->dir) || below(pl->dir, pl->readonly[i]))
			ro_by_landlock = 0;
	return ro_by_landlock;
}

/*
 * Start the supervisor: in the namespaces, or in the plain mode where they
 * are refused. Its pid, or -1 with errno (and res->error where it says more).
 */
static pid_t start_supervisor(struct plan *pl, unsigned long flags, int root, char *tmpdir_made, size_t tmpdir_size,
	struct ca_sandbox_result *res)
{
	const struct ca_sandbox *cfg = pl->cfg;
	pid_t pid = -1;
	for (int attempt = 0; attempt < 2; attempt++) {
		if (pl->mode == MODE_PLAIN && (cfg->nhide || (cfg->nro && !read_only_by_landlock(pl)))) {
			/* Hiding is a promise: refuse rather than run with the paths in reach. */
			errno = EPERM;
			pid = -1;
			snprintf(res->error, sizeof res->error, "%s needs a mount namespace, which this host refuses%s%s",
				cfg->nhide ? "--hide" : "--ro (without Landlock, or inside DIR)",
				userns_failed[0] ? ": " : "", userns_failed);
			break;
		}
		if (pl->mode == MODE_PLAIN) {
			pl->netns = 0;
			if (!cfg->dir) {
				snprintf(tmpdir_made, tmpdir_size, "%s/ca-sandbox.XXXXXX", getenv_or("TMPDIR", "/tmp"));
				if (!mkdtemp(tmpdir_made))
					break;
				snprintf(pl->dir, sizeof pl->dir, "%s", tmpdir_made);
				if (root && chown(tmpdir_made, pl->uid, pl->gid) != 0)
					break;
			}
		} else if (!cfg->dir) {
			snprintf(pl->dir, sizeof pl->dir, "/tmp");
			pl->dir_is_tmp = 1;
		}
		if (root && cfg->dir) {
			chown_uid = pl->uid;
			chown_gid = pl->gid;
			if (nftw(pl->dir, chown_entry, 32, FTW_PHYS | FTW_MOUNT) != 0) {
				int e = errno;
				fail_early(res, "cannot give %s to uid %u: %s", pl->dir, (unsigned)pl->uid, strerror(e));
				return -1;
			}
		}
		free_strings(pl->envp);
		pl->envp = build_env(cfg, pl->dir, pl->mode == MODE_PLAIN ? pl->dir : "/tmp");
		if (pl->mode == MODE_PLAIN)
			pid = fork();
		else
			pid = (pid_t)syscall(SYS_clone, SIGCHLD | flags, NULL, NULL, NULL, NULL);
		if (pid == 0)
			supervisor_main(pl);
		if (pid > 0 || pl->mode == MODE_PLAIN)
			break;
		pl->mode = MODE_PLAIN;  /* namespaces refused: do what we can without */
	}
	return pid;
}

/*
 * Wait for the supervisor under the wall clock and our own termination
 * signals, then reap it into *st. The stop signal that came, or 0.
 */
static int supervise(pid_t pid, enum mode mode, double time_s, int *st, struct ca_sandbox_result *res)
{
	struct sigaction sa = {.sa_handler = on_stop}, old_term, old_int, old_hup;
	supervisor_stop = 0;
	sigaction(SIGTERM, &sa, &old_term);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGHUP, &sa, &old_hup);
	double start = ca_proc_now();
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	int w = wait_child(pid, pidfd, time_s > 0 ? start + time_s : 0);
	if (w <= 0) {
		res->timed_out = w == 0;
		if (mode == MODE_PLAIN) {
			kill(pid, SIGTERM);  /* the supervisor kills the tree it reaped into itself */
			if (wait_child(pid, pidfd, ca_proc_now() + 2) != 1)
				kill(pid, SIGKILL);
		} else {
			kill(pid, SIGKILL);
		}
	}
	struct rusage ru;
	memset(&ru, 0, sizeof ru);
	while (wait4(pid, st, 0, &ru) < 0 && errno == EINTR)
		;
	res->wall_s = ca_proc_now() - start;
	res->max_rss_kb = ru.ru_maxrss;
	if (pidfd >= 0)
		close(pidfd);
	int stopped_by = supervisor_stop;
	sigaction(SIGTERM, &old_term, NULL);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGHUP, &old_hup, NULL);
	return stopped_by;
}

/* What the supervisor and the worker said over the report pipe. */
struct reports {
	jv notes;
	int have_status, worker_status, exec_status;
};

/* Read the report pipe (closing it) into buf, a NUL-terminated string. */
static void read_reports(int fd, char *buf, size_t size)
{
	size_t len = 0;
	fcntl(fd, F_SETFL, O_NONBLOCK);
	for (int spins = 0; len < size - 1 && spins < 100;) {
		ssize_t n = read(fd, buf + len, size - 1 - len);
		if (n > 0) {
			len += (size_t)n;
		} else if (n == 0) {
			break;
		} else if (errno == EAGAIN) {
			/* A worker killed between fork and exec may hold the pipe a moment longer. */
			struct pollfd pfd = {.fd = fd, .events = POLLIN};
			poll(&pfd, 1, 10);
			spins++;
		} else if (errno != EINTR) {
			break;
		}
	}
	buf[len] = '\0';
	close(fd);
}

/* Parse the report lines in buf (modified); an error message lands in res->error. */
static struct reports parse_reports(char *buf, struct ca_sandbox_result *res)
{
	struct reports r = {.notes = jv_array()};
	for (char *line = buf, *next; *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		else
			next = line + strlen(line);
		if (line[0] == 'N' && line[1] == ' ')
			r.notes = jv_array_append(r.notes, jv_string(line + 2));
		else if (line[0] == 'E' && line[1] == ' ' && !res->error[0])
			snprintf(res->error, sizeof res->error, "%s", line + 2);
		else if (line[0] == 'S' && line[1] == ' ')
			r.have_status = 1, r.worker_status = atoi(line + 2);
		else if (line[0] == 'X' && line[1] == ' ') {
			char *msg;
			r.exec_status = (int)strtol(line + 2, &msg, 10);
			snprintf(res->error, sizeof res->error, "%s", *msg ? msg + 1 : msg);
		}
	}
	return r;
}

/* The run's status from, in order: the clock, our stop signal, a setup error, the worker, the supervisor. */
static void set_status(struct ca_sandbox_result *res, const struct reports *r, int stopped_by, int st)
{
	if (res->timed_out) {
		res->status = CA_PROC_TIMEOUT_STATUS;
	} else if (stopped_by) {
		res->status = 128 + stopped_by;
	} else if (res->error[0] && !r->exec_status) {
		res->status = CA_SANDBOX_SETUP_FAILED;
	} else if (r->have_status) {
		if (WIFSIGNALED(r->worker_status)) {
			res->signal = WTERMSIG(r->worker_status);
			res->status = 128 + res->signal;
		} else {
			res->status = WEXITSTATUS(r->worker_status);
		}
	} else if (WIFSIGNALED(st)) {
		res->signal = WTERMSIG(st);
		res->status = 128 + res->signal;
	} else {
		res->status = WEXITSTATUS(st) ? WEXITSTATUS(st) : CA_SANDBOX_SETUP_FAILED;
		if (!res->error[0])
			snprintf(res->error, sizeof res->error, "the sandbox supervisor ended without a status");
	}
}

static void free_plan(struct plan *pl)
{
	free_strings(pl->envp);
	free_strings(pl->hidden);
	free_strings(pl->readonly);
}

/*
 * The user namespace was created but could not be set up (uid map or
 * mounts refused): the command never ran, so run it in the plain mode.
 */
static void rerun_plain(const struct ca_sandbox *cfg, const char *const *argv, struct ca_sandbox_result *res)
{
	snprintf(userns_failed, sizeof userns_failed, "%s", res->error);
	ca_sandbox_result_free(res);
	ca_sandbox_run(cfg, argv, res);
	jv na = jv_object_get(jv_copy(res->isolation), jv_string("not_applied"));
	if (jv_get_kind(na) != JV_KIND_ARRAY) {
		jv_free(na);
		na = jv_array();
	}
	char why[640];
	snprintf(why, sizeof why, "user namespace (set up failed: %s)", userns_failed);
	na = jv_array_append(na, jv_string(why));
	res->isolation = jv_object_set(res->isolation, jv_string("not_applied"), na);
	userns_failed[0] = '\0';
}

int ca_sandbox_run(const struct ca_sandbox *cfg, const char *const *argv, struct ca_sandbox_result *res)
{
	struct plan pl;
	char tmpdir_made[64] = "";
	memset(res, 0, sizeof *res);
	res->isolation = jv_object();
	plan_defaults(&pl, cfg, argv);
	if (!argv || !argv[0])
		return fail_early(res, "no command given");
	int root = pl.outer_uid == 0;
	plan_user(&pl, root);

	/* Try the namespaces first; fall back to the plain mode. */
	int chan[2];
	if (pipe2(chan, O_CLOEXEC) != 0)
		return fail_early(res, "cannot create a pipe: %s", strerror(errno));
	pl.chan = chan[1];
	unsigned long flags = plan_namespaces(&pl, root);
	if (plan_paths(&pl, root, chan, res) != 0)
		return res->status;

	fflush(NULL);
	pid_t pid = start_supervisor(&pl, flags, root, tmpdir_made, sizeof tmpdir_made, res);
	close(chan[1]);
	if (pid < 0) {
		int e = errno;
		close(chan[0]);
		free_plan(&pl);
		if (res->error[0]) {
			res->status = CA_SANDBOX_SETUP_FAILED;
			return res->status;
		}
		return fail_early(res, "cannot start the sandbox: %s", strerror(e));
	}

	int st = 0;
	int stopped_by = supervise(pid, pl.mode, cfg->time_s, &st, res);
	char buf[8192];
	read_reports(chan[0], buf, sizeof buf);
	struct reports reports = parse_reports(buf, res);
	set_status(res, &reports, stopped_by, st);
	jv_free(res->isolation);
	res->isolation = describe(&pl, reports.notes);
	jv_free(reports.notes);

	if (tmpdir_made[0])
		ca_file_remove_tree(tmpdir_made);
	free_plan(&pl);
	if (pl.mode == MODE_USERNS && res->status == CA_SANDBOX_SETUP_FAILED && !reports.exec_status && !res->timed_out &&
			!stopped_by && !userns_failed[0])
		rerun_plain(cfg, argv, res);
	return res->status;
}

jv ca_sandbox_report(const struct ca_sandbox_result *res)
{
	jv r = jv_object();
	r = jv_object_set(r, jv_string("status"), jv_number(res->status));
	r = jv_object_set(r, jv_string("signal"), res->signal ? jv_number(res->signal) : jv_null());
	r = jv_object_set(r, jv_string("timed_out"), jv_bool(res->timed_out));
	r = jv_object_set(r, jv_string("wall_s"), jv_number(res->wall_s));
	r = jv_object_set(r, jv_string("max_rss_kb"), jv_number((double)res->max_rss_kb));
	if (res->error[0])
		r = jv_object_set(r, jv_string("error"), jv_string(res->error));
	r = jv_object_set(r, jv_string("isolation"), jv_copy(res->isolation));
	return r;
}

static void push(char ***v, size_t *n, size_t *cap, const char *s)
{
	if (*n + 1 >= *cap)
		*v = ca_xrealloc(*v, (*cap = *cap * 2 + 16) * sizeof **v);
	(*v)[(*n)++] = s ? ca_xstrdup(s) : NULL;
}

static void push_num(char ***v, size_t *n, size_t *cap, const char *opt, double x)
{
	char buf[64];
	push(v, n, cap, opt);
	snprintf(buf, sizeof buf, "%.17g", x);
	push(v, n, cap, buf);
}

char **ca_sandbox_command(const struct ca_sandbox *cfg, const char *report, const char *const *argv)
{
	char **v = NULL, prog[PATH_MAX + 16];
	size_t n = 0, cap = 0;
	snprintf(prog, sizeof prog, "%s/ca-sandbox", ca_paths_bindir());
	push(&v, &n, &cap, access(prog, X_OK) == 0 ? prog : "ca-sandbox");
	if (cfg->allow_network)
		push(&v, &n, &cap, "--allow-network");
	if (cfg->cpu_s > 0)
		push_num(&v, &n, &cap, "--cpu", (double)cfg->cpu_s);
	if (cfg->dir) {
		push(&v, &n, &cap, "--dir");
		push(&v, &n, &cap, cfg->dir);
	}
	for (size_t i = 0; i < cfg->nenv; i++) {
		push(&v, &n, &cap, "--env");
		push(&v, &n, &cap, cfg->env[i]);
	}
	if (cfg->fsize_mb > 0)
		push_num(&v, &n, &cap, "--fsize", (double)cfg->fsize_mb);
	if (cfg->gpu)
		push(&v, &n, &cap, "--gpu");
	for (size_t i = 0; i < cfg->nhide; i++) {
		push(&v, &n, &cap, "--hide");
		push(&v, &n, &cap, cfg->hide[i]);
	}
	if (cfg->mem_mb > 0)
		push_num(&v, &n, &cap, "--mem", (double)cfg->mem_mb);
	if (cfg->nofile > 0)
		push_num(&v, &n, &cap, "--nofile", (double)cfg->nofile);
	if (cfg->nproc > 0)
		push_num(&v, &n, &cap, "--nproc", (double)cfg->nproc);
	if (report) {
		push(&v, &n, &cap, "--report");
		push(&v, &n, &cap, report);
	}
	for (size_t i = 0; i < cfg->nro; i++) {
		push(&v, &n, &cap, "--ro");
		push(&v, &n, &cap, cfg->ro[i]);
	}
	for (size_t i = 0; i < cfg->nshow; i++) {
		push(&v, &n, &cap, "--show");
		push(&v, &n, &cap, cfg->show[i]);
	}
	if (cfg->time_s > 0)
		push_num(&v, &n, &cap, "--time", cfg->time_s);
	if (cfg->uid >= 0)
		push_num(&v, &n, &cap, "--user", (double)cfg->uid);
	push(&v, &n, &cap, "--");
	for (size_t i = 0; argv[i]; i++)
		push(&v, &n, &cap, argv[i]);
	push(&v, &n, &cap, NULL);
	return v;
}

void ca_sandbox_command_free(char **argv)
{
	free_strings(argv);
}
