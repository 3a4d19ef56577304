# Host reference numbers of a lent GPU machine (phantom.engine.host) and the host-bound
# benchmark, in one call. Usage on the device: bash bench/device/host_reference.sh TAG
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=.
tag=$1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/host_$tag.log
python -m phantom.engine.host > $OUT/host_reference_$tag.json 2>> $OUT/host_$tag.log
python -m phantom.engine.host > $OUT/host_reference_${tag}_again.json 2>> $OUT/host_$tag.log
[ -n "$2" ] && python bench/host_bound.py real --out $OUT/host_bound_$tag.json >> $OUT/host_$tag.log 2>&1
cat $OUT/host_reference_$tag*.json
