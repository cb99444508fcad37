#!/bin/sh
# ca-sandbox: statuses, report, clean environment, limits, no network, no
# writes outside DIR, whole-tree kill at the wall-clock limit; each mode
# this kernel offers (root, userns, plain). Features the kernel lacks skip
# with a message.
. "$(dirname "$0")/test-lib.sh"

# What this machine gives us, from a probe run.
probe=$TRASH_BASE/probe.json
ca-sandbox --report "$probe" -- true 2>/dev/null
iso() { jq -r ".isolation.$1" "$probe" 2>/dev/null; }
mode=$(iso mode)
say "# kernel $(uname -r); mode=$mode landlock_abi=$(iso landlock_abi) seccomp=$(iso seccomp) pid_namespace=$(iso pid_namespace)"
is_root() { [ "$(id -u)" -eq 0 ]; }
# running TEXT: a live process has TEXT in its command line (no procps needed).
running() {
	for f in /proc/[0-9]*/cmdline; do
		cmd=$(tr "\0" " " 2>/dev/null <"$f") || continue
		case $cmd in *"$1"*) ;; *) continue ;; esac
		state=$(sed -n "s/^State:[[:space:]]*\([A-Z]\).*/\1/p" "${f%/cmdline}/status" 2>/dev/null)
		[ "$state" != Z ] && [ -n "$state" ] && return 0
	done
	return 1
}
# uid_count UID: live processes of that uid.
uid_count() {
	n=0
	for f in /proc/[0-9]*/status; do
		awk -v u="$1" '/^State:/ { z = ($2 == "Z") } /^Uid:/ { if ($2 == u && !z) found = 1 } END { exit !found }' "$f" 2>/dev/null && n=$((n + 1))
	done
	echo $n
}
has_python() { command -v python3 >/dev/null 2>&1; }
# A world-writable directory that is not ours, for escape attempts.
OUTSIDE=$TRASH_BASE/outside
mkdir -p "$OUTSIDE" && chmod 1777 "$OUTSIDE"
chmod 755 "$TRASH_BASE"

expect_success 'lib/sandbox unit tests' 'test-sandbox'
expect_success 'usage is printed by --help' 'ca-sandbox --help | grep -q "^usage: ca-sandbox"'
# Where the kernel ties them to seccomp (x86 before Linux 5.16), a filter
# would force speculation mitigations on the sandboxed process alone; on
# later kernels the two agree either way.
expect_success 'a sandboxed process keeps the host'"'"'s speculation mitigations (its seccomp filter forces none)' '
	grep "^Specul" /proc/self/status >host.txt &&
	ca-sandbox -- sh -c "grep ^Specul /proc/self/status" >box.txt &&
	test -s host.txt && cat box.txt | sed "s/^/# /" && cmp host.txt box.txt
'
# The host's OOM killer takes the command first, not a trusted reference beside it.
expect_success 'the command and what it forks have the most OOM score' '
	ca-sandbox -- sh -c "cat /proc/self/oom_score_adj; sh -c \"cat /proc/self/oom_score_adj\"" >adj &&
	test "$(cat adj | tr "\n" " ")" = "1000 1000 " &&
	! ca-sandbox -- sh -c "echo 0 >/proc/self/oom_score_adj" 2>/dev/null
'
expect_status 2 'no command is a usage error' 'ca-sandbox --time 1'
expect_status 2 'a bad number is a usage error' 'ca-sandbox --time x -- true'
expect_status 2 '--env needs NAME=VALUE' 'ca-sandbox --env FOO -- true'
expect_status 3 'the command status passes through' 'ca-sandbox -- sh -c "exit 3"'
expect_status 137 'death by signal 9 is 137' 'ca-sandbox -- sh -c "kill -9 \$\$"'
expect_status 127 'a missing program is 127' 'ca-sandbox -- ca-no-such-program 2>err && false; grep -q "cannot run" err && exit 127'
expect_status 125 'a missing DIR is a setup failure' 'ca-sandbox --dir /nonexistent/dir -- true'

