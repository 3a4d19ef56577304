# `python bench/bench.py real single_gpu` on a lent GPU machine: the suite's real runs, into
# bench/results/single_gpu/ and $OUT/single_gpu/ (copy those back and commit them, then
# `python bench/bench.py report`). SETUP picks the setup (`python bench/bench.py list`); ROUNDS
# runs it that many times (rows measured more than once are compared by their median); the rest
# of the arguments go to the suite script after --.
#   bash bench/device/single_gpu.sh            SETUP=h200x2 ROUNDS=2 bash bench/device/single_gpu.sh
source bench/device/call_lib.sh
record_env
for round in $(seq ${ROUNDS:-1}); do
  step "single_gpu round $round"
  python -m phantom.host.machine > $W/host_reference_$round.json 2>> $log || true
  timeout $(left 560) python bench/bench.py real single_gpu ${SETUP:+--setup $SETUP} ${@:+-- "$@"} >> $log 2>&1
done
mkdir -p $OUT/single_gpu && cp bench/results/single_gpu/*.json $OUT/single_gpu/
