#!/bin/sh
# Man pages: mandoc -Tlint clean (every page), SYNOPSIS equal to the usage
# text, and the EXAMPLES run as tests (pages in $pages; add yours). An
# example marked '.\" examples-test: skip' (needs a GPU or data we do not
# ship) is counted as skipped. Examples run in a scratch directory where
# examples/ and data/ are the repository's.
. "$(dirname "$0")/test-lib.sh"
pages="ca-reward.1 ca-gae.1 ca-stats.1 ca.7 ca-records.5 ca-agent.1 ca-best.1 ca-rft-filter.1 ca-logprob.1 ca-sample.1 ca-ppo-step.1 ca-value-step.1 ca-sft-step.1 ca-toy.1 ca-train.1 ca-sandbox.1 ca-build.1 ca-rollout.1 ca-eval.1 ca-synth.1 ca-plot.1 ca-verify.1 ca-profile.1 ca-crawl.1 ca-compose.1 ca-filter.1 ca-dataset-stats.1 ca-launch.1 ca-nvcc.1"

if ! command -v mandoc >/dev/null 2>&1; then
	skip 'man pages' 'mandoc is not installed (make deps)'
	test_done
	exit
fi
for m in "$ROOT"/man/*.[157]; do
	expect_success "$(basename "$m"): mandoc -Tlint clean" "mandoc -Tlint -Wwarning '$m'"
done
for page in $pages; do
	m=$ROOT/man/$page
	[ -f "$m" ] || { skip "$page" 'no such page yet'; continue; }
	case $page in
	*.1)
		cmd=${page%.1}
		expect_success "$page: SYNOPSIS equals $cmd --help" '
			mandoc -Tascii -Owidth=300 "'"$m"'" | col -bx | sed -n "/^SYNOPSIS/,/^DESCRIPTION/p" | sed "1d;\$d" |
				tr -s " \n" "  " | sed "s/^ //; s/ \$//" >synopsis &&
			'"$cmd"' --help | sed "s/^usage: //" | tr -s " \n" "  " | sed "s/ \$//" >usage &&
			cmp_output usage synopsis' ;;
	esac
	awk -f "$TESTS_DIR/man-examples.awk" "$m" >"$TRASH_BASE/examples.$page"
	n=0
	while read -r tag number; do
		case $tag in
		'#skip') skip "$page: EXAMPLES $number" 'marked: needs a GPU or data not shipped' ;;
		'#example')
			awk -v want="$number" '/^#(example|skip) / { on = ($2 == want); next } on' \
				"$TRASH_BASE/examples.$page" >"$TRASH_BASE/example.$page.$number"
			expect_success "$page: EXAMPLES $number runs" '
				ln -s "$ROOT/examples" examples || exit 1
				ln -s "$ROOT/data" data || exit 1
				(set -e; . "'"$TRASH_BASE/example.$page.$number"'") >"$TRASH_BASE/example.log" 2>&1
				s=$?; [ $s -eq 0 ] || cat "'"$TRASH_BASE/example.$page.$number"'" "$TRASH_BASE/example.log"; exit $s' ;;
		esac
	done <<EOF2
$(grep '^#' "$TRASH_BASE/examples.$page")
EOF2
done
test_done
