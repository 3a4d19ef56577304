# Session 39: the Transformer Engine stand-in with its RoPE as TE's (an autograd Function over one
# fused kernel each way, no longer a torch.compile'd function called with autograd on), run for
# real on one GPU: the published 1.7B rank's work with the TE spec at host-bound shapes and at
# full size, beside the local spec's host-bound replica, two rounds, with the host reference step
# before and after. Needs the megatron-core 0.16.1 cp312 wheel in .whl. Usage on the device:
#   bash bench/device/megatron_te_rope.sh      Out: $OUT/call.tgz
source bench/device/call_lib.sh
export PYTHONPATH=$PYTHONPATH:bench/device/apex_shim
# the stand-in goes on the path of the TE-spec configs only (megatron.py real_env; until session 39
# it was on the whole call's path, and the local-spec configs took its FusedAdam as well)
export TE_STANDIN_PATH=phantom/adapters/te_standin
record_env
PYTHONPATH=$PYTHONPATH:$TE_STANDIN_PATH python -c "import transformer_engine as te; print('TE stand-in', te.__version__, te.__file__)" >> $W/env.txt 2>&1
step host_reference_before; python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
for round in 1 2; do
  step round$round
  timeout $(left 220) python bench/megatron.py real \
    --configs pub-1.7b-1gpu-host-s512-te,pub-1.7b-1gpu-host-s512,pub-1.7b-1gpu-te \
    --out $W/megatron_te_rope_round$round.json >> $log 2>&1
done
step host_reference_after; python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
grep -h "elapsed time per iteration" $log | cut -c60-150 | tail -40
