# Megatron-Core's host time on one GPU host: the published 1.7B rank's ops at shapes too small to
# keep the GPU busy (bench/megatron.py's pub-1.7b-1gpu-host-s*), the full-size row again, the
# host reference step (phantom.engine.host) before and after, and the single-GPU host-bound suite.
# Needs the megatron-core 0.16.1 cp312 wheel in .whl. Usage on the device:
#   bash bench/device/megatron_host.sh      Out: $OUT/call.tgz
source bench/device/call_lib.sh
record_env
step host_reference_1; python -m phantom.engine.host > $W/host_reference_1.json 2>> $log
for round in 1 2; do
  step megatron_round$round
  timeout $(left 200) python bench/megatron.py real \
    --configs pub-1.7b-1gpu-host-s128,pub-1.7b-1gpu-host-s512,pub-1.7b-1gpu \
    --out $W/megatron_round$round.json >> $log 2>&1
done
step host_reference_2; python -m phantom.engine.host > $W/host_reference_2.json 2>> $log
step host_bound; timeout $(left 200) python bench/host_bound.py real --out $W/host_bound_h100.json >> $log 2>&1
step done
grep -h "elapsed time per iteration" $log | cut -c60-150 | tail -30
cat $W/host_reference_*.json | head -20
