# `python bench/bench.py real megatron` on a lent GPU machine: the suite's real runs, into
# bench/results/megatron/ and $OUT/megatron/ (copy those back and commit them, then
# `python bench/bench.py report`). SETUP picks the setup (`python bench/bench.py list`); ROUNDS
# runs it that many times (rows measured more than once are compared by their median); the rest
# of the arguments go to the suite script after --.
#   bash bench/device/megatron.sh            SETUP=h200x2 ROUNDS=2 bash bench/device/megatron.sh
source bench/device/call_lib.sh
record_env
# the Transformer Engine stand-in's configs also need: export PYTHONPATH=$PYTHONPATH:phantom/adapters/te_standin
for round in $(seq ${ROUNDS:-1}); do
  step "megatron round $round"
  python -m phantom.host.machine > $W/host_reference_$round.json 2>> $log || true
  timeout $(left 560) python bench/bench.py real megatron ${SETUP:+--setup $SETUP} ${@:+-- "$@"} >> $log 2>&1
done
mkdir -p $OUT/megatron && cp bench/results/megatron/*.json $OUT/megatron/