expect_success 'the report has every field' '
	mkdir w && ca-sandbox --dir w --report r.json -- true &&
	jq -e ".status == 0 and .signal == null and .timed_out == false and (.wall_s | type) == \"number\"
		and (.max_rss_kb | type) == \"number\" and (.isolation | type) == \"object\"
		and .isolation.rlimits.core == 0 and .isolation.no_new_privs == true" r.json
'

expect_success 'the environment is clean: PATH, HOME=DIR, LANG, TMPDIR and --env only' '
	mkdir w && SECRET_TOKEN=abc ca-sandbox --dir w --env EXTRA=1 -- env >env.txt &&
	! grep -q SECRET_TOKEN env.txt && grep -q "^EXTRA=1$" env.txt &&
	grep -q "^HOME=$(cd w && pwd -P)$" env.txt && grep -q "^PATH=" env.txt &&
	test "$(cut -d= -f1 env.txt | sort | tr "\n" " ")" = "EXTRA HOME LANG PATH TMPDIR "
'

expect_success 'descriptors beyond 0-2 do not reach the command' '
	echo s3cret >secret && exec 7<secret && ca-sandbox -- sh -c "cat <&7" >out 2>&1; exec 7<&-;
	! grep -q s3cret out
'

expect_success 'the command runs in DIR and may write there' '
	mkdir w && ca-sandbox --dir w -- sh -c "pwd >where; echo data >out" &&
	test "$(cat w/where)" = "$(cd w && pwd -P)" && test "$(cat w/out)" = data
'

if is_root; then
	expect_success 'as root the command runs as uid 65534 without groups, DIR given to it' '
		mkdir w && ca-sandbox --dir w -- sh -c "id -u; id -G" >ids &&
		test "$(sed -n 1p ids)" = 65534 && test "$(sed -n 2p ids)" = "$(getent passwd 65534 | cut -d: -f4)" &&
		test "$(stat -c %u w)" = 65534
	'
else
	skip 'uid drop' 'not root'
fi

expect_success 'a command ignoring SIGTERM and a setsid() grandchild die at --time' '
	mark=3$$$RANDOM
	start=$(date +%s)
	ca-sandbox --time 1 --report r.json -- sh -c "trap \"\" TERM; setsid sleep $mark & sleep $mark"
	status=$?
	end=$(date +%s)
	sleep 0.2
	test $status -eq 124 && test $((end - start)) -le 3 &&
	jq -e ".timed_out == true and .status == 124" r.json &&
	! running "sleep $mark"
'

if [ "$(iso landlock_fs)" = true ]; then
	expect_success 'writing outside DIR fails' '
		mkdir w && ca-sandbox --dir w -- sh -c "echo x >\"$OUTSIDE/escape\"; echo y >/var/tmp/ca-t0102-escape.$$" 2>/dev/null;
		test ! -e "$OUTSIDE/escape" && test ! -e /var/tmp/ca-t0102-escape.$$
	'
elif [ "$mode" != plain ]; then
	expect_success 'writing outside DIR fails (below /tmp; no Landlock for the rest)' '
		mkdir w && ca-sandbox --dir w -- sh -c "echo x >\"$OUTSIDE/escape\"" 2>/dev/null;
		test ! -e "$OUTSIDE/escape"
	'
else
	skip 'writing outside DIR' 'neither Landlock nor a mount namespace here'
fi

expect_success 'a 10 GB output is stopped by --fsize' '
	mkdir w && ca-sandbox --dir w --fsize 5 -- sh -c "head -c 10000000000 /dev/zero >big" 2>/dev/null
	test $? -ne 0 && test "$(stat -c %s w/big)" -le 5242880
'

