"""`make bench`: each bench_<name>.py prints one JSON object per line with a "bench" key."""
