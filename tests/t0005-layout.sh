#!/bin/sh
# lib/'s layout (README, Layout): which folder may include which, private
# headers, no main() or usage text in lib/, no include cycle among its
# headers (tests/check-layout.sh), on the tree and on copies broken on purpose.
. "$(dirname "$0")/test-lib.sh"

check=$TESTS_DIR/check-layout.sh

expect_success 'the tree keeps the layout rules' 'sh "$check" "$ROOT"'

# broken WHAT EXPECTED-MESSAGE: copy lib/ and cmd/, let the caller break the
# copy (the commands after the call), then expect the check to fail saying so.
copy() { mkdir t && cp -R "$ROOT/lib" "$ROOT/cmd" t/ && rm -rf t/lib/py t/lib/libca.a; }
fails() { ! sh "$check" t >out 2>&1 && cat out && grep -q -- "$1" out; }

expect_success 'core including a model header fails' '
	copy && echo "#include \"model.h\"" >>t/lib/core/json.c &&
	fails "lib/core/json.c:.*lib/core includes lib/model/model.h"'
expect_success 'eval including a model header fails' '
	copy && echo "#include \"tokenizer.h\"" >>t/lib/eval/compare.c &&
	fails "lib/eval includes lib/model/tokenizer.h"'
expect_success 'model including an eval header fails' '
	copy && echo "#include \"evaluate.h\"" >>t/lib/model/nn.c &&
	fails "lib/model includes lib/eval/evaluate.h"'
expect_success 'a main() in lib/ fails' '
	copy && printf "int main(int argc, char **argv)\n{\n\treturn 0;\n}\n" >>t/lib/rl/rl.c &&
	fails "a main() in lib/"'
expect_success 'a usage text in lib/ fails' '
	copy && echo "static const char *text = \"usage: ca-x [-u]\";" >>t/lib/synth/synth.c &&
	fails "a usage text in lib/"'
expect_success 'an include cycle among headers fails' '
	copy && sed "s/^#define CA_MODEL_H/&\n#include \"device.h\"/" t/lib/model/model.h >m && mv m t/lib/model/model.h &&
	fails "include cycle: .*lib/model/model.h -> lib/model/device.h -> lib/model/model.h"'
expect_success 'a command including a private header fails' '
	copy && echo "#include \"evaluate_impl.h\"" >>t/cmd/ca-verify.c &&
	fails "lib/eval/evaluate_impl.h is private to lib/eval"'
expect_success 'a header name in two folders fails' '
	copy && cp t/lib/core/json.h t/lib/eval/json.h &&
	fails "header name also in"'
expect_success 'a folder without a rule fails' '
	copy && mkdir t/lib/extra && echo "int ca_extra;" >t/lib/extra/extra.c &&
	fails "folder lib/extra has no rule"'
test_done
