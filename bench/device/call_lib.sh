# Shared set-up of a device call, sourced by bench/device/<suite>.sh: NVLink multicast off (this
# workplace's rule), the carried wheels in .whl installed if any, a work folder $W with $log that
# lands in $OUT/call.tgz however the call ends, `step NAME` log marks, and `left CAP`: the seconds
# a step may take, CAP or what is left of the call's budget (CALL_BUDGET_S, default 565).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=.
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:.
fi
W=$(mktemp -d); log=$W/log.txt
trap 'tar czf $OUT/call.tgz -C $W . ; tail -40 $log' EXIT
step() { echo "== $1 $(date -u +%T)" >> $log; }
end=$((SECONDS + ${CALL_BUDGET_S:-565}))
left() { local l=$((end - SECONDS)); echo $(( l < $1 ? (l > 5 ? l : 5) : $1 )); }  # min(cap, time left)
# The machine, its driver and the software of the call, into $W/env.txt.
record_env() {
  { date -u; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; lscpu | grep "Model name";
    python -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__)"; } > $W/env.txt 2>&1
}
# torchtitan on a host without network: offline datasets, torchtitan and its light dependencies
# from the carried bench/torchtitan_wheels (bench/suites/torchtitan.py install).
setup_torchtitan() {
  export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
  python bench/suites/torchtitan.py install >> $log 2>&1
}
# DeepSpeed's FusedAdam, JIT-built once for the call (nvcc), as `deepspeed.py real` uses it:
# TORCH_CUDA_ARCH_LIST without the lent image's arch suffixes ("9.0a" -> "9.0"), which
# DeepSpeed 0.19.8's builder cannot parse (bench/suites/deepspeed.py deepspeed_arch_list); a step
# mark in the log; at most 120 s of the call.
deepspeed_arch_list() {
  local arch=${TORCH_CUDA_ARCH_LIST:-}
  [ -n "$arch" ] && export TORCH_CUDA_ARCH_LIST=$(echo "$arch" | sed -E 's/([0-9]+\.[0-9]+)[a-z]+/\1/g')
  return 0
}
build_fused_adam() {
  deepspeed_arch_list
  step build-fused-adam
  timeout $(left 120) python -c "from deepspeed.ops.op_builder import FusedAdamBuilder; FusedAdamBuilder().load(verbose=False)" >> $log 2>&1
}
# Several DeepSpeed ops at once, one nvcc build each in parallel (`build_ds_ops FusedAdamBuilder
# FusedLionBuilder`): their output in $W/build.log, a `built NAME` line each in $log.
build_ds_ops() {
  deepspeed_arch_list
  step build-ops
  local b
  for b in "$@"; do
    timeout $(left 150) python -c "from deepspeed.ops.op_builder import $b; $b().load(verbose=False); print('built $b')" >> $W/build.log 2>&1 &
  done
  wait
  grep -E "^built|Error" $W/build.log >> $log
}
