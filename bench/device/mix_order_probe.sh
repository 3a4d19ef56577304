#!/bin/bash
# RMSNorm's backward in a compiled float8 training block (kernels/mix_order_probe.py): step time
# and every kernel of a step per variant, with Inductor's output code to read which kernels are
# mix-order reductions and what they store. One GPU; carry .whl (torchao). ONLY=variant,... runs
# those variants at every size.
source bench/device/call_lib.sh
record_env
export TORCHINDUCTOR_CACHE_DIR=$W/inductor_cache
step probe
timeout $(left 520) python bench/kernels/mix_order_probe.py ${ONLY:+--only $ONLY} \
    --out $W/mix_order_probe.json >> $log 2>&1
cp $W/mix_order_probe.json $W/env.txt $OUT/ 2>/dev/null
grep -rl --include=*.py "async_compile.wait" $W/inductor_cache | tar czf $OUT/output_code.tgz -T - 2>> $log
rm -rf $W/inductor_cache
step done
