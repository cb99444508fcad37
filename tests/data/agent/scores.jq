# Stand-in for ca-verify | ca-profile | ca-reward: score a candidate by its model_new.py text.
.candidate.files["model_new.py"] as $f
| if $f == "v1" then .verify = {ok: true} | .profile = {compile_us: 100, candidate_us: 90} | .reward = {value: 3, speedup_compile: 1.11}
  elif $f == "v2" then .verify = {ok: true} | .profile = {compile_us: 100, candidate_us: 50} | .reward = {value: 3, speedup_compile: 2}
  elif $f == "v3" then .verify = {ok: false} | .reward = {value: -1}
  else .verify = {ok: true} | .reward = {value: 1, speedup_compile: 0.5} end
