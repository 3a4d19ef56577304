# Host-bound distributed steps (bench/distributed.py --suite host-bound) on the 2-GPU machine,
# with this host's reference step before and after (it changes speed).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=.
python -m phantom.engine.host > $OUT/host_reference_before.json
python bench/distributed.py real --suite host-bound --steps 12 --out $OUT/real_distributed_host_bound_h200x2.json > $OUT/host_bound.log 2>&1
python -m phantom.engine.host > $OUT/host_reference_after.json
grep -h step_ns\" $OUT/host_reference_*.json; grep -E "ms/iter|FAILED" $OUT/host_bound.log
