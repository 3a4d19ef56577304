# Float8 training ground truth and float8 GEMM timings on one GPU (Session 33), plus where HF
# generate()'s host time goes. torchao is carried as a wheel (.whl/, no network on the device).
# Usage on the device: bash bench/device/float8.sh   (run() with carry [".whl"]); SKIP_KERNELS=1,
# SKIP_GENERATE=1 leave those parts out, ROUND2=1 runs the compiled float8 configs again
# Out (8 files): $OUT/float8_real_<gpu>_round1.json (round2 with ROUND2=1), $OUT/kernels_fp8_<gpu>.json,
#      $OUT/generate_{real_<gpu>.json,profile_<gpu>.txt,logs_<gpu>.txt}, $OUT/host_reference.txt (before, after), $OUT/env.txt
export PYTHONUNBUFFERED=1
gpu=h100; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && gpu=h200
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/torchao-0.18.0-*.whl \
  && export PYTHONPATH=/tmp/site:. || exit 1
{ date -u; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
  python3 -c "import torch, torchao; print(torch.__version__, torch.version.cuda, 'torchao', torchao.__version__)"; } > $OUT/env.txt 2>&1
python3 -m phantom.engine.host > $OUT/host_reference.txt 2>/dev/null
[ -z "$SKIP_KERNELS" ] && python3 bench/kernels/measure.py --only gemm_fp8 --budget-s 120 --out $OUT/kernels_fp8_$gpu.json 2>&1 | tail -4
F8="float8-bf16-compile,float8-tensorwise-compile,float8-rowwise-compile,float8-rowwise-gw-hp-compile,float8-tensorwise-eager"
python3 bench/workloads.py real --set patterns --only $F8 --timeout 200 --out $OUT/float8_real_${gpu}_round1.json 2>&1 | cut -c1-300
[ -z "$SKIP_GENERATE" ] && python3 bench/workloads.py real --set patterns --only hf-generate --timeout 120 --out $OUT/generate_real_${gpu}.json 2>&1 | cut -c1-300
[ -z "$SKIP_GENERATE" ] && python3 bench/patterns/hf_generate.py --calls 3 --profile $OUT/generate_profile_${gpu}.txt > $OUT/generate_logs_${gpu}.txt 2>&1
[ -z "$SKIP_GENERATE" ] && GEN_NO_GRAD=1 python3 bench/patterns/hf_generate.py 2>&1 | sed 's/^/no_grad: /' >> $OUT/generate_logs_${gpu}.txt
[ -n "$ROUND2" ] && python3 bench/workloads.py real --set patterns --only float8-bf16-compile,float8-tensorwise-compile,float8-rowwise-compile --timeout 200 --out $OUT/float8_real_${gpu}_round2.json 2>&1 | cut -c1-300
python3 -m phantom.engine.host >> $OUT/host_reference.txt 2>/dev/null
date -u >> $OUT/env.txt
