"""`phantom profile`: record a script's op signatures under simulation (record.py), rebuild each
call with real CUDA tensors (rebuild.py) and time it on the real GPU (timing.py) in a separate
plain process, adding rows to a kernel database (phantom/cost/db.py)."""
