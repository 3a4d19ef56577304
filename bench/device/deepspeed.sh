# `python bench/bench.py real deepspeed` on a lent GPU machine: the suite's real runs, into
# bench/results/deepspeed/ and $OUT/deepspeed/ (copy those back and commit them, then
# `python bench/bench.py report`). SETUP picks the setup (`python bench/bench.py list`); ROUNDS
# runs it that many times (rows measured more than once are compared by their median); the rest
# of the arguments go to the suite script after --.
#   bash bench/device/deepspeed.sh            SETUP=h200x2 ROUNDS=2 bash bench/device/deepspeed.sh
source bench/device/call_lib.sh
record_env
build_ds_ops FusedAdamBuilder FusedLionBuilder FusedLambBuilder
for round in $(seq ${ROUNDS:-1}); do
  step "deepspeed round $round"
  python -m phantom.host.machine > $W/host_reference_$round.json 2>> $log || true
  timeout $(left 560) python bench/bench.py real deepspeed ${SETUP:+--setup $SETUP} ${@:+-- "$@"} >> $log 2>&1
done
mkdir -p $OUT/deepspeed && cp bench/results/deepspeed/*.json $OUT/deepspeed/
