# `python bench/bench.py real cuda_graphs` on a lent GPU machine: the suite's real runs, into
# bench/results/cuda_graphs/ and $OUT/cuda_graphs/ (copy those back and commit them, then
# `python bench/bench.py report`). SETUP picks the setup (`python bench/bench.py list`); ROUNDS
# runs it that many times (rows measured more than once are compared by their median); the rest
# of the arguments go to the suite script after --.
#   bash bench/device/cuda_graphs.sh            SETUP=h200x2 ROUNDS=2 bash bench/device/cuda_graphs.sh
source bench/device/call_lib.sh
record_env
for round in $(seq ${ROUNDS:-1}); do
  step "cuda_graphs round $round"
  python -m phantom.host.machine > $W/host_reference_$round.json 2>> $log || true
  timeout $(left 560) python bench/bench.py real cuda_graphs ${SETUP:+--setup $SETUP} ${@:+-- "$@"} >> $log 2>&1
done
mkdir -p $OUT/cuda_graphs && cp bench/results/cuda_graphs/*.json $OUT/cuda_graphs/
