#!/bin/bash
# Session 20, one lent GPU (H200 or H100): host time of list ops (foreach, cat, AdamW foreach and
# fused, clip_grad_norm_, zero_grad) per call, bench/host_list_ops.py, twice, with the host's
# reference step before and after. Usage on the device: bash bench/device/h200_list_ops.sh.
# Out: $OUT/call.tgz.
exec bash bench/device/host_rounds.sh bench/host_list_ops.py list_ops_real
