"""Log several host-speed probes side by side every few seconds (VM state study)."""
import json, sys, time, statistics
import numpy as np
import torch
from phantom.engine.host import _probe_ns, training_step, time_steps

torch.set_num_threads(1)
step = training_step("cpu"); step()
small = [torch.ones(8) for _ in range(4)]
def op_loop():
    t0 = time.perf_counter_ns()
    a, b = small[0], small[1]
    for _ in range(300):
        c = torch.add(a, b); d = c.mul(2.0); e = d.sum(); f = a.view(2, 4).t()
    return time.perf_counter_ns() - t0
def walk(rows):
    t0 = time.perf_counter_ns()
    tot = 0
    for r in rows:
        tot += r[3]
    return time.perf_counter_ns() - t0
rows2 = [[i] * 8 for i in range(20_000)]      # ~2 MB
rows16 = [[i] * 8 for i in range(160_000)]    # ~16 MB
big = np.ones(8_000_000); dst = np.empty_like(big)
def bw():
    t0 = time.perf_counter_ns(); np.copyto(dst, big); return time.perf_counter_ns() - t0
def cpu_step():
    t0 = time.process_time_ns(); time_steps(step, repeats=1, steps=4, clock=time.process_time_ns); return time.process_time_ns()-t0
period = float(sys.argv[1]) if len(sys.argv) > 1 else 15
out = open(sys.argv[2] if len(sys.argv) > 2 else "/tmp/s44/vm_probe_log.jsonl", "a")
while True:
    rec = {"t": time.time()}
    rec["probe"] = statistics.mean(_probe_ns() for _ in range(3))
    op_loop(); rec["ops"] = statistics.mean(op_loop() for _ in range(3))
    step(); rec["ref_best"] = time_steps(step, repeats=3, steps=4)
    rec["ref_mean"] = statistics.mean(time_steps(step, repeats=1, steps=4) for _ in range(3))
    walk(rows2); rec["walk2"] = statistics.mean(walk(rows2) for _ in range(3))
    rec["walk16"] = statistics.mean(walk(rows16) for _ in range(2))
    rec["bw64"] = min(bw() for _ in range(2))
    la = open("/proc/loadavg").read().split()
    rec["load1"] = float(la[0]); rec["running"] = int(la[3].split("/")[0])
    st = open("/proc/stat").readline().split(); rec["steal"] = int(st[8])
    out.write(json.dumps(rec) + "\n"); out.flush()
    time.sleep(period)
