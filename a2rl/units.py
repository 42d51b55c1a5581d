"""Byte units, one set for the whole package. Sizes a user sets or reads are binary: every `*_gb` key of the sweep
spec (storage.run_gb, limits.workspace_gb, resources.mem_gb, grader.max_file_gb, ...) is in GiB (2^30 bytes) and
every `*_mb` key in MiB (2^20), and every figure printed from them (capacity plan, `a2rl status`, HTTP 507's
message, validate's and the job's messages) says "GiB"/"MiB". GB (10^9) is kept for one record field only, the
ledger's `gigabytes` of weights lineage read (store/ledger.py), which has always been decimal."""

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
GB = 10**9  # decimal: only the ledger's `gigabytes` (lineage's bytes read)
