# Kernel profiles (bench/profile_real.py) of bench/patterns/float8.py's compiled steps on one
# GPU: bf16, float8 tensorwise, rowwise, rowwise_with_gw_hp (Session 33). torchao carried in .whl/.
# Usage on the device: bash bench/device/float8_profile.sh   Out: $OUT/prof_float8_<recipe>.json
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/torchao-0.18.0-*.whl \
  && export PYTHONPATH=/tmp/site:. || exit 1
for recipe in none tensorwise rowwise rowwise_with_gw_hp; do
  python3 bench/profile_real.py --step 6 --active 2 --sync --out $OUT/prof_float8_$recipe.json \
    bench/patterns/float8.py --recipe $recipe > /dev/null 2>$OUT/err_$recipe.txt && rm -f $OUT/err_$recipe.txt
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt; date -u >> $OUT/env.txt
