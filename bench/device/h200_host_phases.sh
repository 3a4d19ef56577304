#!/bin/bash
# Session 20, one lent GPU: host time by phase of a small, host-bound GPT step
# (bench/host_phases.py: forward, backward, clipping, optimizer, zero_grad), twice, with the
# host's reference step before and after. Usage on the device: bash bench/device/h200_host_phases.sh.
# Out: $OUT/call.tgz.
exec bash bench/device/host_rounds.sh bench/host_phases.py host_phases_real
