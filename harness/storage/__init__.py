"""Files that outlive a run: atomic writes and locks, goldens, the generation cache,
generations.jsonl and content fingerprints."""
