# `python bench/bench.py real torchtitan` on a lent GPU machine: the suite's real runs, into
# bench/results/torchtitan/ and $OUT/torchtitan/ (copy those back and commit them, then
# `python bench/bench.py report`). SETUP picks the setup (`python bench/bench.py list`); ROUNDS
# runs it that many times (rows measured more than once are compared by their median); the rest
# of the arguments go to the suite script after --.
#   bash bench/device/torchtitan.sh            SETUP=h200x2 ROUNDS=2 bash bench/device/torchtitan.sh
source bench/device/call_lib.sh
record_env
setup_torchtitan
for round in $(seq ${ROUNDS:-1}); do
  step "torchtitan round $round"
  python -m phantom.host.machine > $W/host_reference_$round.json 2>> $log || true
  timeout $(left 560) python bench/bench.py real torchtitan ${SETUP:+--setup $SETUP} ${@:+-- "$@"} >> $log 2>&1
done
mkdir -p $OUT/torchtitan && cp bench/results/torchtitan/*.json $OUT/torchtitan/
