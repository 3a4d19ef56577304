# phantom's Transformer Engine stand-in run for real on one GPU (the lent machines have no TE):
# the published 1.7B rank's work with Megatron's TE layer spec at full size and at host-bound
# shapes, beside the local spec's same configs, two rounds. What it measures is the stand-in's
# own GPU work and host time on a real host, the two things phantom charges for it; not real
# TE's. Needs the megatron-core 0.16.1 cp312 wheel in .whl. Usage on the device:
#   bash bench/device/megatron_te_standin.sh      Out: $OUT/call.tgz
source bench/device/call_lib.sh
# the stand-in as `transformer_engine`, and Apex's wgrad extension for the output layer (a local
# ColumnParallelLinear in both specs) with gradient-accumulation fusion
export PYTHONPATH=$PYTHONPATH:bench/device/apex_shim
# the stand-in goes on the path of the TE-spec configs only (megatron.py real_env; until session 39
# it was on the whole call's path, and the local-spec configs took its FusedAdam as well)
export TE_STANDIN_PATH=phantom/adapters/te_standin
record_env
PYTHONPATH=$PYTHONPATH:$TE_STANDIN_PATH python -c "import transformer_engine as te; print('TE stand-in', te.__version__, te.__file__)" >> $W/env.txt 2>&1
for round in 1 2; do
  step round$round
  timeout $(left 260) python bench/megatron.py real \
    --configs pub-1.7b-1gpu-host-s512-te,pub-1.7b-1gpu-host-s512,pub-1.7b-1gpu-te,pub-1.7b-1gpu-gaf \
    --out $W/megatron_te_round$round.json >> $log 2>&1
done
step done
grep -h "elapsed time per iteration" $log | cut -c60-150 | tail -40
