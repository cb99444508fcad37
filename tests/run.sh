#!/bin/sh
# run.sh: run the given test scripts and print the total as
# "N passed, N failed, N skipped"; exit non-zero when any failed.
results=$(mktemp)
export CA_TEST_RESULTS=$results
crashed=0
for t in "$@"; do
	[ -f "$t" ] || continue
	before=$(wc -l <"$results")
	start=$(date +%s)
	sh "$t"
	after=$(wc -l <"$results")
	echo "# $t: $(($(date +%s) - start)) s"
	if [ "$before" -eq "$after" ]; then
		echo "# $t: did not finish (no summary line)"
		crashed=$((crashed + 1))
	fi
done
awk -v crashed="$crashed" '{p += $1; f += $2; s += $3}
	END {f += crashed; printf "%d passed, %d failed, %d skipped\n", p, f, s; exit (f > 0)}' "$results"
status=$?
rm -f "$results"
exit $status
