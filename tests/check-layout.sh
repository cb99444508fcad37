#!/bin/sh
# check-layout.sh ROOT: check the rules of lib/'s layout (README, Layout) in
# the sources under ROOT; print one line per breach and exit 1, or exit 0.
#
#   - what a folder may include: core only core; eval core; model core;
#     synth core; rl core and model (cmd/ and tests/ anything);
#   - a folder's private headers (*_impl.h, those in a subfolder such as
#     model/cuda/) are included from that folder only (tests/ excepted);
#   - header names are unique across lib/ (includes name no folder);
#   - no main() and no usage text in lib/;
#   - no include cycle among lib/'s headers.
# tests/t0005-layout.sh runs it on the tree and on broken copies of it.
root=${1:-.}
cd "$root" || exit 2
files=$(find lib cmd -path lib/py -prune -o -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cpp' \) -print | sort)
[ -n "$files" ] || { echo "check-layout: no sources under $root"; exit 2; }
status=0

# main() or a usage text in lib/ (sandbox.c's worker_main is no program's main).
libfiles=$(printf '%s\n' $files | grep '^lib/')
if grep -nE '^([A-Za-z_][A-Za-z0-9_ *]*[^A-Za-z0-9_])?main[[:space:]]*\(' $libfiles; then
	echo "check-layout: a main() in lib/ (a command's main belongs in cmd/, a test's in tests/)"
	status=1
fi
if grep -nE '"[Uu]sage:|^([A-Za-z_][A-Za-z0-9_ *]*[^A-Za-z0-9_])?usage[[:space:]]*\(' $libfiles; then
	echo "check-layout: a usage text in lib/ (it belongs to the command, in cmd/)"
	status=1
fi

list=$(mktemp) || exit 2
trap 'rm -f "$list"' EXIT
printf '%s\n' $files >"$list"
awk -v list="$list" '
function folder(path,   p) { split(path, p, "/"); return p[1] == "lib" ? p[2] : p[1] }
function dirname(path) { sub(/\/[^\/]*$/, "", path); return path }
# The file an include names: beside the includer first, then every folder of lib/.
function resolve(name, from,   d, f, found, n) {
	d = dirname(from)
	if ((d "/" name) in exists) return d "/" name
	n = 0
	for (f in folders) if (("lib/" f "/" name) in exists) { found = "lib/" f "/" name; n++ }
	if (n > 1) { print from ": \"" name "\" names headers in several folders"; bad = 1 }
	return n ? found : ""
}
function visit(h,   i, t) {
	state[h] = 1; stack[++depth] = h
	for (i = 1; i <= nedge[h]; i++) {
		t = edge[h, i]
		if (state[t] == 1) { cycle(t); bad = 1 }
		else if (!state[t]) visit(t)
	}
	depth--; state[h] = 2
}
function cycle(t,   i, s) {
	for (i = depth; i > 0 && stack[i] != t; i--) ;
	s = stack[i]
	for (i++; i <= depth; i++) s = s " -> " stack[i]
	print "include cycle: " s " -> " t
}
BEGIN {
	may["core"] = "core"; may["eval"] = "core eval"; may["model"] = "core model"
	may["synth"] = "core synth"; may["rl"] = "core model rl"
}
# First the list of files, then the files themselves.
FILENAME == list {
	exists[$0] = 1
	if ($0 ~ /^lib\//) {
		f = folder($0); folders[f] = 1
		if (!(f in may)) { print $0 ": folder lib/" f " has no rule in tests/check-layout.sh (and the Makefile)"; bad = 1 }
		if ($0 ~ /\.h$/) {
			name = $0; sub("^lib/" f "/", "", name)
			if (name in owner) { print $0 ": header name also in " owner[name]; bad = 1 }
			owner[name] = $0
			sub(/^.*\//, "", name)
			if (name in base && base[name] != $0) { print $0 ": header name also in " base[name]; bad = 1 }
			base[name] = $0
		}
	}
	next
}
/^[ \t]*#[ \t]*include[ \t]*"/ {
	name = $0; sub(/^[^"]*"/, "", name); sub(/".*$/, "", name)
	h = resolve(name, FILENAME)
	if (h == "") next
	from = folder(FILENAME); to = folder(h)
	if (FILENAME ~ /^lib\// && index(" " may[from] " ", " " to " ") == 0) {
		print FILENAME ":" FNR ": lib/" from " includes " h " (lib/" from " may know: " may[from] ")"; bad = 1
	}
	private = h ~ /_impl\.h$/ || h ~ /^lib\/[^\/]+\/[^\/]+\//
	if (private && from != to) { print FILENAME ":" FNR ": " h " is private to lib/" to; bad = 1 }
	if (FILENAME ~ /^lib\/.*\.h$/ && h ~ /\.h$/) { edge[FILENAME, ++nedge[FILENAME]] = h; headers[FILENAME] = 1 }
}
END {
	for (h in headers) if (!state[h]) visit(h)
	exit bad
}' "$list" $files || status=1
exit $status
