"""Host time of the CUDA runtime calls frameworks make between kernels: streams, events, syncs.

    python bench/probes/host_cuda_api.py --out cuda_api_real.json                        # on a GPU host
    phantom run --gpu H200 bench/probes/host_cuda_api.py --out cuda_api_sim.json         # simulated
    python bench/probes/host_cuda_api.py --compare cuda_api_real.json cuda_api_sim.json  # the table

DeepSpeed ZeRO-3 makes ~4,000 such calls a step (current stream, stream contexts, stream and
event waits, event records and queries; counted under phantom), FSDP and Megatron's overlapped
communication fewer. Under phantom each is a Python function of the simulation, whose own time
on the simulating machine counts as the script's host time, scaled to the node; on a GPU host
each is a pybind call into the CUDA runtime. ZeRO-3's hooks came out charged 2-2.7x a real
host's time per call where they do little else. Each
case is timed as host microseconds per call: blocks of calls, a synchronize between blocks,
the median of the blocks; the parameter re-pointing and the empty tensors of ZeRO-3's
release path are timed the same way.
"""
from __future__ import annotations

import json
import time

import torch

from host_list_ops import _time, host_bench_cli


def cases() -> dict[str, float]:
    side = torch.cuda.Stream()
    event = torch.cuda.Event()
    event.record()
    x = torch.zeros(256, device="cuda")
    flat = torch.zeros(1 << 16, device="cuda")
    param = torch.nn.Parameter(torch.zeros(256, device="cuda"))
    buffers = [flat.narrow(0, 0, 256), flat.narrow(0, 256, 256)]
    flip = [0]

    def stream_context() -> None:
        with torch.cuda.stream(side):
            pass

    def repoint() -> None:  # ZeRO-3 and Megatron's buffers: `param.data = flat.narrow(...)`
        flip[0] ^= 1
        param.data = buffers[flip[0]]

    calls = 2000
    return {
        "perf_counter": _time(time.perf_counter, calls),
        "current_stream": _time(torch.cuda.current_stream, calls),
        "current_device": _time(torch.cuda.current_device, calls),
        "stream_context": _time(stream_context, calls),
        "event_new_record": _time(lambda: torch.cuda.Event().record(), calls),
        "event_record": _time(event.record, calls),
        "event_query": _time(event.query, calls),
        "stream_wait_event": _time(lambda: side.wait_event(event), calls),
        "stream_wait_stream": _time(lambda: side.wait_stream(torch.cuda.current_stream()), calls),
        "record_stream": _time(lambda: x.record_stream(side), calls),
        "synchronize_idle": _time(torch.cuda.synchronize, calls),
        "stream_synchronize_idle": _time(side.synchronize, calls),
        "event_synchronize_done": _time(event.synchronize, calls),
        "stream_query": _time(side.query, calls),
        "default_stream": _time(torch.cuda.default_stream, calls),
        "set_stream": _time(lambda: torch.cuda.set_stream(torch.cuda.default_stream()), calls),
        "event_wait": _time(lambda: event.wait(side), calls),
        "stream_new": _time(torch.cuda.Stream, calls),
        "param_data_repoint": _time(repoint, calls),
        "empty_0": _time(lambda: torch.empty(0, device="cuda"), calls),
        "narrow_view": _time(lambda: flat.narrow(0, 256, 256).view(16, 16), calls),
    }


def compare(real_path: str, sim_path: str) -> str:
    real, sim = json.loads(open(real_path).read()), json.loads(open(sim_path).read())
    lines = [f"real: {real['device']}, torch {real['torch']}; simulated: {sim['device']}, torch {sim['torch']}", "",
             "| call | real µs | phantom µs | phantom - real µs |", "|---|---|---|---|"]
    for case, r in real["results"].items():
        s = sim["results"].get(case)
        if s is not None:
            lines.append(f"| {case} | {r:.2f} | {s:.2f} | {s - r:+.2f} |")
    return "\n".join(lines)


def measure_all() -> dict[str, float]:
    results = cases()
    print({k: round(v, 2) for k, v in results.items()}, flush=True)
    return results


def main() -> None:
    host_bench_cli(__doc__, measure_all, compare)


if __name__ == "__main__":
    main()