expect_status 152 '--cpu stops a busy loop with SIGXCPU' 'ca-sandbox --cpu 1 --time 20 -- sh -c "while :; do :; done"'
if has_python; then
	expect_success '--mem limits the address space' '
		! ca-sandbox --mem 100 -- python3 -c "x = bytearray(300 << 20)" 2>/dev/null &&
		ca-sandbox --mem 1000 -- python3 -c "x = bytearray(100 << 20)"
	'
else
	skip '--mem' 'no python3'
fi

if is_root; then
	expect_success 'a fork bomb is contained by --nproc and killed at --time' '
		start=$(date +%s)
		ca-sandbox --time 2 --nproc 40 --user 60102 -- sh -c "b() { b | b & }; b; sleep 30" >/dev/null 2>&1
		status=$?
		end=$(date +%s)
		sleep 0.3
		test $status -eq 124 && test $((end - start)) -le 5 && test "$(uid_count 60102)" -eq 0
	'
else
	expect_success 'a fork bomb is contained by --nproc and killed at --time' '
		start=$(date +%s)
		ca-sandbox --time 2 --nproc 200 -- sh -c "b() { b | b & }; b; sleep 30" >/dev/null 2>&1
		end=$(date +%s)
		test $((end - start)) -le 6
	'
fi

if has_python; then
	# A listener on the host's loopback that the sandbox must not reach.
	python3 -c '
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(5)
print(s.getsockname()[1], flush=True)
s.settimeout(20)
try:
    while True: s.accept()[0].close()
except Exception: pass
' >"$TRASH_BASE/port" &
	listener=$!
	for i in 1 2 3 4 5 6 7 8 9 10; do [ -s "$TRASH_BASE/port" ] && break; sleep 0.2; done
	PORT=$(cat "$TRASH_BASE/port")
	export PORT
	connect='import os, socket
try:
    s = socket.socket(); s.settimeout(2)
    s.connect(("127.0.0.1", int(os.environ["PORT"]))); print("connected")
except OSError as e: print("refused", e)'
	expect_success 'a TCP connection to the host loopback fails' '
		ca-sandbox --env PORT=$PORT -- python3 -c "$connect" >out; cat out; grep -q refused out
	'
	expect_success 'with --allow-network it succeeds (the check above is real)' '
		ca-sandbox --allow-network --env PORT=$PORT -- python3 -c "$connect" >out; cat out; grep -q connected out
	'
	kill $listener 2>/dev/null
else
	skip 'network tests' 'no python3'
fi

if [ "$mode" = root ] || [ "$mode" = userns ]; then
	expect_success '--hide makes a directory empty and a file unreadable; /tmp is private' '
		mkdir -p w secret && echo s3cret >secret/ref && echo s3cret >secretfile && echo host >/tmp/ca-t0102.$$ &&
		ca-sandbox --dir w --hide secret --hide secretfile -- sh -c "ls -A $PWD/secret; cat $PWD/secretfile; ls /tmp" >out 2>&1;
		rm -f /tmp/ca-t0102.$$; cat out; ! grep -q s3cret out && ! grep -q "^ref$" out && ! grep -q ca-t0102 out
	'
	expect_success '--ro makes a writable path read-only' '
		mkdir -p w ro && chmod 777 ro && echo orig >ro/f && chmod 666 ro/f &&
		ca-sandbox --dir w --ro ro -- sh -c "echo changed >$PWD/ro/f" 2>/dev/null;
		test "$(cat ro/f)" = orig
	'
	expect_success '--ro below a --hide directory is put back, read-only and reachable' '
		mkdir -p w home/lib home/secret && echo code >home/lib/f && echo s3cret >home/secret/key &&
		chmod 700 home && chmod 755 home/lib && chmod 644 home/lib/f &&
		ca-sandbox --dir w --hide home --ro home/lib -- sh -c "cat $PWD/home/lib/f; ls -A $PWD/home; cat $PWD/home/secret/key; touch $PWD/home/lib/new" >out 2>&1;
		cat out; grep -q "^code$" out && ! grep -q s3cret out && ! grep -q "^secret$" out && test ! -e home/lib/new
	'
	expect_success '--show puts a directory below /tmp back, read-only; one elsewhere is left as it is' '
		d=$(mktemp -d /tmp/ca-t0102-show.XXXXXX) && chmod 777 "$d" && echo orig >"$d/f" && chmod 666 "$d/f" && mkdir w &&
		ca-sandbox --dir w --show "$d" --show /etc --report r.json -- sh -c "cat $d/f; echo changed >$d/f" >out 2>&1
		cat out; content=$(cat "$d/f"); rm -rf "$d"
		grep -q "^orig$" out && test "$content" = orig && jq -e --arg d "$d" ".isolation.read_only == [\$d]" r.json
	'
	expect_success 'there is a private PID namespace' '
		ca-sandbox -- sh -c "echo \$\$" >out && test "$(cat out)" = 2
	'
	expect_success 'GPU device nodes are hidden without --gpu' '
		ca-sandbox --report r.json -- sh -c "cat /dev/nvidiactl" 2>/dev/null;
		jq -e ".isolation.gpu == false" r.json
	'
