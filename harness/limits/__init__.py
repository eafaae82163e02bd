"""An engine's build limits: config.json layouts, the per-cell checks and KV-cache budget, lint."""
