#!/bin/sh
# ca-compose: deterministic, distinct, the paper's distribution, seeds, --llm;
# the tasks it writes run under the real torch (when installed).
. "$(dirname "$0")/test-lib.sh"

expect_status 2 'bad --distribution is a usage error' 'ca-compose --no-seeds --distribution x'
expect_status 3 'no seeds on input is bad input' 'ca-compose -n 1 </dev/null'
expect_status 4 'a missing input is a system error, not bad input' 'ca-compose -n 1 nonexistent 2>err; s=$?; grep -q "nonexistent: No such file" err; exit $s'
expect_status 4 'a directory as input is a system error' 'mkdir d && ca-compose -n 1 d 2>err; s=$?; test $(grep -c "d: read error: Is a directory" err) = 1 || exit 9; exit $s'
expect_success 'the same --seed gives the same tasks' '
	ca-compose --no-seeds -n 300 --seed 5 >a && ca-compose --no-seeds -n 300 --seed 5 >b && cmp_output a b &&
	ca-compose --no-seeds -n 300 --seed 6 >c && ! cmp -s a c'
expect_success 'ids are unique and no two tasks share code' '
	ca-compose --no-seeds -n 500 --seed 1 >t &&
	[ "$(jq -r .id t | sort -u | wc -l)" -eq 500 ] && [ "$(jq -c .code t | sort -u | wc -l)" -eq 500 ]'
expect_success 'the default distribution is the paper'"'"'s (about 84% two-op tasks)' '
	ca-compose --no-seeds -n 2000 --seed 2 >t &&
	two=$(jq -r .source t | grep -c "^torch#2$") && [ "$two" -gt 1600 ] && [ "$two" -lt 1760 ] &&
	jq -e "(.ops | length) == (.source | ltrimstr(\"torch#\") | tonumber)" t >/dev/null'
expect_success '--distribution 0,0,1 gives only three-op tasks with recorded adapters where needed' '
	ca-compose --no-seeds -n 50 --distribution 0,0,1 >t &&
	[ "$(jq -r .source t | sort -u)" = "torch#3" ] &&
	jq -e "(.adapters | type) == \"array\" and (.input_shape | length) >= 2 and (.est_ms > 0)" t >/dev/null'
expect_success 'only operators that the seeds name are stacked' '
	printf "%s\n" "{\"seed\":{\"name\":\"torch.relu\",\"library\":\"torch\"}}" \
		"{\"seed\":{\"name\":\"torch.nn.Linear\",\"library\":\"torch\"}}" >seeds &&
	ca-compose -n 20 --distribution 0,1 <seeds >t &&
	[ "$(jq -r ".ops[]" t | sort -u | tr "\n" " ")" = "nn.Linear torch.relu " ]'
expect_success 'single-operator tasks keep their share though cheap ones are drawn again (3.4%)' '
	ca-compose --no-seeds -n 2000 --seed 2 >t &&
	one=$(jq -r .source t | grep -c "^torch#1$") && [ "$one" -gt 40 ] && [ "$one" -lt 100 ]'
expect_success 'standalone transformers blocks built alike are still distinct tasks' '
	for b in LlamaRMSNorm Qwen2RMSNorm; do
		jq -nc --arg b $b "{seed: {name: (\"transformers.models.x.modeling_x.\" + \$b), library: \"transformers\"},
			code: (\"import torch\\nfrom transformers.models.x.modeling_x import \" + \$b +
				\"\\n\\nclass Model(torch.nn.Module):\\n    def __init__(self):\\n        super().__init__()\\n        self.op = \" + \$b + \"(64)\\n\\n    def forward(self, x):\\n        return self.op(x)\\n\\n\\nbatch_size = 8\\n\")}"
	done >seeds &&
	jq -c "{seed: {name: \"torch.relu\", library: \"torch\"}}" -n >>seeds &&
	ca-compose -n 2 --distribution 0,0,0,0,0,1 <seeds >t &&
	[ "$(jq -r ".ops[]" t | sort | tr "\n" " ")" = "LlamaRMSNorm Qwen2RMSNorm " ]'
expect_success '--llm sends the documented prompt and takes the module from the reply' '
	cat >llm.sh <<-\EOS
	cat >>prompts
	printf "Here it is:\n\`\`\`python\nimport torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x) + %s\n\ndef get_inputs():\n    return [torch.randn(2, 3)]\n\ndef get_init_inputs():\n    return []\n\`\`\`\n" "$(wc -l <prompts)"
	EOS
	ca-compose --no-seeds -n 2 --distribution 0,1 --llm "sh llm.sh" >t &&
	[ "$(jq -r .compose.composer t | sort -u)" = llm ] && grep -q "KernelBench format" prompts &&
	jq -r .code t | grep -q "class Model" && ! jq -r .code t | grep -q "Here it is"'
expect_status 4 'a failing --llm command is a system error' '
	ca-compose --no-seeds -n 1 --llm false >t'
if has_torch; then
	expect_success 'composed tasks run under the real torch (eager, CPU)' '
		ca-compose --no-seeds -n 8 --seed 11 --target-ms 0.01 --distribution 1,1,1,1,1 >t &&
		ca-filter -j 2 --no-compile --max-sim 1 <t >f &&
		[ "$(jq -r "select(.filter.checks.executable != true) | .id" f | wc -l)" -eq 0 ]'
else
	skip 'composed tasks run' "torch is not installed for $(ca_python)"
fi
test_done
