# `python bench/bench.py real nonllm` on a lent GPU machine: the suite's real runs, into
# bench/results/nonllm/ and $OUT/nonllm/ (copy those back and commit them, then
# `python bench/bench.py report`). SETUP picks the setup (`python bench/bench.py list`); ROUNDS
# runs it that many times (rows measured more than once are compared by their median); the rest
# of the arguments go to the suite script after --.
#   bash bench/device/nonllm.sh            SETUP=h200x2 ROUNDS=2 bash bench/device/nonllm.sh
source bench/device/call_lib.sh
record_env
export HF_HUB_OFFLINE=1
for round in $(seq ${ROUNDS:-1}); do
  step "nonllm round $round"
  python -m phantom.host.machine > $W/host_reference_$round.json 2>> $log || true
  timeout $(left 560) python bench/bench.py real nonllm ${SETUP:+--setup $SETUP} ${@:+-- "$@"} >> $log 2>&1
done
mkdir -p $OUT/nonllm && cp bench/results/nonllm/*.json $OUT/nonllm/
