"""The published results shipped with the Muri traces.

Reads MURI_DIR/published_sim_results.csv (columns trace, policy, avg_jct_s,
makespan_s, p99_jct_s, ...; ../shared/traces/muri/SOURCE.md says where the
figures come from) for the tables of compare_policies.sh.
"""
import csv
import os


def published(muri_dir, policy=None):
    """Every published row by (trace, policy); with `policy`, that policy's
    rows by trace."""
    rows = {}
    with open(os.path.join(muri_dir, "published_sim_results.csv")) as f:
        for r in csv.DictReader(f):
            if policy is None:
                rows[(r["trace"], r["policy"])] = r
            elif r["policy"] == policy:
                rows[r["trace"]] = r
    return rows
