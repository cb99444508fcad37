# man-examples.awk: print the EXAMPLES of an mdoc page as shell, one
# block per example, each preceded by "#example N" (or "#skip N" when the
# page marks it with a '.\" examples-test: skip' comment line before .Bd).
/^\.Sh / { in_examples = ($2 == "EXAMPLES"); next }
!in_examples { next }
/^\.\\" examples-test: skip/ { skip = 1; next }
/^\.Bd -literal/ { n++; print (skip ? "#skip " : "#example ") n; in_block = 1; skip = 0; next }
/^\.Ed/ { in_block = 0; next }
in_block {
	gsub(/\\-/, "-"); gsub(/\\\(aq/, "'"); gsub(/\\e/, "\\"); gsub(/\\&/, "")
	print
}
