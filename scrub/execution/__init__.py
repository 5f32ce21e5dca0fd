"""How the pipeline (`scrub.pipeline`) runs its work: local worker processes and the server they
are forked from (`workers`, `workerserver`), a supervised child for a partition that crashed
one (`isolation`), helpers that die with the scan (`lifeline`), and a dask.distributed
cluster (`cluster`). Knows no format, record or check."""
