"""Distributed runs: the simulated NCCL process group and the coordinator that times it.

One process per simulated rank runs the user's script (as torchrun would start it). Each
collective a rank issues is sent to the coordinator in the launcher process
(`coordinator.py`), which waits for every member, checks that they called the same thing,
times it on the cluster's network (`phantom.network`) and answers each member with the
start and end times (and, for real CPU tensors and object collectives, the members'
payloads). The rank side (`comm.py`) places the collective on its rank's NCCL stream.

- `process_group.py`: `PhantomProcessGroup`, answering for `ProcessGroupNCCL`, and `SimWork`.
- `ops.py`: c10d and functional-collective ops caught in the dispatch mode (DTensor, FSDP2).
- `comm.py`: the rank side: sequence numbers, streams, payloads, the request to the coordinator.
- `coordinator.py`: matching, mismatch and deadlock diagnosis, network timing.
- `wire.py`: what travels between ranks and the coordinator.
"""