else
	skip 'namespace tests' "mode $mode has no mount namespace"
fi

if [ "$(iso landlock_abi)" -ge 1 ] 2>/dev/null; then
	expect_success 'plain mode (no namespaces): Landlock, seccomp and the subreaper still contain it' '
		mark=4$$$RANDOM
		mkdir w && chmod 777 w &&
		CA_SANDBOX_NO_NAMESPACES=1 ca-sandbox --dir w --time 1 --report r.json -- sh -c "
			echo x >\"$OUTSIDE/plain-escape\"; python3 -c \"import socket; socket.socket()\" 2>&1 | tail -1 >net;
			setsid sleep $mark & sleep $mark" 2>/dev/null
		status=$?
		sleep 0.2
		jq -c .isolation r.json
		test $status -eq 124 && test ! -e "$OUTSIDE/plain-escape" && ! running "sleep $mark" &&
		jq -e ".isolation.mode == \"plain\" and .isolation.landlock_fs and .isolation.seccomp" r.json &&
		{ ! command -v python3 >/dev/null || grep -q "Permission denied" w/net; }
	'
	expect_status 125 'plain mode refuses --hide rather than leave the path in reach' '
		mkdir w && CA_SANDBOX_NO_NAMESPACES=1 ca-sandbox --dir w --hide /etc -- true'
	expect_success 'plain mode does not refuse --show: nothing below /tmp is hidden there, and Landlock keeps it read-only' '
		d=$(mktemp -d /tmp/ca-t0102-show.XXXXXX) && chmod 777 "$d" && echo orig >"$d/f" && chmod 666 "$d/f" && mkdir w && chmod 777 w &&
		CA_SANDBOX_NO_NAMESPACES=1 ca-sandbox --dir w --show "$d" -- sh -c "cat $d/f; echo changed >$d/f" >out 2>&1
		cat out; content=$(cat "$d/f"); rm -rf "$d"
		grep -q "^orig$" out && test "$content" = orig
	'
else
	skip 'plain mode' 'no landlock in this kernel'
fi

if is_root && command -v setpriv >/dev/null 2>&1 && [ "$(iso landlock_fs)" = true ]; then
	expect_success 'an unprivileged user gets a user namespace (or the plain mode) with the same limits' '
		mkdir w && chown 60103 w && chmod 755 . &&
		setpriv --reuid 60103 --regid 60103 --clear-groups ca-sandbox --dir w --time 1 --report w/r.json -- sh -c "echo x >\"$OUTSIDE/user-escape\"; id -u >out" 2>/dev/null;
		jq -c .isolation w/r.json
		test ! -e "$OUTSIDE/user-escape" && test "$(cat w/out)" = 60103 &&
		jq -e ".isolation.mode == \"userns\" or .isolation.mode == \"plain\"" w/r.json
	'
else
	skip 'unprivileged mode' 'needs root, setpriv and Landlock'
fi

test_done
